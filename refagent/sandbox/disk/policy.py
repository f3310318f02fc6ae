"""The path policy: where a model-given path really points, and whether the file tools may touch it.

Contract (:class:`refagent.sandbox.seams.PathPolicy`): :meth:`RootPolicy.resolve` turns a model-given path
into a :class:`~refagent.sandbox.seams.ResolvedPath` — absolute, normalised, every symbolic link resolved —
and says whether it lies inside the session roots ``[cwd, *additional_roots]``. Reads outside are not
refused here: the tool asks the user (``inside=False``). :meth:`RootPolicy.check_write` refuses outright
what the file tools must never change: anything outside the roots, anything in or named ``.git``, and a
root itself (or a directory containing one).

Security reasoning (the file tools' half of docs/sandbox.md):

* Paths are resolved against the *session* cwd, never the process cwd, and ``..`` is applied after the
  symbolic links before it are resolved, as the kernel does (``link/..`` is the parent of the link's
  target). Every component is ``lstat``-ed and followed by hand (at most 40 links, like Linux), so a loop
  is a clean :class:`ToolError`, and a component that does not exist (yet) ends the physical walk: the
  rest is appended lexically, which is exactly the path a later ``mkdir -p`` and write will create.
* The returned ``path`` contains no symbolic link at all. Callers must act on ``ResolvedPath.path``,
  never on the model's string: what was checked is then what is used. The remaining time-of-check /
  time-of-use gap (a component swapped for a link after the check) is closed by
  :class:`refagent.sandbox.disk.local_fs.LocalFileSystem`, which opens every component with ``O_NOFOLLOW``.
* The roots are resolved the same way, once, so a root reached through a link (``/tmp`` on macOS) works.
* "Inside" is a prefix test on resolved paths component by component, so ``/work/proj2`` is not inside
  ``/work/proj``. The test is case-sensitive: on a case-insensitive file system a differently-cased
  spelling is judged outside (it fails closed: a read is asked for, a write refused). The ``.git`` test
  is case-insensitive, because ``.GIT`` *is* ``.git`` on such a file system.
* ``~`` is not expanded (the model's shell habits must not decide where files go), and a path whose first
  component is ``~`` (or ``~user`` naming a real user) is refused with a hint, rather than silently
  creating a directory named ``~`` in the project. Other names starting with ``~`` are ordinary names.
* Invalid input is a ToolError, never an OSError traceback: empty paths, NUL bytes, text that cannot be
  encoded for the file system (lone surrogates), paths over 4096 bytes or components over 255 bytes.
* Look-alike Unicode (fullwidth dots ``．．``, combining marks, right-to-left marks) needs no special
  case for safety: only ``..`` is the parent directory, so such names stay inside. But they can make a
  permission title lie about *which* file is meant, so ``display`` shows control, format (bidi,
  zero-width) and separator characters as ``\\u202e``-style escapes.

``check_write`` and ``resolve`` take ``follow_symlinks``: ``False`` places the final component itself
(for deleting or moving a link, not its target), like ``lstat``; the directories above are still resolved.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from collections.abc import Sequence

from refagent.errors import ToolError
from refagent.sandbox.seams import ResolvedPath
from refagent.sandbox.within import within

MAX_PATH_BYTES = 4096
"""Linux ``PATH_MAX``: longer paths cannot be used in one system call."""
MAX_NAME_BYTES = 255
"""``NAME_MAX`` of every common file system."""
MAX_SYMLINK_HOPS = 40
"""Linux gives up with ``ELOOP`` after 40 links in one lookup; so do we."""

_GIT_DIR = ".git"


class RootPolicy:
    """The sandbox boundary of one session: the roots ``[cwd, *additional_roots]``.

    ``cwd`` and the additional roots must be absolute (the protocol requires it; a relative root would
    depend on the process cwd). They are resolved once, here.
    """

    def __init__(self, cwd: str, additional_roots: Sequence[str] = (), private: Sequence[str] = ()) -> None:
        for root in (cwd, *additional_roots):
            if not os.path.isabs(root):
                raise ValueError(f"workspace roots must be absolute paths, got {root!r}")
        self.cwd = _realpath(cwd)
        """The session cwd, resolved."""
        roots: list[str] = []
        for root in (cwd, *additional_roots):
            real = _realpath(root)
            if real not in roots:
                roots.append(real)
        self.roots: tuple[str, ...] = tuple(roots)
        """The roots, resolved; the cwd first."""
        self.private: tuple[str, ...] = tuple(
            real for real in (_realpath(path) for path in private if os.path.isabs(path)) if self.is_inside(real)
        )
        """Paths inside the roots that are not the workspace's: the agent's own files and the user's
        credentials, when a root holds them (a session in ``$HOME``). They count as outside: reading
        one asks, writing one is refused (commands never see them: docs/sandbox.md)."""

    # -- the PathPolicy protocol ----------------------------------------------------------------------

    def resolve(self, path: str, *, follow_symlinks: bool = True) -> ResolvedPath:
        """Resolve a model-given path (relative to the session cwd, or absolute) and place it.

        Raises :class:`ToolError` for an invalid path (empty, NUL byte, too long, a symlink loop, ``~``).
        """
        absolute = self._absolute(path)
        real = self._realpath_for(absolute, follow_symlinks)
        inside = self.is_inside(real) and not self.is_private(real)
        return ResolvedPath(path=real, inside=inside, display=self.display(real))

    def check_write(self, path: str, *, follow_symlinks: bool = True) -> ResolvedPath:
        """Resolve a path about to be created, changed, deleted or moved; ToolError if it may not be.

        Refused: a target outside the roots (also when a symbolic link leads there), anything inside a
        ``.git`` directory or named ``.git``, a root itself or a directory that contains a root, and a
        :attr:`private` path or a directory that contains one.
        Pass ``follow_symlinks=False`` to delete or move a symbolic link itself.
        """
        resolved = self.resolve(path, follow_symlinks=follow_symlinks)
        real = resolved.path
        if not resolved.inside:
            raise ToolError(self._outside_message(path, real))
        for root in self.roots:
            if real == root:
                raise ToolError(
                    f"'{resolved.display}' is a workspace root ({_printable(root)}); the file tools cannot "
                    "delete, move or replace a root. Work on the files inside it."
                )
            if within(root, real):
                raise ToolError(
                    f"'{resolved.display}' contains the workspace root {_printable(root)}; the file tools "
                    "cannot delete, move or replace it."
                )
        for private in self.private:
            if within(private, real):  # moved away, what it holds could be made anew in its place
                raise ToolError(
                    f"'{resolved.display}' contains {_printable(private)}, which is private (the agent's own files "
                    "or the user's credentials); the file tools cannot delete, move or replace it."
                )
        for root in self.roots:
            if within(real, root) and _GIT_DIR in (part.lower() for part in _relative_parts(real, root)):
                raise ToolError(
                    f"'{resolved.display}' is inside a .git directory; .git internals cannot be edited by "
                    "the file tools. Use git through run_command to change the repository (at level `none`: "
                    "the sandbox holds .git read-only)."
                )
        return resolved

    # -- helpers other code may use ---------------------------------------------------------------------

    def is_inside(self, real_path: str) -> bool:
        """Whether an already resolved absolute path lies in one of the roots (or is one)."""
        return any(within(real_path, root) for root in self.roots)

    def is_private(self, real_path: str) -> bool:
        """Whether an already resolved absolute path is, or lies in, one of the :attr:`private` paths."""
        return any(within(real_path, path) for path in self.private)

    def display(self, real_path: str) -> str:
        """How to show a resolved path: relative to the cwd when inside it (``.`` for the cwd), else
        absolute; control and invisible characters escaped so a title cannot disguise the file."""
        if within(real_path, self.cwd):
            shown = os.path.relpath(real_path, self.cwd) if real_path != self.cwd else "."
        else:
            shown = real_path
        return _printable(shown)

    # -- internals ---------------------------------------------------------------------------------------

    def _absolute(self, path: str) -> str:
        if not isinstance(path, str):
            raise ToolError(f"A path must be a string, got {type(path).__name__}.")
        if not path:
            raise ToolError("The path is empty. Give a path relative to the working directory, or an absolute one.")
        if "\x00" in path:
            raise ToolError(f"The path {_printable(path)!r} contains a NUL byte; no file can have that name.")
        try:
            encoded = os.fsencode(path)
        except UnicodeEncodeError:
            raise ToolError(
                f"The path {_printable(path)!r} contains characters that cannot be used in a file name "
                "(an unpaired surrogate)."
            ) from None
        if len(encoded) > MAX_PATH_BYTES:
            raise ToolError(
                f"The path is {len(encoded)} bytes long; paths are limited to {MAX_PATH_BYTES} bytes. "
                "Use a shorter path."
            )
        for part in encoded.split(b"/"):
            if len(part) > MAX_NAME_BYTES:
                name = _printable(os.fsdecode(part[:40]))
                raise ToolError(
                    f"A path component ('{name}...', {len(part)} bytes) is longer than {MAX_NAME_BYTES} "
                    "bytes, the limit for one file name."
                )
        first = path.split("/", 1)[0]
        if first == "~" or (first.startswith("~") and os.path.expanduser(first) != first):
            raise ToolError(
                f"The path {_printable(path)!r} starts with '{_printable(first)}', which is not expanded here "
                f"(it is no shell). Use an absolute path, or a path relative to the working directory "
                f"{_printable(self.cwd)}."
            )
        return os.path.join(self.cwd, path)

    def _realpath_for(self, absolute: str, follow_symlinks: bool) -> str:
        if not follow_symlinks:
            parent, name = os.path.split(absolute.rstrip("/"))
            if name not in ("", ".", ".."):
                real_parent = _realpath(parent or "/")
                return _check_length(os.path.join(real_parent, name))
        return _realpath(absolute)

    def _outside_message(self, given: str, real: str) -> str:
        if self.is_private(real):
            return (
                f"'{_printable(real)}' holds the agent's own files or the user's credentials, which the file "
                "tools do not change."
            )
        roots = ", ".join(_printable(root) for root in self.roots)
        lexical = os.path.normpath(os.path.join(self.cwd, given))
        via_link = self.is_inside(lexical) and lexical != real
        where = (
            f"'{_printable(given)}' resolves through a symbolic link to '{_printable(real)}', which is"
            if via_link
            else f"'{_printable(real)}' is"
        )
        return (
            f"{where} outside the workspace roots ({roots}); writes there are not allowed. Work inside the "
            "workspace, or ask the user to add that directory to the session."
        )


def _realpath(path: str) -> str:
    """``os.path.realpath`` for an absolute path, with a clean ToolError for loops and long names.

    Follows every symbolic link (also dangling ones, whose target then does not exist), applies ``..``
    physically, and keeps components that do not exist as they are.
    """
    pending = _components(path)
    pending.reverse()  # a stack: the next component is at the end
    resolved = "/"
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            info = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            # Nothing there (yet), or a part of it we may not search: the kernel cannot go further
            # either, so what will be created is this lexical path.
            resolved = candidate
            continue
        except OSError as exc:
            raise _os_error(candidate, exc) from None
        if not stat.S_ISLNK(info.st_mode):
            resolved = candidate
            continue
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            raise ToolError(
                f"Too many levels of symbolic links at '{_printable(candidate)}' (a loop?); this path cannot be used."
            )
        try:
            target = os.readlink(candidate)
        except OSError as exc:
            raise _os_error(candidate, exc) from None
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(_components(target)))
    return _check_length(resolved)


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _check_length(path: str) -> str:
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise ToolError(
            f"The path resolves to a path longer than {MAX_PATH_BYTES} bytes "
            f"('{_printable(path[:60])}...'); it cannot be used."
        )
    return path


def _os_error(path: str, exc: OSError) -> ToolError:
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"The path '{_printable(path[:60])}...' is too long for the file system.")
    return ToolError(f"Cannot resolve '{_printable(path)}': {exc.strerror or exc}.")


def _relative_parts(path: str, root: str) -> list[str]:
    return _components(path[len(root) :])


_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _printable(text: str) -> str:
    """``text`` with control, format (bidi overrides, zero-width), surrogate, private, unassigned and
    line/paragraph separator characters written as escapes, so it reads as what it is."""
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if unicodedata.category(char) in _ESCAPED_CATEGORIES:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)
