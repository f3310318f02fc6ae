"""Reading text files from the local disk: whole (:func:`read_whole`) and a page at a time
(:func:`read_page`, whose result is :class:`LinePage`), without reading more of a big file than the page
needs.

Contract: the path comes from the path policy and is opened through the descriptor walk of
:mod:`refagent.sandbox.disk.walk` (a link in it is refused). A missing file is ``FileNotFoundError``, as
:class:`~refagent.sandbox.seams.TextFiles` says; everything else the model should hear about (a
directory, a FIFO or device, binary content, invalid UTF-8 in a whole read, a file too big to load) is a
:class:`~refagent.errors.ToolError` for it. These functions block (the file system calls them in worker
threads).

Binary means a NUL byte in the first :data:`BINARY_SNIFF_BYTES` (git's heuristic). A page's lines have
their endings stripped and are cut to ``max_line_chars`` characters with a marker saying how long the
line was; invalid UTF-8 in a page is shown as U+FFFD.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass

from refagent.errors import ToolError
from refagent.sandbox.disk.walk import FILE_READ_FLAGS, LinkInPath, kind_name, open_dir, os_error, split_path

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes marks a file as binary (git's heuristic)."""

_CHUNK = 64 * 1024
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


@dataclass(frozen=True, slots=True)
class LinePage:
    """Lines ``first``..``first + len(lines) - 1`` of a file, line endings stripped, long lines already cut.

    The one page type, whoever cuts it: the local disk's paged reads
    (:meth:`refagent.sandbox.disk.local_fs.LocalFileSystem.read_lines`) return it, and a page of text already in
    memory (an editor's buffer) is one too.
    """

    lines: list[str]
    first: int
    more: bool
    """There are lines after this page."""
    total: int | None = None
    """The number of lines in the file, when known without reading all of it."""
    size: int | None = None
    """The file's size in bytes, when known."""
    text: str | None = None
    """The whole file, when it was read whole (then the read tracker records it); the local disk reads a file
    whole only when it is small enough and valid UTF-8."""


def read_whole(path: str, max_bytes: int) -> str:
    """The file as UTF-8 text (line endings untouched); ToolError for a file over ``max_bytes``."""
    fd, info = _open_for_reading(path)
    try:
        if info.st_size > max_bytes:
            raise _too_big(path, info.st_size, max_bytes)
        data = _read_all(fd, max_bytes)
        if data is None:
            raise _too_big(path, None, max_bytes)
    finally:
        os.close(fd)
    return _decode_text(path, data)


def read_page(path: str, offset: int, limit: int, max_line_chars: int, whole_file_bytes: int) -> LinePage:
    """Up to ``limit`` lines from line ``offset`` (1-based). A file up to ``whole_file_bytes`` is read
    whole (so the page carries its ``text``); a bigger one is streamed, counting the lines before
    ``offset`` without keeping them."""
    fd, info = _open_for_reading(path)
    try:
        size = info.st_size
        if size <= whole_file_bytes:
            data = _read_all(fd, whole_file_bytes)
            if data is not None:
                return _page_of_bytes(path, data, offset, limit, max_line_chars)
            # it grew past the limit while we read: stream it instead, from the start
            os.lseek(fd, 0, os.SEEK_SET)
        return _stream_page(path, fd, size, offset, limit, max_line_chars)
    finally:
        os.close(fd)


def _open_for_reading(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading without following links; FileNotFoundError if missing."""
    parent, name = split_path(path)
    if not name:
        raise ToolError(f"{path} is a directory, not a file.")
    try:
        dir_fd = open_dir(parent, whole=path)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None
    except (FileNotFoundError, ToolError):
        raise
    except OSError as exc:
        raise os_error("read", path, exc) from None
    try:
        fd = os.open(name, FILE_READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise LinkInPath(path, path) from None
        raise os_error("read", path, exc) from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{path} is a directory, not a file.")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{path} is not a regular file ({kind_name(info.st_mode)}); it cannot be read as text.")
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


def cut_line(text: str, chars: int, max_chars: int) -> str:
    """``text`` (the start of a line of ``chars`` characters) cut to ``max_chars`` with the marker in: the one
    marker for a line too long to show, whoever reads the file (the disk here, the editor's buffers in
    :func:`refagent.tools.text.cut_line`)."""
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
    page = [cut_line(line, len(line), max_line_chars) if len(line) > max_line_chars else line for line in page]
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
            lines.append(cut_line(text, len(text), max_line_chars) if len(text) > max_line_chars else text)
        else:
            # Decode only whole characters of the kept start (an incremental decoder holds back a split one).
            start = codecs.getincrementaldecoder("utf-8")("replace").decode(kept, final=False)
            lines.append(cut_line(start, chars, max_line_chars))
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
