"""Opening what an untrusted tree provides: a directory reached without following a link, and a
regular file read without blocking, within a size cap.

Contract: :func:`open_directory` walks a path one component at a time with ``O_NOFOLLOW``, so a
directory swapped for a link is never entered; :func:`read_regular` reads only regular files (a FIFO,
socket or device is never read nor waited on) and, given the directories it may read in, nothing whose
real path is outside them. For the files a repository brings (``.gitignore``, ``AGENTS.md``), which
are read before anyone is asked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC  # a FIFO opens at once instead of waiting for a writer


def open_directory(path: str, *, dir_fd: int | None = None) -> int:
    """A descriptor (``O_RDONLY``, close-on-exec) of the directory ``path``, reached one component at a time
    without following a symbolic link: from ``/`` for an absolute path, else from ``dir_fd``.

    Raises OSError when a component is missing, is not a directory, or is a link (``ELOOP`` or
    ``ENOTDIR``), and for ``..`` (which could lead out). The caller closes the descriptor.
    """
    absolute = path.startswith("/")
    fd = os.open("/" if absolute else ".", _DIRECTORY_FLAGS, dir_fd=None if absolute else dir_fd)

    def open_child(parent: int, name: str) -> int:
        if name == "..":
            raise OSError(errno.EINVAL, "a path with '..' is not walked", path)
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)

    return descend(fd, (name for name in path.split("/") if name not in ("", ".")), open_child)


def descend(fd: int, names: Iterable[str], open_child: Callable[[int, str], int]) -> int:
    """From the directory ``fd`` down through ``names``, each opened in the one before by ``open_child(parent,
    name)``: the descriptor of the last. ``fd`` is the walk's: closed on the way (or returned, for no names),
    and whatever fails, every descriptor the walk opened is closed before the error goes on."""
    try:
        for name in names:
            child = open_child(fd, name)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: str,
    max_bytes: int,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
    within: Sequence[str] = (),
) -> bytes | None:
    """The first ``max_bytes + 1`` bytes of ``path`` (so the caller can tell a file over the cap), or None
    when it is not a regular file, cannot be read, or, given ``within`` (absolute, resolved directories),
    its real path is in none of them.

    For files the repository provides, read before anyone is asked: a FIFO, socket or device is never
    read and never waited on (checked before the open, which is non-blocking, and with ``fstat`` on the
    open descriptor, so a swap in between cannot win), and a link to ``/dev/zero`` or to a secret
    outside ``within`` reads nothing. A final symbolic link is followed only with ``follow_symlinks``.
    """
    try:
        link = stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        if link and not follow_symlinks:
            return None
        if not stat.S_ISREG(os.stat(path, dir_fd=dir_fd).st_mode):
            return None  # so most non-regular files are never even opened
        fd = os.open(path, _READ_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW), dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if within:
            real = _real_path(fd, path, dir_fd)
            # Where the OS cannot tell (no /proc), a file that was not a link is in the directory given.
            if not (_is_within(real, within) or (real is None and dir_fd is not None and not link)):
                return None
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _real_path(fd: int, path: str, dir_fd: int | None) -> str | None:
    """Where the open file ``fd`` really is (None if that cannot be told): the kernel's answer where there
    is one, which no rename or link swap after the open can change."""
    if sys.platform.startswith("linux"):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # no /proc: ask the path, and check it still leads to this file
    elif sys.platform == "darwin":
        try:
            name: bytes = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024))  # type: ignore[attr-defined,unused-ignore]
            return os.fsdecode(name.split(b"\0", 1)[0])
        except OSError:
            pass
    if dir_fd is not None:
        return None
    real = os.path.realpath(path)
    try:
        return real if os.path.samestat(os.stat(real), os.fstat(fd)) else None
    except OSError:
        return None


def _is_within(path: str | None, directories: Sequence[str]) -> bool:
    if path is None:
        return False
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)
