"""The local file system (:class:`refagent.sandbox.seams.Disk`): text reads and atomic writes, kinds,
deletes, moves, and paged reads of big files.

Contract: paths are absolute and come from the path policy (``ResolvedPath.path``): normalised, with no
symbolic link in any component. Blocking I/O runs in worker threads (``anyio.to_thread``). Errors the
model can act on are :class:`~refagent.errors.ToolError` with a message for it; ``read_text`` and
``read_lines`` raise ``FileNotFoundError`` for a missing file, as the protocol says.

Time of check to time of use. The policy checks a path, then (maybe after a permission prompt) a tool
uses it. Meanwhile a command, the user or an editor may swap a directory on that path for a symbolic link
to somewhere outside the workspace. Re-checking with ``realpath`` just before the write would only narrow
that window, so every operation here walks the path from ``/`` with ``openat(..., O_NOFOLLOW |
O_DIRECTORY)`` (``O_PATH`` where the OS has it, so a directory we may search but not list still works)
and does the final step relative to that directory descriptor (``dir_fd``). Since the checked path had
no links, meeting one is proof that something changed: the call is refused with a ToolError and nothing
is written, read or deleted. The final component is opened with ``O_NOFOLLOW`` too (a file swapped for a
link is refused), and ``os.replace`` / ``unlink`` act on the directory entry itself, never on what a
link points to. What this cannot prevent: a directory that was inside the workspace being *moved* out of
it after we opened it; the write then lands in that directory, not in a place of the attacker's choice.

Writes are atomic: a temporary file (``.~refagent-<random>.tmp``, see :data:`TEMP_PREFIX`) in the same
directory, written, fsynced, given the old file's permission bits (and owner, when we may), then
``os.replace``-d over the target; the directory is fsynced after. A new file gets ``0o666 & ~umask``.
Replacing breaks hard links (the other names keep the old content) and drops extended attributes; the
setuid/setgid bits are not kept (the kernel clears them on any write too).

``delete`` never follows a link: a link is unlinked, and a directory tree is removed with the same
descriptor walk, so a subdirectory swapped for a link mid-way is unlinked, not descended into.
``move`` refuses an existing destination (checked just before ``rename``: a file created in that
instant could still be replaced; Python has no ``RENAME_NOREPLACE``). Across file systems, where
``rename`` cannot go, it copies through descriptors to a temporary name beside the destination, renames
that into place and then deletes the source (see :func:`_move_across` for what that can and cannot undo).

Nothing half done. A recursive delete first walks the whole tree (through descriptors, as above) and
refuses before deleting anything when the tree holds a ``.git`` (:data:`PROTECTED_NAME`) or a directory
whose entries we may not remove; the deleting walk then checks every directory again before it removes
anything in it, so a ``.git`` that appears in between is never deleted either, and the error says exactly
what was deleted before it stopped. A move of a tree that holds a ``.git`` is refused, checked before the
``rename`` and again on the moved tree (which is then moved back). A write or move that fails after
making parent directories removes the ones it made.

This module is longer than most (its paged reader and tree walks included): every operation goes
through the same descriptor walk and error translation, and keeping them together keeps the
time-of-check reasoning in one place.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio.to_thread

from refagent.errors import ToolError

TEMP_PREFIX = ".~refagent-"
"""Names of our temporary files start with this (the root watcher ignores them)."""
TEMP_SUFFIX = ".tmp"

PROTECTED_NAME = ".git"
"""A recursive delete or a move never takes an entry of this name (in any case) along: a git repository's
``.git`` directory, or a submodule's or worktree's ``.git`` file, at any depth. The path policy keeps the
file tools out of ``.git`` itself; this keeps a tree operation from taking one with it."""

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes marks a file as binary (git's heuristic)."""

_CHUNK = 64 * 1024
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_PATH = getattr(os, "O_PATH", 0)
_DIR_OPEN_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
_FILE_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LinePage:
    """Lines ``first``..``first + len(lines) - 1`` of a file, line endings stripped.

    The same fields as ``refagent.tools.files.Page``, which this satisfies.
    """

    lines: list[str]
    first: int
    more: bool
    """There are lines after this page."""
    total: int | None = None
    """The number of lines in the file, when known without reading all of it."""
    size: int | None = None
    """The file's size in bytes."""
    text: str | None = None
    """The whole file, when it was small enough to read whole and is valid UTF-8."""


