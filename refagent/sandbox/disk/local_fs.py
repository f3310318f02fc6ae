"""The local file system (:class:`refagent.sandbox.seams.Disk`): text reads and atomic writes, kinds,
deletes, moves, and paged reads of big files.

Contract: paths are absolute and come from the path policy (``ResolvedPath.path``): normalised, with no
symbolic link in any component. Blocking I/O runs in worker threads (``anyio.to_thread``). Errors the
model can act on are :class:`~refagent.errors.ToolError` with a message for it; ``read_text`` and
``read_lines`` raise ``FileNotFoundError`` for a missing file, as the protocol says. Every operation
walks its path from ``/`` through directory descriptors and refuses a symbolic link it meets on the way
(the path changed since the policy checked it); nothing is ever half done, or the error says what was.

:class:`LocalFileSystem` is the front; the work is done, in blocking functions, by:

- :mod:`refagent.sandbox.disk.walk`: the descriptor walk every operation goes through (why: time of check
  to time of use), and its error messages;
- :mod:`refagent.sandbox.disk.read`: whole reads and paged reads (:class:`~refagent.sandbox.disk.read.LinePage`);
- :mod:`refagent.sandbox.disk.write`: atomic writes, and the names of our temporary files
  (:data:`~refagent.sandbox.disk.write.TEMP_PREFIX`);
- :mod:`refagent.sandbox.disk.trees`: surveying, removing and copying directory trees, never taking a
  ``.git`` along (:data:`~refagent.sandbox.disk.trees.PROTECTED_NAME`);
- :mod:`refagent.sandbox.disk.delete_move`: deletes and moves, all or nothing.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import anyio.to_thread

from refagent.errors import ToolError
from refagent.sandbox.disk.delete_move import delete_entry, move_entry
from refagent.sandbox.disk.read import LinePage, read_page, read_whole
from refagent.sandbox.disk.safe_open import read_regular
from refagent.sandbox.disk.tree_preview import preview_tree
from refagent.sandbox.disk.walk import os_error, remove_dir
from refagent.sandbox.disk.write import write_atomic
from refagent.sandbox.seams import TreePreview

T = TypeVar("T")


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
        await _in_thread(lambda: write_atomic(path, data))

    # -- Disk -------------------------------------------------------------------------------------------

    async def kind(self, path: str) -> Literal["file", "dir", "other"] | None:
        """What is at ``path`` without following a final symlink (``other``); None if nothing."""
        return await _in_thread(lambda: _kind(path))

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file, a symlink (not its target) or, with ``recursive``, a directory tree: all of it, or
        (refused) none of it when it holds a ``.git`` or a directory we may not empty; a tree whose removal
        fails midway anyway is reported with what was deleted."""
        await _in_thread(lambda: delete_entry(path, recursive))

    async def move(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination`` (parents created); refuses an existing destination, and a
        tree that holds a ``.git``. Across file systems: copied, then deleted
        (:func:`refagent.sandbox.disk.delete_move._move_across`)."""
        await _in_thread(lambda: move_entry(source, destination))

    async def remove_dir(self, path: str) -> None:
        """Remove the empty directory ``path`` (walked without links); ToolError if it is not an empty
        directory. For undoing a change that made directories (a patch rolled back)."""
        await _in_thread(lambda: remove_dir(path))

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

    async def preview_tree(self, path: str) -> TreePreview:
        """:func:`refagent.sandbox.disk.tree_preview.preview_tree` in a worker thread, stopped when cancelled."""
        stop = threading.Event()
        try:
            return await anyio.to_thread.run_sync(preview_tree, path, stop, abandon_on_cancel=True)
        finally:
            stop.set()

    async def link_target(self, path: str) -> str | None:
        try:
            return await _in_thread(lambda: os.readlink(path))
        except OSError:
            return None

    async def read_start(self, path: str, max_bytes: int, *, within: Sequence[str] = ()) -> bytes | None:
        """:func:`refagent.sandbox.disk.safe_open.read_regular`, a final link followed, in a worker thread."""
        return await _in_thread(lambda: read_regular(path, max_bytes, follow_symlinks=True, within=within))

    # -- the blocking parts (tests call these directly) -------------------------------------------------

    def _read_text(self, path: str) -> str:
        return read_whole(path, self.max_text_bytes)

    def _read_lines(self, path: str, offset: int, limit: int, max_line_chars: int) -> LinePage:
        return read_page(path, offset, limit, max_line_chars, self.whole_file_bytes)


async def _in_thread(function: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(function)


def _kind(path: str) -> Literal["file", "dir", "other"] | None:
    # A look by name, not the descriptor walk: the operation that follows walks the path itself.
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error("inspect", path, exc) from None
    if stat.S_ISREG(info.st_mode):
        return "file"
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    return "other"
