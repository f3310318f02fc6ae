"""The kernel's word that a set of directories has not changed: Linux ``inotify``, read without waiting.

Why: a tree cleared for ripgrep (:mod:`refagent.sandbox.search.clearance`) is kept while nothing the
check read has changed. Stating each directory again costs about 3 µs (2.4 ms for a site-packages of 852
directories), and checking that ripgrep's finds are where they say costs as much again after each
search, and can be fooled (a directory swapped for a link while rg runs, and back before the check).
With a watch on each directory, "nothing changed" is one ``read`` that finds the queue empty; and a
change made while ripgrep ran is in the queue when it ends, because the kernel queues the event inside
the system call that makes the change, before that call returns.

Contract:

- :func:`journal` is the process's one :class:`Journal`, or None where there is none (not Linux, no
  ``inotify``, the user's limit of instances reached: 128 by default, shared with their editor).
- A :class:`Watcher` is one clearance's set of watches. :meth:`Watcher.add` watches a directory, by an
  open descriptor (the very directory, wherever its path leads now) or by path (a link is not followed);
  it fails (:attr:`Watcher.failed`) on the user's watch limit, this process's share (:data:`MAX_WATCHES`), or a
  file system whose changes this kernel may not see (anything but the local ones in
  :data:`LOCAL_FILE_SYSTEMS`: a network or FUSE file system changes under it without an event).
- :meth:`Journal.read` takes what is queued. A change to the tree's shape marks dirty each watcher of
  that directory: a directory made, removed or renamed in it; the directory itself changed, moved,
  deleted or unmounted; its ``.gitignore`` or ``.git`` made, written or changed in any way. In a
  directory above the tree (``/tmp``, a home directory: busy with other programs' files), only those two
  names and the one that leads down to the tree count. A full queue marks every watcher dirty. Any other
  entry made, removed or renamed (a file, a link) is only noted, by a sequence number
  (:meth:`Journal.mark`, :meth:`Journal.touched_since`): it matters only to a search that read that
  directory's files meanwhile. A file's content changing is neither (a log written in the tree does not
  make every search walk again).
- :meth:`Watcher.release` ends its watches (those no other watcher shares).

Safe to use from several threads.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["LOCAL_FILE_SYSTEMS", "MAX_WATCHES", "Journal", "Watcher", "journal"]

MAX_WATCHES = 10_000
"""The most directories this process watches at once, and never more than a quarter of the kernel's
limit (``max_user_watches``, as low as 8,192 on older systems), which is the user's, shared with their
editor's file watcher: a larger tree is stated instead."""

LOCAL_FILE_SYSTEMS = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0xCA451A4E,  # bcachefs
        0x794C7630,  # overlayfs (a container's own changes go through it)
    }
)
"""``statfs`` types whose every change this kernel makes, and so reports."""

_IN_MODIFY, _IN_ATTRIB, _IN_MOVED_FROM, _IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
_IN_Q_OVERFLOW, _IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_ISDIR = 0x4000, 0x01000000, 0x02000000, 0x40000000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, getattr(os, "O_CLOEXEC", 0)
_ENTRIES = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
_MASK = _ENTRIES | _IN_MODIFY | _IN_ATTRIB | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_RULE_FILES = (b".gitignore", b".git")


class Watcher:
    """One clearance's watches: :attr:`dirty` once the tree's shape changed (see the module docstring)."""

    def __init__(self, journal: Journal, root: str) -> None:
        self.journal = journal
        self.root = root
        """The tree's top: a directory above it is watched for the entries that matter to the tree only."""
        self.wds: dict[str, int] = {}
        """Each watched directory's path and watch descriptor."""
        self.dirty = False
        self.failed = False
        """A directory could not be watched: what is watched does not cover the clearance."""

    def add(self, path: str, fd: int | None, info: os.stat_result) -> None:
        """Watch the directory ``fd`` (or ``path``, not followed, when ``fd`` is None) whose ``lstat`` is
        ``info``; :attr:`failed` when it cannot be."""
        if not self.failed:
            below = self.root[len(path.rstrip("/")) + 1 :].partition("/")[0]
            only = frozenset({*_RULE_FILES, os.fsencode(below)}) if below and self.root.startswith(path) else None
            wd = self.journal.watch(self, path, fd, info, only)
            if wd is None:
                self.failed = True
            else:
                self.wds[path] = wd

    def unchanged(self) -> bool:
        """Every directory is watched and none has changed shape, by the queue as it is now."""
        self.journal.read()
        return not self.dirty and not self.failed

    def release(self) -> None:
        self.journal.release(self)