class LocalFileSystem:
    """The local disk. ``max_text_bytes`` bounds what ``read_text`` loads whole; files up to
    ``whole_file_bytes`` are read whole by ``read_lines`` too (so the read tracker can record them)."""

    def __init__(self, *, max_text_bytes: int = 64 * 1024 * 1024, whole_file_bytes: int = 2 * 1024 * 1024) -> None:
        self.max_text_bytes = max_text_bytes
        self.whole_file_bytes = whole_file_bytes

    # -- TextFiles ------------------------------------------------------------------------------------

    async def read_text(self, path: str) -> str:
        """The file as UTF-8 text (line endings untouched). FileNotFoundError if missing; ToolError for a
        directory, a non-regular file, binary content, invalid UTF-8, or a file over ``max_text_bytes``."""
        return await _in_thread(lambda: self._read_text(path))

    async def write_text(self, path: str, content: str) -> None:
        """Write ``content`` as UTF-8, atomically; parent directories are created."""
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(
                f"The content for {path} contains a character that cannot be written as UTF-8 "
                f"(an unpaired surrogate at offset {exc.start}); nothing was written."
            ) from None
        await _in_thread(lambda: _write_atomic(path, data))

    # -- Disk -------------------------------------------------------------------------------------------

    async def kind(self, path: str) -> Literal["file", "dir", "other"] | None:
        """What is at ``path`` without following a final symlink (``other``); None if nothing."""
        return await _in_thread(lambda: _kind(path))

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file, a symlink (not its target) or, with ``recursive``, a directory tree: all of it, or
        (refused) none of it when it holds a ``.git`` or a directory we may not empty; a tree whose removal
        fails midway anyway is reported with what was deleted."""
        await _in_thread(lambda: _delete(path, recursive))

    async def move(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination`` (parents created); refuses an existing destination, and a
        tree that holds a ``.git``. Across file systems: copied, then deleted (:func:`_move_across`)."""
        await _in_thread(lambda: _move(source, destination))

    async def remove_dir(self, path: str) -> None:
        """Remove the empty directory ``path`` (walked without links); ToolError if it is not an empty
        directory. For undoing a change that made directories (a patch rolled back)."""
        await _in_thread(lambda: _remove_dir(path))

    # -- paging -----------------------------------------------------------------------------------------

    async def read_lines(self, path: str, offset: int = 1, limit: int = 2000, max_line_chars: int = 2000) -> LinePage:
        """Up to ``limit`` lines from line ``offset`` (1-based), without reading more than needed.

        Reading an early page costs the same for a 100 MB file as for a 1 MB one (above
        ``whole_file_bytes`` the file is streamed; the lines before ``offset`` are counted, not kept).
        Each returned line is at most ``max_line_chars`` characters: a longer one is cut and ends with
        ``… [line cut: N characters]`` (N is the whole line's length). Binary files (a NUL byte in the
        first 8 KiB) are a ToolError; invalid UTF-8 further on is shown as U+FFFD.
        """
        if offset < 1 or limit < 1:
            raise ToolError("offset and limit must be at least 1.")
        return await _in_thread(lambda: self._read_lines(path, offset, limit, max_line_chars))

    # -- the blocking parts -----------------------------------------------------------------------------

    def _read_text(self, path: str) -> str:
        fd, info = _open_for_reading(path)
        try:
            if info.st_size > self.max_text_bytes:
                raise _too_big(path, info.st_size, self.max_text_bytes)
            data = _read_all(fd, self.max_text_bytes)
            if data is None:
                raise _too_big(path, None, self.max_text_bytes)
        finally:
            os.close(fd)
        return _decode_text(path, data)

    def _read_lines(self, path: str, offset: int, limit: int, max_line_chars: int) -> LinePage:
        fd, info = _open_for_reading(path)
        try:
            size = info.st_size
            if size <= self.whole_file_bytes:
                data = _read_all(fd, self.whole_file_bytes)
                if data is not None:
                    return _page_of_bytes(path, data, offset, limit, max_line_chars)
                # it grew past the limit while we read: stream it instead, from the start
                os.lseek(fd, 0, os.SEEK_SET)
            return _stream_page(path, fd, size, offset, limit, max_line_chars)
        finally:
            os.close(fd)


