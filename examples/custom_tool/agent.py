"""refagent with one more tool: run this instead of ``refagent``.

    python examples/custom_tool/agent.py [any refagent flag: --model, --log-file, --demo ...]

Editors start it like refagent itself (``command``: this Python, ``args``: this file). It is refagent's own
command line (:mod:`refagent.cli`) with one change, :func:`register`: the settings' tool list is
refagent's tools plus :class:`outline.Outline`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this directory: where outline.py is

from outline import Outline

from refagent import cli
from refagent.settings import Settings
from refagent.tools.registry import default_tools


def register(settings: Settings) -> Settings:
    """The registration: every session gets refagent's tools and ours (also once ``authenticate`` has read
    the configuration again)."""
    reload = settings.reload
    return dataclasses.replace(
        settings,
        tools=lambda: [*default_tools(), Outline()],
        reload=(lambda: register(reload())) if reload is not None else None,
    )


def main() -> int:
    args = cli.build_parser().parse_args()
    cli.setup_logging(args.log_level, args.log_file)
    return cli.serve_stdio(register(cli.demo_settings() if args.demo else cli.load_settings(args)))


if __name__ == "__main__":
    sys.exit(main())
