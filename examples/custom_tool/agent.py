"""refagent with one more tool: run this instead of ``refagent``.

    python examples/custom_tool/agent.py [any refagent flag: --model, --log-file, --demo ...]

Editors start it like refagent itself (``command``: this Python, ``args``: this file). It is refagent's own
command line, :func:`refagent.cli.main`, with one change, :func:`customise`: every session's tools are the
configured ones plus :class:`outline.Outline`. ``cli.main`` applies it to every settings the agent runs with,
those ``authenticate`` reads again included.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this directory: where outline.py is

from outline import Outline

from refagent import cli
from refagent.settings import Settings


def customise(settings: Settings) -> Settings:
    """The settings refagent made, with :class:`Outline` after their tools (the built-in ones, and any the
    config file names)."""
    tools = settings.tools
    return dataclasses.replace(settings, tools=lambda: [*tools(), Outline()])


if __name__ == "__main__":
    sys.exit(cli.main(customise=customise))