async def _in_thread(function: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(function)


# -- walking without following links --------------------------------------------------------------------


class _LinkInPath(ToolError):
    """A component of a checked (link-free) path is a symbolic link now."""

    def __init__(self, path: str, component: str) -> None:
        super().__init__(
            f"'{component}' is a symbolic link, but '{path}' had none when it was checked: it changed since "
            "(a command, the user or another program). Nothing was done; check the path and try again."
        )


def _split(path: str) -> tuple[str, str]:
    """(parent directory, final name) of a normalised absolute path."""
    if not path.startswith("/"):
        raise ToolError(f"Internal error: the file system was given a relative path ({path!r}).")
    parent, name = os.path.split(path.rstrip("/"))
    return parent or "/", name


def _open_dir(path: str, *, create: bool = False, whole: str | None = None, made: list[str] | None = None) -> int:
    """A descriptor for the directory ``path``, reached without following any symbolic link.

    ``create`` makes missing directories (``mkdir -p``), appending each one it made to ``made`` (so a
    caller that then fails can remove them: :func:`_remove_made`). Raises FileNotFoundError (missing),
    NotADirectoryError (a component is not a directory; ``filename`` says which), or :class:`_LinkInPath`.
    """
    fd = os.open("/", _DIR_OPEN_FLAGS)
    walked = ""
    try:
        for name in (part for part in path.split("/") if part):
            if name in (".", ".."):
                raise ToolError(f"Internal error: the file system was given a path that is not normalised ({path!r}).")
            walked += "/" + name
            try:
                child = os.open(name, _DIR_OPEN_FLAGS, dir_fd=fd)
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
                child = _open_child_dir(fd, name, walked, whole or path)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                child = _open_child_dir(fd, name, walked, whole or path)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(dir_fd: int, name: str, walked: str, whole: str) -> int:
    """Open ``name`` in ``dir_fd`` as a directory, explaining why not when it is something else."""
    try:
        return os.open(name, _DIR_OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise _LinkInPath(whole, walked)
    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", walked)


def _open_for_reading(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading without following links; FileNotFoundError if missing."""
    parent, name = _split(path)
    if not name:
        raise ToolError(f"{path} is a directory, not a file.")
    try:
        dir_fd = _open_dir(parent, whole=path)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None
    except (FileNotFoundError, ToolError):
        raise
    except OSError as exc:
        raise _error("read", path, exc) from None
    try:
        fd = os.open(name, _FILE_READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _LinkInPath(path, path) from None
        raise _error("read", path, exc) from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{path} is a directory, not a file.")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{path} is not a regular file ({_kind_name(info.st_mode)}); it cannot be read as text.")
        # O_NONBLOCK only kept a FIFO from blocking the open; reads of regular files ignore it.
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_all(fd: int, limit: int) -> bytes | None:
    """Everything from ``fd``, or None if it is longer than ``limit`` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, _CHUNK if total + _CHUNK <= limit + 1 else limit + 1 - total)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def _decode_text(path: str, data: bytes) -> str:
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise _binary(path, len(data))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{path} is not UTF-8 text ({len(data)} bytes; byte 0x{data[exc.start]:02x} at offset {exc.start} "
            "is invalid). It cannot be read or edited as text."
        ) from None


def _binary(path: str, size: int) -> ToolError:
    return ToolError(f"{path} is a binary file ({size} bytes, with NUL bytes); it cannot be read as text.")


def _too_big(path: str, size: int | None, limit: int) -> ToolError:
    what = f"{size} bytes" if size is not None else "growing"
    return ToolError(
        f"{path} is too large to load whole ({what}; the limit is {limit} bytes). Read it in pages with "
        "read_file's offset and limit, or search it with grep."
    )


def _error(doing: str, path: str, exc: OSError) -> ToolError:
    where = f" ('{exc.filename}')" if exc.filename and exc.filename != path else ""
    return ToolError(f"Cannot {doing} {path}: {exc.strerror or exc}{where}.")


def _kind_name(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


# -- writing ----------------------------------------------------------------------------------------------


def _write_atomic(path: str, data: bytes) -> None:
    parent, name = _split(path)
    if not name:
        raise ToolError(f"{path} is a directory, not a file.")
    made: list[str] = []
    try:
        dir_fd = _open_dir(parent, create=True, whole=path, made=made)
    except NotADirectoryError as exc:
        _remove_made(made)
        raise ToolError(f"Cannot write {path}: '{exc.filename}' is a file, not a directory.") from None
    except OSError as exc:
        _remove_made(made)
        raise _error("write", path, exc) from None
    except BaseException:
        _remove_made(made)
        raise
    try:
        _replace_in(dir_fd, path, name, data)
    except BaseException:
        _remove_made(made)  # a failed write leaves no trace, not even the directories made for it
        raise
    finally:
        os.close(dir_fd)


def _replace_in(dir_fd: int, path: str, name: str, data: bytes) -> None:
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise _error("write", path, exc) from None
    if old is not None:
        if stat.S_ISLNK(old.st_mode):
            raise _LinkInPath(path, path)
        if stat.S_ISDIR(old.st_mode):
            raise ToolError(f"{path} is a directory, not a file.")
        if not stat.S_ISREG(old.st_mode):
            raise ToolError(f"{path} is {_kind_name(old.st_mode)}, not a regular file; it was not replaced.")
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
    try:
        # A new file gets 0o666 & ~umask from the kernel; an existing file's bits are copied below.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        raise _error("write", path, exc) from None
    try:
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    # Only root may give a file away; otherwise the new file is simply ours.
                    with contextlib.suppress(OSError):
                        os.fchown(fd, old.st_uid, old.st_gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise _error("write", path, exc) from None
        raise
    _fsync_dir(dir_fd)


def _fsync_dir(dir_fd: int) -> None:
    """Make a rename durable. Best effort: the descriptor may be O_PATH, and not every FS allows it."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- kind, delete, move -------------------------------------------------------------------------------------


def _kind(path: str) -> Literal["file", "dir", "other"] | None:
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _error("inspect", path, exc) from None
    if stat.S_ISREG(info.st_mode):
        return "file"
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    return "other"


def _open_parent(path: str, doing: str, *, create: bool = False, made: list[str] | None = None) -> tuple[int, str]:
    """The descriptor of ``path``'s directory (walked without links) and the final name."""
    parent, name = _split(path)
    if not name:
        raise ToolError(f"Cannot {doing} '/'.")
    try:
        return _open_dir(parent, create=create, whole=path, made=made), name
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"Cannot {doing} {path}: it does not exist.") from None
    except OSError as exc:
        raise _error(doing, path, exc) from None


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove_dir(path: str) -> None:
    dir_fd, name = _open_parent(path, "remove")
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        raise _error("remove the directory", path, exc) from None
    finally:
        os.close(dir_fd)


def _remove_made(made: list[str]) -> None:
    """Remove the directories a failed write or move made (deepest first), those still empty."""
    for path in reversed(made):
        with contextlib.suppress(ToolError):
            _remove_dir(path)


# -- trees: survey, removal, copy ---------------------------------------------------------------------------


def is_protected(name: str) -> bool:
    """``name`` is :data:`PROTECTED_NAME` in any case (``.GIT`` *is* ``.git`` on a case-insensitive file system)."""
    return name.lower() == PROTECTED_NAME


def _join(relative: str, name: str) -> str:
    return f"{relative}/{name}" if relative else name


def _under(path: str, relative: str) -> str:
    return f"{path}/{relative}" if relative not in ("", ".") else path


def _count(number: int, noun: str, nouns: str) -> str:
    return f"{number} {noun if number == 1 else nouns}"


@dataclass
class _Survey:
    """What a directory tree holds, walked through descriptors before a delete or a move touches it."""

    protected: str | None = None
    """The first entry named ``.git`` (relative to the top; the shallowest in its directory): the walk
    stopped there."""
    blocked: str | None = None
    """The first directory (relative, ``.`` for the top) whose entries we may not remove."""
    special: str | None = None
    """The first entry that is not a file, a directory or a link (a FIFO, a socket, a device)."""


def _survey(dir_fd: int, name: str, survey: _Survey, relative: str = "") -> None:
    """Walk the tree ``name`` in ``dir_fd`` without following links, filling in ``survey``."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
        return  # no longer a directory: the caller's removal or rename acts on the entry itself
    try:
        entries = sorted(os.listdir(fd))
        # Every name of a directory first: a .git here is reported before any deeper one.
        protected = next((entry for entry in entries if is_protected(entry)), None)
        if protected is not None:
            survey.protected = _join(relative, protected)
            return
        # Advisory (the removal itself is what counts), but it turns "half deleted" into "refused" for the
        # common cases: a read-only directory (a Go module cache) or a read-only file system.
        if entries and survey.blocked is None and not os.access(name, os.W_OK | os.X_OK, dir_fd=dir_fd):
            survey.blocked = relative or "."
        for entry in entries:
            info = _lstat_at(fd, entry)
            if info is None:
                continue
            if stat.S_ISDIR(info.st_mode):
                _survey(fd, entry, survey, _join(relative, entry))
                if survey.protected is not None:
                    return
            elif survey.special is None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                survey.special = _join(relative, entry)
    finally:
        os.close(fd)


class _Appeared(Exception):
    """A ``.git`` is in a tree that had none when it was surveyed: stop before touching that directory."""

    def __init__(self, relative: str) -> None:
        super().__init__(relative)
        self.relative = relative


class _Removal:
    """``rm -r`` through descriptors: links are unlinked, never followed; a directory that holds a ``.git``
    is left alone; and it can say how far it got."""

    def __init__(self) -> None:
        self.files = 0
        self.dirs = 0
        self.at = ""
        """Where it is (relative to the top): where it stopped, when it fails."""

    def done(self) -> str:
        if not self.files and not self.dirs:
            return "nothing"
        return f"{_count(self.files, 'file', 'files')} and {_count(self.dirs, 'directory', 'directories')}"

    def remove(self, dir_fd: int, name: str, relative: str = "") -> None:
        self.at = relative
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            os.unlink(name, dir_fd=dir_fd)  # it became a link or a file since the lstat: remove just the entry
            self.files += 1
            return
        try:
            entries = os.listdir(fd)
            # Checked again right before anything in this directory goes: a .git made since the survey stays.
            protected = next((entry for entry in sorted(entries) if is_protected(entry)), None)
            if protected is not None:
                raise _Appeared(_join(relative, protected))
            for entry in entries:
                info = _lstat_at(fd, entry)
                if info is None:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    self.remove(fd, entry, _join(relative, entry))
                else:
                    self.at = _join(relative, entry)
                    os.unlink(entry, dir_fd=fd)
                    self.files += 1
        finally:
            os.close(fd)
        self.at = relative
        os.rmdir(name, dir_fd=dir_fd)
        self.dirs += 1


def _copy(src_fd: int, name: str, dst_fd: int, new_name: str, relative: str = "") -> None:
    """Copy the entry ``name`` of ``src_fd`` to ``new_name`` in ``dst_fd`` through descriptors: a link as a
    link, a file with its permission bits and times (fsynced), a directory with everything in it. Hard
    links become separate files. ToolError for a special file; :class:`_Appeared` for a ``.git``."""
    info = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    mode = stat.S_IMODE(info.st_mode) & 0o777
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_fd), new_name, dir_fd=dst_fd)
    elif stat.S_ISREG(info.st_mode):
        source = os.open(name, _FILE_READ_FLAGS, dir_fd=src_fd)
        try:
            if not stat.S_ISREG(os.fstat(source).st_mode):
                raise ToolError(f"'{relative or name}' changed while it was being copied.")
            target = os.open(
                new_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=dst_fd
            )
            try:
                while chunk := os.read(source, 1024 * 1024):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(target, view) :]
                os.fchmod(target, mode)
                os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
                os.fsync(target)  # the source is deleted next: the copy must be on disk first
            finally:
                os.close(target)
        finally:
            os.close(source)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(new_name, 0o700, dir_fd=dst_fd)  # ours to fill; its own bits are set once it is full
        source = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=src_fd)
        try:
            target = os.open(new_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dst_fd)
            try:
                for entry in sorted(os.listdir(source)):
                    if is_protected(entry):
                        raise _Appeared(_join(relative, entry))
                    _copy(source, entry, target, entry, _join(relative, entry))
                os.fchmod(target, mode)
                os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            finally:
                os.close(target)
        finally:
            os.close(source)
    else:
        raise ToolError(f"'{relative or name}' is {_kind_name(info.st_mode)}, which cannot be copied.")


# -- kind, delete, move -------------------------------------------------------------------------------------


def _delete(path: str, recursive: bool) -> None:
    dir_fd, name = _open_parent(path, "delete")
    try:
        info = _lstat_at(dir_fd, name)
        if info is None:
            raise ToolError(f"Cannot delete {path}: it does not exist.")
        if stat.S_ISDIR(info.st_mode):
            if not recursive:
                raise ToolError(
                    f"{path} is a directory; deleting it needs recursive=true (which deletes everything in it)."
                )
            _delete_tree(dir_fd, name, path)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except RecursionError:
        raise ToolError(f"Cannot delete {path}: the directory tree is too deep.") from None
    except OSError as exc:
        raise _error("delete", path, exc) from None
    finally:
        os.close(dir_fd)


def _delete_tree(dir_fd: int, name: str, path: str) -> None:
    """Survey the tree, refuse before deleting anything if it may not all go, then remove it."""
    survey = _Survey()
    _survey(dir_fd, name, survey)
    if survey.protected is not None:
        raise ToolError(
            f"Cannot delete {path}: it contains {_under(path, survey.protected)}, a git repository's .git, and "
            "the file tools never delete a .git, at any depth. Nothing was deleted."
        )
    blocked = _under(path, survey.blocked) if survey.blocked is not None else None
    parent = os.path.dirname(path) or "/"
    if blocked is None and not os.access(parent, os.W_OK | os.X_OK):
        blocked = parent  # by name, but only advisory: the removal still goes through descriptors
    if blocked is not None:
        raise ToolError(
            f"Cannot delete {path}: the entries of {blocked} may not be removed (no write permission, or a "
            "read-only file system), so only part of the tree could go. Nothing was deleted."
        )
    removal = _Removal()
    try:
        removal.remove(dir_fd, name)
    except _Appeared as exc:
        raise ToolError(
            f"Stopped deleting {path}: {_under(path, exc.relative)} (a .git) appeared in it while it was being "
            f"deleted, and the file tools never delete a .git. Deleted before that: {removal.done()}; the rest "
            f"of {path} is still there."
        ) from None
    except OSError as exc:
        raise ToolError(
            f"Deleting {path} failed at {_under(path, removal.at)}: {exc.strerror or exc}. Deleted before that: "
            f"{removal.done()}; the rest of {path} is still there."
        ) from None


def _refuse_protected(dir_fd: int, name: str, source: str, destination: str) -> _Survey:
    survey = _Survey()
    _survey(dir_fd, name, survey)
    if survey.protected is not None:
        raise ToolError(
            f"Cannot move {source}: it contains {_under(source, survey.protected)}, a git repository's .git, "
            "and the file tools never move a .git, at any depth (its paths would break). Nothing was moved."
        )
    return survey


def _move(source: str, destination: str) -> None:
    if source.rstrip("/") == destination.rstrip("/"):
        raise ToolError(f"The source and the destination are the same path ({source}).")
    if destination.startswith(source.rstrip("/") + "/"):
        raise ToolError(f"Cannot move {source} into itself ({destination}).")
    src_fd, src_name = _open_parent(source, "move")
    try:
        info = _lstat_at(src_fd, src_name)
        if info is None:
            raise ToolError(f"Cannot move {source}: it does not exist.")
        tree = stat.S_ISDIR(info.st_mode)
        if tree:
            _refuse_protected(src_fd, src_name, source, destination)
        made: list[str] = []
        try:
            dst_fd, dst_name = _open_parent(destination, "move to", create=True, made=made)
        except ToolError as exc:
            _remove_made(made)
            raise ToolError(str(exc).replace("Cannot move to", f"Cannot move {source} to")) from None
        try:
            if _lstat_at(dst_fd, dst_name) is not None:
                raise ToolError(
                    f"Cannot move {source} to {destination}: the destination already exists. Delete it first, or "
                    "choose another name."
                )
            try:
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _move_across(src_fd, src_name, dst_fd, dst_name, source, destination)
            else:
                if tree:
                    _check_moved(src_fd, src_name, dst_fd, dst_name, source, destination)
        except BaseException:
            _remove_made(made)  # only the empty ones go: after a half-done move they hold what is there
            raise
        finally:
            os.close(dst_fd)
    except RecursionError:
        raise ToolError(f"Cannot move {source}: the directory tree is too deep.") from None
    except OSError as exc:
        raise _error("move", source, exc) from None
    finally:
        os.close(src_fd)


def _check_moved(src_fd: int, src_name: str, dst_fd: int, dst_name: str, source: str, destination: str) -> None:
    """The tree just renamed is the one that was surveyed, without a ``.git``; if one appeared in between,
    rename it back (``rename`` is atomic both ways) and refuse."""
    survey = _Survey()
    _survey(dst_fd, dst_name, survey)
    if survey.protected is None:
        return
    found = _under(source, survey.protected)
    try:
        if _lstat_at(src_fd, src_name) is not None:
            raise FileExistsError(errno.EEXIST, "something else is there now", source)
        os.rename(dst_name, src_name, src_dir_fd=dst_fd, dst_dir_fd=src_fd)
    except OSError as exc:
        raise ToolError(
            f"Moved {source} to {destination}, then found {found} (a .git) in it, which appeared during the "
            f"move; moving it back failed ({exc.strerror or exc}), so it is at {destination} now."
        ) from None
    raise ToolError(
        f"Cannot move {source}: {found} (a .git) appeared in it while it was being moved, and the file tools "
        "never move a .git. It was moved back; nothing was moved."
    )


def _move_across(src_fd: int, src_name: str, dst_fd: int, dst_name: str, source: str, destination: str) -> None:
    """``rename`` cannot cross file systems: copy (:func:`_copy`) to a temporary name beside the destination,
    rename that into place, then delete the source.

    Up to the last step a failure removes the copy, and nothing has moved. The source is surveyed first so
    that deleting it is unlikely to fail; if it fails anyway, a file's copy is removed again (nothing
    moved), while a tree keeps its whole copy and the error says what is left of the source."""
    info = os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
    tree = stat.S_ISDIR(info.st_mode)
    across = "they are on different file systems, so it would be copied and then deleted"
    if tree:
        survey = _refuse_protected(src_fd, src_name, source, destination)
        if survey.special is not None:
            raise ToolError(
                f"Cannot move {source} to {destination}: {across}, and {_under(source, survey.special)} is a "
                "special file (a FIFO, a socket or a device), which cannot be copied. Nothing was moved."
            )
        if survey.blocked is not None:
            raise ToolError(
                f"Cannot move {source} to {destination}: {across}, and the entries of "
                f"{_under(source, survey.blocked)} may not be removed. Nothing was moved."
            )
    elif not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise ToolError(
            f"Cannot move {source} to {destination}: {across}, and it is {_kind_name(info.st_mode)}. Nothing was moved."
        )
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
    try:
        _copy(src_fd, src_name, dst_fd, temp)
        if _lstat_at(dst_fd, dst_name) is not None:
            raise FileExistsError(errno.EEXIST, "the destination appeared while copying", destination)
        os.rename(temp, dst_name, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError, _Appeared, RecursionError):
            if _lstat_at(dst_fd, temp) is not None:
                _Removal().remove(dst_fd, temp)
        if isinstance(exc, _Appeared):
            raise ToolError(
                f"Cannot move {source}: {_under(source, exc.relative)} (a .git) appeared in it while it was "
                "being copied, and the file tools never move a .git. The partial copy was removed; nothing was moved."
            ) from None
        if isinstance(exc, ToolError):
            raise ToolError(f"Cannot move {source} to {destination} ({across}): {exc} Nothing was moved.") from None
        if isinstance(exc, OSError):
            raise ToolError(
                f"Cannot move {source} to {destination} ({across}): copying failed: {exc.strerror or exc}. The "
                "partial copy was removed; nothing was moved."
            ) from None
        raise
    _fsync_dir(dst_fd)
    removal = _Removal()
    try:
        if tree:
            removal.remove(src_fd, src_name)
        else:
            os.unlink(src_name, dir_fd=src_fd)
    except (OSError, _Appeared) as exc:
        reason = f"{_under(source, exc.relative)} (a .git) appeared in it" if isinstance(exc, _Appeared) else exc
        if not tree:
            with contextlib.suppress(OSError):
                os.unlink(dst_name, dir_fd=dst_fd)
            raise ToolError(
                f"Cannot move {source} to {destination} ({across}): deleting the original failed ({reason}); "
                "the copy was removed again. Nothing was moved."
            ) from None
        raise ToolError(
            f"{source} was copied to {destination} ({across}), but deleting the original then failed at "
            f"{_under(source, removal.at)} ({reason}). The whole copy is at {destination}; of {source}, "
            f"{removal.done()} had been deleted, and the rest is still there."
        ) from None


# -- paged reading --------------------------------------------------------------------------------------------


def _cut(text: str, chars: int, max_chars: int) -> str:
    """``text`` (the start of a line of ``chars`` characters) cut to ``max_chars`` with the marker in."""
    marker = f"… [line cut: {chars} characters]"
    return text[: max(0, max_chars - len(marker))] + marker


def _page_of_bytes(path: str, data: bytes, offset: int, limit: int, max_line_chars: int) -> LinePage:
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise _binary(path, len(data))
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    decoded = text if text is not None else data.decode("utf-8", "replace")
    lines = decoded.split("\n")
    if lines[-1] == "":
        lines.pop()
    chosen = lines[offset - 1 : offset - 1 + limit]
    page = [line[:-1] if line.endswith("\r") else line for line in chosen]
    page = [_cut(line, len(line), max_line_chars) if len(line) > max_line_chars else line for line in page]
    more = offset - 1 + len(chosen) < len(lines)
    return LinePage(page, offset, more, total=len(lines), size=len(data), text=text)


def _stream_page(path: str, fd: int, size: int, offset: int, limit: int, max_line_chars: int) -> LinePage:
    reader = _LineReader(fd)
    if b"\x00" in reader.peek(BINARY_SNIFF_BYTES):
        raise _binary(path, size)
    skipped = reader.skip(offset - 1)
    if skipped < offset - 1:
        return LinePage([], offset, False, total=skipped, size=size)
    lines: list[str] = []
    keep = max_line_chars * 4 + 4  # enough bytes for max_line_chars characters of UTF-8 (and a CR)
    while len(lines) < limit:
        line = reader.read_line(keep)
        if line is None:
            return LinePage(lines, offset, False, total=offset - 1 + len(lines), size=size)
        kept, length, chars = line
        if length <= len(kept):
            text = kept.decode("utf-8", "replace")
            text = text[:-1] if text.endswith("\r") else text
            lines.append(_cut(text, len(text), max_line_chars) if len(text) > max_line_chars else text)
        else:
            # Decode only whole characters of the kept start (an incremental decoder holds back a split one).
            start = codecs.getincrementaldecoder("utf-8")("replace").decode(kept, final=False)
            lines.append(_cut(start, chars, max_line_chars))
    more = reader.has_more()
    return LinePage(lines, offset, more, total=None if more else offset - 1 + len(lines), size=size)


class _LineReader:
    """Lines from a file descriptor, through a small buffer: skipping counts newlines in C (``count``),
    and a long line is kept only up to a limit while the rest is read past."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._pos = 0
        self._eof = False

    def _fill(self) -> bool:
        """Read another chunk (dropping what was consumed); False at end of file."""
        if self._eof:
            return False
        chunk = os.read(self._fd, _CHUNK)
        if not chunk:
            self._eof = True
            return False
        del self._buffer[: self._pos]
        self._pos = 0
        self._buffer += chunk
        return True

    def peek(self, size: int) -> bytes:
        """The next ``size`` bytes (fewer at the end), without consuming them."""
        while len(self._buffer) - self._pos < size and self._fill():
            pass
        return bytes(self._buffer[self._pos : self._pos + size])

    def has_more(self) -> bool:
        return self._pos < len(self._buffer) or self._fill()

    def skip(self, count: int) -> int:
        """Skip ``count`` lines; the number skipped (fewer at the end of the file)."""
        skipped = 0
        partial = False  # in the middle of a line whose start was skipped
        while skipped < count:
            wanted = count - skipped
            newlines = self._buffer.count(b"\n", self._pos)
            if newlines >= wanted:
                for _ in range(wanted):
                    self._pos = self._buffer.index(b"\n", self._pos) + 1
                return count
            skipped += newlines
            if newlines:
                partial = self._buffer.rindex(b"\n") + 1 < len(self._buffer)
            else:
                partial = partial or self._pos < len(self._buffer)
            self._pos = len(self._buffer)
            if not self._fill():
                return skipped + 1 if partial else skipped
        return skipped

    def read_line(self, keep: int) -> tuple[bytes, int, int] | None:
        """The next line without its newline: (up to ``keep`` bytes of it, its length in bytes, its length
        in characters, a final CR not counted); None at the end of the file."""
        if self._pos >= len(self._buffer) and not self._fill():
            return None
        kept = bytearray()
        length = chars = 0
        last = b""
        while True:
            end = self._buffer.find(b"\n", self._pos)
            stop = end if end >= 0 else len(self._buffer)
            piece = bytes(self._buffer[self._pos : stop])
            if len(kept) < keep:
                kept += piece[: keep - len(kept)]
            if piece:
                length += len(piece)
                # UTF-8 characters = bytes that are not continuation bytes (0x80-0xBF).
                chars += len(piece.translate(None, _UTF8_CONTINUATION))
                last = piece[-1:]
            if end >= 0:
                self._pos = end + 1
                break
            self._pos = stop
            if not self._fill():
                break
        if last == b"\r":
            chars -= 1
        return bytes(kept), length, chars
