"""System prompt templates, shipped as package data (``system.md``); see :mod:`refagent.session.system_prompt`."""
