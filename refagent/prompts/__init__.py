"""System prompt templates, shipped as package data (``system.md``, ``tools.md``, ``environment.md``); see
:mod:`refagent.session.system_prompt`."""
