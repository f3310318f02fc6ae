"""Atomic writes to the local disk (:func:`write_atomic`), and the names of our temporary files
(:data:`TEMP_PREFIX`), which the root watcher and the search tools leave out.

Contract: the path comes from the path policy; its directory is reached through the descriptor walk of
:mod:`refagent.sandbox.disk.walk`, making missing parents (``mkdir -p``). The function blocks (the file
system calls it in a worker thread). Errors are :class:`~refagent.errors.ToolError` for the model.

Writes are atomic: a temporary file (``.~refagent-<random>.tmp``) in the same directory, written,
fsynced, given the old file's permission bits (and owner, when we may), then ``os.replace``-d over the
target; the directory is fsynced after. A new file gets ``0o666 & ~umask``. Replacing breaks hard links
(the other names keep the old content) and drops extended attributes; the setuid/setgid bits are not
kept (the kernel clears them on any write too). A final component that is a link, a directory or a
special file is refused, not replaced. A write that fails leaves no trace: the temporary file is removed,
and so are the parent directories made for it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from refagent.errors import ToolError
from refagent.sandbox.disk.walk import (
    O_CLOEXEC,
    LinkInPath,
    fsync_dir,
    kind_name,
    open_dir,
    os_error,
    remove_made,
    split_path,
)

TEMP_PREFIX = ".~refagent-"
"""Names of our temporary files start with this (the root watcher ignores them)."""
TEMP_SUFFIX = ".tmp"
"""How the names of an atomic write's temporary files end."""


def write_atomic(path: str, data: bytes) -> None:
    """Replace (or create) the file ``path`` with ``data``, all at once or not at all."""
    parent, name = split_path(path)
    if not name:
        raise ToolError(f"{path} is a directory, not a file.")
    made: list[str] = []
    try:
        dir_fd = open_dir(parent, create=True, whole=path, made=made)
    except NotADirectoryError as exc:
        remove_made(made)
        raise ToolError(f"Cannot write {path}: '{exc.filename}' is a file, not a directory.") from None
    except OSError as exc:
        remove_made(made)
        raise os_error("write", path, exc) from None
    except BaseException:
        remove_made(made)
        raise
    try:
        _replace_in(dir_fd, path, name, data)
    except BaseException:
        remove_made(made)  # a failed write leaves no trace, not even the directories made for it
        raise
    finally:
        os.close(dir_fd)


def _replace_in(dir_fd: int, path: str, name: str, data: bytes) -> None:
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise os_error("write", path, exc) from None
    if old is not None:
        if stat.S_ISLNK(old.st_mode):
            raise LinkInPath(path, path)
        if stat.S_ISDIR(old.st_mode):
            raise ToolError(f"{path} is a directory, not a file.")
        if not stat.S_ISREG(old.st_mode):
            raise ToolError(f"{path} is {kind_name(old.st_mode)}, not a regular file; it was not replaced.")
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
    try:
        # A new file gets 0o666 & ~umask from the kernel; an existing file's bits are copied below.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error("write", path, exc) from None
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
            raise os_error("write", path, exc) from None
        raise
    fsync_dir(dir_fd)