class Journal:
    """An ``inotify`` instance and the watchers on its watches (see the module docstring)."""

    def __init__(self, fd: int, libc: Any) -> None:
        """``fd``: the ``inotify`` instance; ``libc``: the C library that has its calls."""
        self._fd = fd
        self._libc = libc
        self._users: dict[int, dict[Watcher, frozenset[bytes] | None]] = {}
        """Each watch descriptor's watchers, and the only names in it each cares for (None: every one)."""
        self._sequence = 0
        self._touched: dict[int, int] = {}
        """Each watch descriptor's last entry change (a file or link made, removed or renamed), by sequence."""
        self._local: dict[int, bool] = {}
        self._lock = threading.Lock()
        try:
            with open("/proc/sys/fs/inotify/max_user_watches", encoding="ascii") as limit:
                self._user_limit = int(limit.read())
        except (OSError, ValueError):
            self._user_limit = 8192
        self.fs_type: Callable[[str, int | None], int | None] = self._fs_type
        """The ``statfs`` type of a directory (by descriptor, else path); a test stands in for it."""

    @classmethod
    def open(cls) -> Journal | None:
        """A new instance, or None where the kernel offers none."""
        if not sys.platform.startswith("linux"):
            return None
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return None if fd < 0 else cls(fd, libc)

    def watcher(self, root: str) -> Watcher:
        """A watcher for the tree at ``root``."""
        self.read()  # what is queued now is older than the watcher: not its changes
        return Watcher(self, root)

    def watch(
        self, watcher: Watcher, path: str, fd: int | None, info: os.stat_result, only: frozenset[bytes] | None = None
    ) -> int | None:
        """A watch on the directory ``fd`` (or ``path``) for ``watcher``, which cares for the entries named
        ``only`` in it (None: all): its descriptor, or None."""
        with self._lock:
            local = self._local.get(info.st_dev)
            if local is None:
                local = self._local[info.st_dev] = self.fs_type(path, fd) in LOCAL_FILE_SYSTEMS
            if not local or len(self._users) >= min(MAX_WATCHES, self._user_limit // 4):
                return None
            # By descriptor through /proc: the directory the walk opened, not whatever the path leads to now.
            target = f"/proc/self/fd/{fd}" if fd is not None else path
            flags = _MASK | (_IN_DONT_FOLLOW if fd is None else 0)
            wd: int = self._libc.inotify_add_watch(self._fd, os.fsencode(target), flags)
            if wd < 0:
                return None
            self._users.setdefault(wd, {})[watcher] = only
            return wd

    def read(self) -> None:
        """Take what is queued: mark dirty the watchers of a directory whose shape changed, and note the
        other entry changes."""
        with self._lock:
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    return
                except OSError:  # cannot tell what changed: everything may have
                    data = _EVENT.pack(-1, _IN_Q_OVERFLOW, 0, 0)
                self._sequence += 1
                for wd, mask, name in _events(data):
                    if mask & _IN_Q_OVERFLOW:
                        for users in self._users.values():
                            for watcher in users:
                                watcher.dirty = True
                        continue
                    shape = not name or mask & _IN_ISDIR or name in _RULE_FILES
                    for watcher, only in self._users.get(wd, {}).items():
                        if shape and (only is None or not name or name in only):
                            watcher.dirty = True
                    if not shape and mask & _ENTRIES:
                        self._touched[wd] = self._sequence

    def mark(self) -> int:
        """The journal's place now: :meth:`touched_since` it tells the entry changes after this call."""
        self.read()
        with self._lock:
            return self._sequence

    def touched_since(self, mark: int, wds: Iterable[int]) -> bool:
        """An entry (a file, a link) was made, removed or renamed in one of the directories ``wds`` since
        ``mark``, by the queue as it is now."""
        self.read()
        with self._lock:
            return any(self._touched.get(wd, 0) > mark for wd in wds)

    def release(self, watcher: Watcher) -> None:
        with self._lock:
            for wd in watcher.wds.values():
                users = self._users.get(wd)
                if users is not None:
                    users.pop(watcher, None)
                    if not users:
                        del self._users[wd]
                        self._touched.pop(wd, None)
                        self._libc.inotify_rm_watch(self._fd, wd)  # harmless when the kernel removed it already
            watcher.wds.clear()
            watcher.dirty = True

    def close(self) -> None:
        """End the instance and every watch (the process's own journal lives as long as the process)."""
        with self._lock:
            for users in self._users.values():
                for watcher in users:
                    watcher.dirty = True
            self._users.clear()
            os.close(self._fd)

    def _fs_type(self, path: str, fd: int | None) -> int | None:
        import ctypes

        buffer = ctypes.create_string_buffer(256)  # struct statfs: f_type (a long) comes first
        failed = self._libc.fstatfs(fd, buffer) if fd is not None else self._libc.statfs(os.fsencode(path), buffer)
        return None if failed else ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def _events(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(watch descriptor, mask, name or b"") of each event in a read of an ``inotify`` descriptor."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        yield wd, mask, data[start : start + length].split(b"\0", 1)[0]
        offset = start + length


_journal: Journal | None = None
_opened = False
_opening = threading.Lock()


def journal() -> Journal | None:
    """The process's one :class:`Journal` (opened on first use), or None where there is none."""
    global _journal, _opened
    with _opening:
        if not _opened:
            _journal, _opened = Journal.open(), True
    return _journal
