"""Custom tools named in the config file: ``tools = ["module:Class", ...]`` (see :mod:`refagent.config.custom_tools`).

:class:`CustomTools` is a session's tool list: the built-in tools, then one fresh instance of each custom
class, in the config's order. The modules are imported the first time the list is built (when the first
session opens, long after ``initialize`` was answered), from the interpreter's own path and then the
config's ``tool_path`` directories, which are appended to ``sys.path`` then: a tool module can never
shadow a module refagent or the standard library already uses.

Nothing a custom tool gets wrong stops the agent. An entry that is not ``module:Class``, a module that
fails to import, a missing class, a class that is not a :class:`~refagent.tools.base.BaseTool`, a
constructor that raises, a tool the model could not be offered (no name, description or schema object)
and a name already taken (by a built-in tool or an earlier custom one) each leave that tool out. The
problem is logged once, as a warning, and kept in :attr:`CustomTools.problems`, which the agent tells the
user when a session opens.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from refagent.sandbox.confine.confinement import add_own_code
from refagent.tools.base import MAX_NAME_LENGTH, NAME_CHARS, BaseTool
from refagent.tools.registry import default_tools

__all__ = ["CustomTools"]

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")
_TOOL_NAME = re.compile(f"^[{NAME_CHARS}]{{1,{MAX_NAME_LENGTH}}}$")


class CustomTools:
    """Callable: the built-in tools plus the custom ones that work (fresh instances on every call)."""

    def __init__(
        self,
        entries: Sequence[str],
        path: Sequence[Path] = (),
        builtin: Callable[[], Sequence[BaseTool]] = default_tools,
    ) -> None:
        self.entries = list(entries)
        self.path = list(path)
        self.builtin = builtin
        self.problems: list[str] = []
        """One line per tool left out, for the user; each was logged once."""
        self._classes: list[tuple[str, type[BaseTool]]] | None = None

    def __call__(self) -> list[BaseTool]:
        tools = list(self.builtin())
        if self._classes is None:
            self._classes = self._import()
        builtin = {tool.name for tool in tools}
        custom: dict[str, str] = {}  # name -> entry
        for entry, cls in self._classes:
            try:
                tool = cls()
            except Exception as exc:
                self._problem(entry, f"{cls.__name__}() failed: {_describe(exc)}")
                continue
            wrong = _unusable(tool)
            if wrong is None and tool.name in builtin:
                wrong = f"its name {tool.name!r} is taken by a built-in tool"
            elif wrong is None and tool.name in custom:
                wrong = f"its name {tool.name!r} is taken by the custom tool {custom[tool.name]!r}"
            if wrong is not None:
                self._problem(entry, wrong)
                continue
            custom[tool.name] = entry
            tools.append(tool)
        return tools

    def _import(self) -> list[tuple[str, type[BaseTool]]]:
        """The classes the entries name; entries that name none are reported and left out."""
        for directory in self.path:
            if str(directory) not in sys.path:
                sys.path.append(str(directory))
        importlib.invalidate_caches()  # directories created since the interpreter started are seen
        classes = []
        for entry in self.entries:
            match = _ENTRY.match(entry.strip())
            if match is None:
                self._problem(entry, 'not "module:Class" (e.g. "outline:Outline")')
                continue
            module_name, class_name = match.groups()
            try:
                module = importlib.import_module(module_name)
            except (Exception, SystemExit) as exc:  # whatever the module does at import time
                self._problem(entry, f"importing {module_name} failed: {_describe(exc)}{self._searched()}")
                continue
            cls = getattr(module, class_name, None)
            where = f"{module_name} ({getattr(module, '__file__', None) or 'no file'})"
            self._own(module)
            if cls is None:
                self._problem(entry, f"{where} has no {class_name}")
            elif not isinstance(cls, type) or not issubclass(cls, BaseTool):
                self._problem(entry, f"{class_name} in {where} is not a subclass of refagent.tools.base.BaseTool")
            else:
                classes.append((entry, cls))
        return classes

    def _own(self, module: object) -> None:
        """The tool's module (a package's whole directory) and the ``tool_path`` directories are the
        agent's own code now: commands get them read-only, the file tools ask before changing them
        (:func:`refagent.sandbox.confine.confinement.add_own_code`), as the next start imports them."""
        file = getattr(module, "__file__", None)
        paths = [str(directory) for directory in self.path]
        if isinstance(file, str):
            paths.append(os.path.dirname(file) if os.path.basename(file) == "__init__.py" else file)
        add_own_code(paths)

    def _searched(self) -> str:
        if not self.path:
            return " (no tool_path in the config file)"
        return f" (tool_path: {', '.join(map(str, self.path))})"

    def _problem(self, entry: str, problem: str) -> None:
        message = f"custom tool {entry!r} left out: {problem}"
        if message not in self.problems:  # a constructor fails again for every session: said once
            # Info only: the session tells the user (refagent run shares the agent's stderr: no second time).
            log.info("%s", message)
            self.problems.append(message)


def _unusable(tool: BaseTool) -> str | None:
    """Why the model could not be offered ``tool`` (which would break every request), or None."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        return f"its name must be 1-{MAX_NAME_LENGTH} letters, digits, '_' or '-', not {name!r}"
    if not isinstance(getattr(tool, "description", None), str):
        return "it has no description (a string)"
    parameters = getattr(tool, "parameters", None)
    if not isinstance(parameters, dict):
        return "its parameters must be a JSON schema object (a dict)"
    try:
        json.dumps(parameters)
    except (TypeError, ValueError) as exc:
        return f"its parameters cannot be sent as JSON: {exc}"
    return None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
