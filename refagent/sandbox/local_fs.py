"""The local file system (:class:`refagent.tools.base.Disk`): text reads and atomic writes, kinds,
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
instant could still be replaced; Python has no ``RENAME_NOREPLACE``) and falls back to copy-and-delete
(``shutil.move``) across file systems.

This module is longer than most (its paged reader included): every operation goes through the same
descriptor walk and error translation, and keeping them together keeps the time-of-check reasoning in
one place.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio.to_thread

from refagent.errors import ToolError

TEMP_PREFIX = ".~refagent-"
"""Names of our temporary files start with this (the root watcher ignores them)."""
TEMP_SUFFIX = ".tmp"

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
        """Delete a file, a symlink (not its target) or, with ``recursive``, a directory tree."""
        await _in_thread(lambda: _delete(path, recursive))

    async def move(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination`` (parents created); refuses an existing destination."""
        await _in_thread(lambda: _move(source, destination))

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


def _open_dir(path: str, *, create: bool = False, whole: str | None = None) -> int:
    """A descriptor for the directory ``path``, reached without following any symbolic link.

    ``create`` makes missing directories (``mkdir -p``). Raises FileNotFoundError (missing),
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
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
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
    try:
        dir_fd = _open_dir(parent, create=True, whole=path)
    except NotADirectoryError as exc:
        raise ToolError(f"Cannot write {path}: '{exc.filename}' is a file, not a directory.") from None
    except OSError as exc:
        raise _error("write", path, exc) from None
    try:
        _replace_in(dir_fd, path, name, data)
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


def _open_parent(path: str, doing: str, *, create: bool = False) -> tuple[int, str]:
    """The descriptor of ``path``'s directory (walked without links) and the final name."""
    parent, name = _split(path)
    if not name:
        raise ToolError(f"Cannot {doing} '/'.")
    try:
        return _open_dir(parent, create=create, whole=path), name
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"Cannot {doing} {path}: it does not exist.") from None
    except OSError as exc:
        raise _error(doing, path, exc) from None


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


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
            _remove_tree(dir_fd, name)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except RecursionError:
        raise ToolError(f"Cannot delete {path}: the directory tree is too deep.") from None
    except OSError as exc:
        raise _error("delete", path, exc) from None
    finally:
        os.close(dir_fd)


def _remove_tree(dir_fd: int, name: str) -> None:
    """``rm -r`` of ``name`` in ``dir_fd`` through descriptors: links are unlinked, never followed."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
        os.unlink(name, dir_fd=dir_fd)  # it became a link or a file since the lstat: remove just the entry
        return
    try:
        for entry in os.listdir(fd):
            info = _lstat_at(fd, entry)
            if info is None:
                continue
            if stat.S_ISDIR(info.st_mode):
                _remove_tree(fd, entry)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _move(source: str, destination: str) -> None:
    if source.rstrip("/") == destination.rstrip("/"):
        raise ToolError(f"The source and the destination are the same path ({source}).")
    if destination.startswith(source.rstrip("/") + "/"):
        raise ToolError(f"Cannot move {source} into itself ({destination}).")
    src_fd, src_name = _open_parent(source, "move")
    try:
        if _lstat_at(src_fd, src_name) is None:
            raise ToolError(f"Cannot move {source}: it does not exist.")
        try:
            dst_fd, dst_name = _open_parent(destination, "move to", create=True)
        except ToolError as exc:
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
                # Another file system: copy, then delete (links are copied as links).
                shutil.move(source, destination)
        finally:
            os.close(dst_fd)
    except OSError as exc:
        raise _error("move", source, exc) from None
    finally:
        os.close(src_fd)


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
