"""What git would ignore under a root: ``.gitignore`` files (at any depth) and ``.git/info/exclude``.

Contract: :meth:`GitIgnore.is_ignored` answers for a path under the root as git does, closely enough for
deciding what to watch, list or search: ``.git`` itself is always ignored; a path is ignored when any
directory above it is (git cannot re-include a file inside an excluded directory); otherwise the
deepest ``.gitignore`` with a matching pattern decides (its last matching pattern, ``!`` re-including),
then ``.git/info/exclude``. Patterns are matched by :mod:`pathspec` (``GitIgnoreSpec``, git's own
edge cases). Not read: the global ``core.excludesFile``, which depends on the user's git config.

``.gitignore`` files are read lazily, once per directory, and cached; :meth:`GitIgnore.forget` drops
the cache when one changes (the root watcher calls it).
"""

from __future__ import annotations

import os
import threading

import pathspec

_MAX_IGNORE_FILE_BYTES = 1024 * 1024
"""A bigger ``.gitignore`` is not read (it is data, not rules)."""


class GitIgnore:
    """The ignore rules of one root (an absolute, resolved directory)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._lock = threading.Lock()  # the watcher asks from its thread, tools from theirs

    def is_ignored(self, path: str, *, is_dir: bool = False) -> bool:
        """Whether git ignores ``path`` (absolute, or relative to the root). Paths outside the root and
        the root itself are not ignored."""
        parts = self._parts(path)
        if parts is None or not parts:
            return False
        if any(part.lower() == ".git" for part in parts):
            return True
        return any(self._match(parts[:depth], depth < len(parts) or is_dir) for depth in range(1, len(parts) + 1))

    def forget(self, directory: str | None = None) -> None:
        """Re-read ``directory``'s ``.gitignore`` (absolute or relative) next time; all of them if None."""
        with self._lock:
            if directory is None:
                self._specs.clear()
                return
            parts = self._parts(directory)
            if parts is not None:
                self._specs.pop("/".join(parts), None)
                if parts == [".git", "info"] or parts == [".git"]:
                    self._specs.pop(_EXCLUDE_KEY, None)

    # -- internals ------------------------------------------------------------------------------------

    def _parts(self, path: str) -> list[str] | None:
        if not path.startswith("/"):
            return [part for part in path.split("/") if part and part != "."]
        if path == self.root:
            return []
        prefix = self.root if self.root == "/" else self.root + "/"
        if not path.startswith(prefix):
            return None
        return [part for part in path[len(prefix) :].split("/") if part]

    def _match(self, parts: list[str], is_dir: bool) -> bool:
        """Whether the rules exclude exactly this path (its parents not considered)."""
        suffix = "/" if is_dir else ""
        # The deepest .gitignore overrides those above it; within a file the last match wins.
        for depth in range(len(parts) - 1, -1, -1):
            spec = self._spec("/".join(parts[:depth]))
            if spec is not None:
                verdict = spec.check_file("/".join(parts[depth:]) + suffix).include
                if verdict is not None:
                    return verdict
        exclude = self._spec(_EXCLUDE_KEY)
        if exclude is not None:
            verdict = exclude.check_file("/".join(parts) + suffix).include
            if verdict is not None:
                return verdict
        return False

    def _spec(self, key: str) -> pathspec.GitIgnoreSpec | None:
        with self._lock:
            if key in self._specs:
                return self._specs[key]
        if key == _EXCLUDE_KEY:
            file = os.path.join(self.root, ".git", "info", "exclude")
        else:
            file = os.path.join(self.root, key, ".gitignore")
        spec = _load(file)
        with self._lock:
            self._specs[key] = spec
        return spec


_EXCLUDE_KEY = "\x00exclude"  # no directory has this name


def _load(file: str) -> pathspec.GitIgnoreSpec | None:
    try:
        with open(file, "rb") as handle:
            data = handle.read(_MAX_IGNORE_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > _MAX_IGNORE_FILE_BYTES:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    try:
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:  # a malformed pattern must not stop the watcher; git skips such lines too
        spec = pathspec.GitIgnoreSpec.from_lines([line for line in lines if _valid(line)])
    return spec if spec.patterns else None


def _valid(line: str) -> bool:
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except Exception:
        return False
    return True
