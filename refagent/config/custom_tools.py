"""The custom tools the config file names, as written: they are only listed here, never imported::

    tools = ["outline:Outline"]   # each "module:Class", a refagent.tools.base.BaseTool subclass
    tool_path = ["tools"]         # where their modules are, relative to the config file (default: none)

Each ``tools`` entry is imported (from the interpreter's path, then ``tool_path``) and instantiated with no
arguments when the first session opens, not here; a tool that cannot be used is left out and reported
(:mod:`refagent.tools.custom`, through :class:`refagent.settings.ConfiguredTools`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from refagent.config.file import strings

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["tool_directories", "tool_entries"]


def tool_entries(data: Mapping[str, Any], source: str) -> list[str]:
    """The file's ``tools``, as written (empty: none). Raises :class:`~refagent.errors.ConfigError` for a
    value that is not a list of strings; the entries themselves are checked when imported."""
    return strings(data, "tools", source)


def tool_directories(data: Mapping[str, Any], config_file: str, source: str, warnings: list[str]) -> list[Path]:
    """The file's ``tool_path`` entries as absolute paths: ``~`` expanded, relative ones from the config
    file's directory. An entry whose ``~`` cannot be expanded (no home directory) is left out, with a
    warning. Raises :class:`~refagent.errors.ConfigError` for a value that is not a list of strings."""
    entries = strings(data, "tool_path", source)
    if not entries:
        return []
    from pathlib import Path  # here: a file with tool_path only; not before the first answer (2.9 ms)

    directories = []
    for entry in entries:
        try:
            expanded = Path(entry).expanduser()
        except RuntimeError:  # "~" with no home directory (a trimmed environment)
            warnings.append(f"{source}: tool_path entry {entry!r}: no home directory to expand ~ in (ignored)")
            continue
        directories.append((Path(config_file).parent / expanded).absolute())
    return directories
