"""Trees cleared for ripgrep, kept while nothing the check read has changed.

Before ripgrep may walk a tree itself, :func:`~refagent.sandbox.search.walk.rg_can_walk` walks its
directories to see that every ``.gitignore`` rg would read is a plain regular file within the cap. On a
large tree that walk costs half of rg's own time, and an agent searches the same tree many times in a
session. :class:`Clearances` keeps a tree's "yes" with what the walk read: each directory it listed (and
those above it), and each ``.gitignore`` it found, by path with its ``lstat`` identity (device, inode,
mode, size, modification and change time). The next check of the same tree, globs and bounds stats
those paths again instead of walking, and walks again if any differs.

Why that is enough: whatever would change the verdict changes one of them. A file or directory made,
removed, renamed or swapped for a link in a listed directory changes that directory's times; a
``.gitignore`` written in place changes its own; a directory mounted over changes its device and inode.
The change time cannot be set back by any program (``touch`` sets the modification time only), so a
tree put back as it looked still differs.

A clearance is not kept when the walk was stopped, or when anything it read changed less than
:data:`SETTLING_NS` before the walk began: timestamps are coarse (a change in the same tick as the
walk's read would leave no trace), so a tree that is still moving is walked every time until it settles.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from refagent.sandbox.search.walk import Identity, identity, rg_can_walk

__all__ = ["SETTLING_NS", "Clearances"]

SETTLING_NS = 2_000_000_000
"""How long (ns) before a walk the newest change it read must be for its clearance to be kept: more than
any file system's timestamp granularity (FAT's 2 s is the coarsest)."""

_Key = tuple[str, tuple[str, ...], tuple[str, ...]]


class Clearances:
    """The last ``keep`` trees cleared for ripgrep (see the module docstring). Safe to use from several
    threads at once."""

    def __init__(self, keep: int = 8, clock: Callable[[], int] = time.time_ns) -> None:
        self.keep = keep
        self.clock = clock
        """The wall clock in ns, the one file times are set from."""
        self._kept: OrderedDict[_Key, list[tuple[str, Identity]]] = OrderedDict()
        self._lock = threading.Lock()
        self.walks = 0
        """How many checks walked the tree (the others found it as it was cleared)."""

    def rg_can_walk(
        self, directory: str, globs: list[str], confine: Sequence[str] = (), stop: threading.Event | None = None
    ) -> bool:
        """:func:`~refagent.sandbox.search.walk.rg_can_walk`'s answer for the tree: a kept clearance when
        everything it read is as it was, else a new walk's (kept if it says yes and the tree has settled)."""
        key = (directory, tuple(globs), tuple(confine))
        with self._lock:
            seen = self._kept.get(key)
            if seen is not None:
                self._kept.move_to_end(key)
        if seen is not None and _unchanged(seen):
            return True
        began = self.clock()
        seen = []
        self.walks += 1
        safe = rg_can_walk(directory, globs, confine, stop, seen)
        newest = max((max(ident[4], ident[5]) for _, ident in seen), default=0)
        with self._lock:
            self._kept.pop(key, None)
            if safe and not (stop is not None and stop.is_set()) and newest < began - SETTLING_NS:
                self._kept[key] = seen
                while len(self._kept) > self.keep:
                    self._kept.popitem(last=False)
        return safe


def _unchanged(seen: list[tuple[str, Identity]]) -> bool:
    for path, was in seen:
        try:
            if identity(os.stat(path, follow_symlinks=False)) != was:
                return False
        except OSError:
            return False
    return True
