"""The default tool set (the README lists them): one instance of each tool, in a stable order.

The order is the order the model sees the tools in: reading and searching first, then changing, then
running, then planning, and asking the user last (a last resort, after the model has looked for itself).
"""

from __future__ import annotations

from collections.abc import Iterable

from refagent.tools.ask import AskUser
from refagent.tools.background import CommandOutput, StopCommand
from refagent.tools.base import BaseTool
from refagent.tools.fetch import Fetch
from refagent.tools.files import EditFile, ReadFile, WriteFile
from refagent.tools.patch import ApplyPatch
from refagent.tools.paths import DeletePath, MovePath
from refagent.tools.plan import UpdatePlan
from refagent.tools.search import Glob, Grep
from refagent.tools.shell import RunCommand


def default_tools(fetch_allow: Iterable[str] = ()) -> list[BaseTool]:
    """A fresh instance of every built-in tool; ``fetch_allow``: what ``fetch`` may reach though not public."""
    return [
        ReadFile(),
        Glob(),
        Grep(),
        Fetch(allow=fetch_allow),
        EditFile(),
        WriteFile(),
        ApplyPatch(),
        DeletePath(),
        MovePath(),
        RunCommand(),
        CommandOutput(),
        StopCommand(),
        UpdatePlan(),
        AskUser(),
    ]


def by_name(tools: Iterable[BaseTool] | None = None) -> dict[str, BaseTool]:
    """``tools`` (default: :func:`default_tools`) keyed by name; ValueError on a duplicate name."""
    named: dict[str, BaseTool] = {}
    for tool in default_tools() if tools is None else tools:
        if tool.name in named:
            raise ValueError(f"two tools are named {tool.name!r}")
        named[tool.name] = tool
    return named
