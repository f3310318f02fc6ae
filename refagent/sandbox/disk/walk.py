"""Reaching a checked path on the local disk without following a symbolic link: the descriptor walk every
operation of :class:`refagent.sandbox.disk.local_fs.LocalFileSystem` goes through, and its error translation.

Contract: paths are absolute and come from the path policy (``ResolvedPath.path``): normalised, with no
symbolic link in any component. These functions block (the file system calls them in worker threads).

Time of check to time of use. The policy checks a path, then (maybe after a permission prompt) a tool
uses it. Meanwhile a command, the user or an editor may swap a directory on that path for a symbolic link
to somewhere outside the workspace. Re-checking with ``realpath`` just before the write would only narrow
that window, so every operation walks the path from ``/`` with ``openat(..., O_NOFOLLOW | O_DIRECTORY)``
(``O_PATH`` where the OS has it, so a directory we may search but not list still works) and does the
final step relative to that directory descriptor (``dir_fd``). Since the checked path had no links,
meeting one is proof that something changed: the call is refused with :class:`LinkInPath` (a
:class:`~refagent.errors.ToolError`) and nothing is written, read or deleted. The final component is
opened with ``O_NOFOLLOW`` too (a file swapped for a link is refused), and ``os.replace`` / ``unlink`` act
on the directory entry itself, never on what a link points to. What this cannot prevent: a directory that
was inside the workspace being *moved* out of it after we opened it; the write then lands in that
directory, not in a place of the attacker's choice.

A write or move that makes parent directories (``open_dir(create=True, made=...)``) and then fails
removes the ones it made (:func:`remove_made`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from refagent.errors import ToolError
from refagent.sandbox.disk.safe_open import descend

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_PATH = getattr(os, "O_PATH", 0)
# O_PATH where there is one: a directory we may search but not list can still be walked through.
_DIR_OPEN_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC
FILE_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC
"""Opening a file to read it (or copy it): never through a final link, and O_NONBLOCK so that a FIFO
does not block the open."""


class LinkInPath(ToolError):
    """A component of a checked (link-free) path is a symbolic link now."""

    def __init__(self, path: str, component: str) -> None:
        super().__init__(
            f"'{component}' is a symbolic link, but '{path}' had none when it was checked: it changed since "
            "(a command, the user or another program). Nothing was done; check the path and try again."
        )


def split_path(path: str) -> tuple[str, str]:
    """(parent directory, final name) of a normalised absolute path."""
    if not path.startswith("/"):
        raise ToolError(f"Internal error: the file system was given a relative path ({path!r}).")
    parent, name = os.path.split(path.rstrip("/"))
    return parent or "/", name


def open_dir(path: str, *, create: bool = False, whole: str | None = None, made: list[str] | None = None) -> int:
    """A descriptor for the directory ``path``, reached without following any symbolic link.

    ``create`` makes missing directories (``mkdir -p``), appending each one it made to ``made`` (so a
    caller that then fails can remove them: :func:`remove_made`). Raises FileNotFoundError (missing),
    NotADirectoryError (a component is not a directory; ``filename`` says which), or :class:`LinkInPath`.
    """
    walked = ""

    def open_child(fd: int, name: str) -> int:
        nonlocal walked
        if name in (".", ".."):
            raise ToolError(f"Internal error: the file system was given a path that is not normalised ({path!r}).")
        walked += "/" + name
        try:
            return os.open(name, _DIR_OPEN_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            # Made by someone else in the meantime? Then open that (still without following links).
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
                if made is not None:
                    made.append(walked)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
        return _open_child_dir(fd, name, walked, whole or path)

    return descend(os.open("/", _DIR_OPEN_FLAGS), (part for part in path.split("/") if part), open_child)


def _open_child_dir(dir_fd: int, name: str, walked: str, whole: str) -> int:
    """Open ``name`` in ``dir_fd`` as a directory, explaining why not when it is something else."""
    try:
        return os.open(name, _DIR_OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise LinkInPath(whole, walked)
    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", walked)


def os_error(doing: str, path: str, exc: OSError) -> ToolError:
    """``exc``, raised while ``doing`` something to ``path``, in words for the model (naming the component
    that failed when it is not ``path`` itself)."""
    where = f" ('{exc.filename}')" if exc.filename and exc.filename != path else ""
    return ToolError(f"Cannot {doing} {path}: {exc.strerror or exc}{where}.")


def kind_name(mode: int) -> str:
    """What a file of ``mode`` that is not a regular file or a directory is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


def fsync_dir(dir_fd: int) -> None:
    """Make a rename durable. Best effort: the descriptor may be O_PATH, and not every FS allows it."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_parent(path: str, doing: str, *, create: bool = False, made: list[str] | None = None) -> tuple[int, str]:
    """The descriptor of ``path``'s directory (walked without links) and the final name."""
    parent, name = split_path(path)
    if not name:
        raise ToolError(f"Cannot {doing} '/'.")
    try:
        return open_dir(parent, create=create, whole=path, made=made), name
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"Cannot {doing} {path}: it does not exist.") from None
    except OSError as exc:
        raise os_error(doing, path, exc) from None


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry ``name`` of ``dir_fd`` itself (a link is not followed); None if there is none."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def remove_dir(path: str) -> None:
    """Remove the empty directory ``path``; ToolError if it is not an empty directory."""
    dir_fd, name = open_parent(path, "remove")
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error("remove the directory", path, exc) from None
    finally:
        os.close(dir_fd)


def remove_made(made: list[str]) -> None:
    """Remove the directories a failed write or move made (deepest first), those still empty."""
    for path in reversed(made):
        with contextlib.suppress(ToolError):
            remove_dir(path)
