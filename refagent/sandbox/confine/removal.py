"""Removing a tree that commands wrote (a session's private ``/tmp``), by descriptor: :func:`remove_tree`.

A command may still run while its session's directory is removed (a background command that outlived the
wait, a process the agent's exit left for a moment), and it may swap any entry for a link meanwhile. A
walk by path would follow such a link (as root, ``chmod 0700`` the directory it leads to and list it);
this one never does: each directory is opened from its parent's descriptor with ``O_NOFOLLOW``, opened
up through its own descriptor, emptied and removed from its parent.
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

MAX_REMOVED_DEPTH = 512
"""How deep :func:`_remove_tree` goes (one descriptor a level); what lies deeper is left, and logged."""


def remove_tree(path: str) -> None:
    """Remove a tree that commands wrote (the session's private ``/tmp``), by descriptor: every directory is
    opened from its parent's descriptor without following a link, opened up (mode 0700) through its own
    descriptor and emptied, then removed from its parent. A command that swaps an entry for a link while
    this runs (a background command still running, a process that outlived its namespace) gets the link
    unlinked: nothing outside the tree is listed, opened up, or removed. Whatever cannot go is left."""
    top, name = os.path.split(path.rstrip("/"))
    try:
        top_fd = os.open(top or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    # Each frame: a directory's descriptor, the names left to remove in it, its parent's descriptor, its name.
    frames: list[tuple[int, list[str], int, str]] = []
    deep = False
    try:
        if not _enter(frames, top_fd, name):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=top_fd)  # a link in its place: the link goes, never where it leads
        while frames:
            fd, names, parent_fd, own_name = frames[-1]
            if not names:
                frames.pop()
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.rmdir(own_name, dir_fd=parent_fd)
                continue
            entry = names.pop()
            if len(frames) < MAX_REMOVED_DEPTH:
                if _enter(frames, fd, entry):
                    continue
            else:
                deep = True
            with contextlib.suppress(OSError):
                os.unlink(entry, dir_fd=fd)  # a file, a link (never followed), or a directory too deep: refused
    finally:
        for fd, *_ in frames:
            os.close(fd)
        os.close(top_fd)
    if deep:
        log.warning("%s was left in part: its tree is deeper than %d directories", path, MAX_REMOVED_DEPTH)


def _enter(frames: list[tuple[int, list[str], int, str]], parent_fd: int, name: str) -> bool:
    """If ``name`` in ``parent_fd`` is a directory (not a link to one), open it up and push its frame."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except PermissionError:  # not readable (mode 0o000, say): open it up through a handle on it alone
        try:
            handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except OSError:
            return False
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)  # the directory the handle holds, whatever its name now
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        finally:
            os.close(handle)
    except OSError:
        return False  # not a directory, a link, or gone
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o700)  # its entries may be removed
    try:
        names = os.listdir(fd)
    except OSError:
        names = []
    frames.append((fd, names, parent_fd, name))
    return True
