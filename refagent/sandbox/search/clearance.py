"""Trees cleared for ripgrep, kept while nothing the check read has changed.

Before ripgrep may walk a tree itself, :func:`~refagent.sandbox.search.walk.rg_can_walk` walks its
directories to see that every ``.gitignore`` rg would read is a plain regular file within the cap. On a
large tree that walk costs half of rg's own time, and an agent searches the same tree many times in a
session. :class:`Clearances` keeps a tree's "yes" with what the walk read: each directory it listed (and
those above it), and each ``.gitignore`` it found. The next check of the same tree, globs and bounds
finds the tree as it was without a walk, in one of two ways, and walks again if anything differs:

- **Watched** (Linux, local file systems): each directory was watched (``inotify``,
  :mod:`refagent.sandbox.search.journal`) before the walk read it, so any change since is queued, and
  "as it was" is one read of an empty queue. Such a clearance is also :meth:`Clearances.held` before
  rg starts, so that after rg ends, an empty queue proves no directory on the way to what it found was
  swapped while it ran (:meth:`Held.vouches_for`), which spares checking each find.
- **Stated** (elsewhere, or when a directory cannot be watched): each path by its ``lstat`` identity
  (device, inode, mode, size, modification and change time). Whatever would change the verdict changes
  one: a file or directory made, removed, renamed or swapped for a link in a listed directory changes
  that directory's times; a ``.gitignore`` written in place changes its own; a directory mounted over
  changes its device and inode. Above the tree, a directory counts only for which one it is (the rest of
  the machine writes in ``/tmp`` and ``~`` all day), and its ``.gitignore`` and ``.git`` are noted
  present or missing, which is all of it that changes the answer. The change time cannot be set back
  by any program (``touch`` sets the modification time only), so a tree put back as it looked still
  differs. A stated clearance is not kept when anything it read changed less than :data:`SETTLING_NS`
  before the walk began: timestamps are coarse (a change in the same tick as the walk's read would
  leave no trace), so a tree that is still moving is walked every time until it settles.

A clearance is not kept when the walk was stopped, or (watched) when anything changed during it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from refagent.sandbox.search.journal import Journal, Watcher, journal
from refagent.sandbox.search.walk import UNKNOWN, Seen, join, looked, rg_can_walk

__all__ = ["SETTLING_NS", "Clearances", "Held", "Verdict"]

log = logging.getLogger(__name__)

SETTLING_NS = 2_000_000_000
"""How long (ns) before a walk the newest change it read must be for a stated clearance to be kept: more
than any file system's timestamp granularity (FAT's 2 s is the coarsest)."""

_Key = tuple[str, tuple[str, ...], tuple[str, ...]]


@dataclass
class _Kept:
    directory: str
    seen: list[Seen]
    watcher: Watcher | None
    """The clearance's watches, when every directory it read is watched."""

    def unchanged(self) -> bool:
        return self.watcher.unchanged() if self.watcher is not None else _unchanged(self.seen)

    @cached_property
    def listed(self) -> dict[str, int]:
        """Each directory the walk listed, relative to :attr:`directory` (``""`` is itself), and its watch."""
        prefix = join(self.directory, "")
        wds = self.watcher.wds if self.watcher is not None else {}
        return {
            ("" if path == self.directory else path[len(prefix) :]): wd
            for path, wd in wds.items()
            if path == self.directory or path.startswith(prefix)
        }

    def release(self) -> None:
        if self.watcher is not None:
            self.watcher.release()


Verdict = Literal["vouched", "look", "changed"]


class Held:
    """A watched tree, cleared and as it was when rg began (:meth:`Clearances.hold`): what rg then finds
    is vouched for by the journal, not looked at one by one."""

    def __init__(self, kept: _Kept, journal: Journal) -> None:
        self._kept = kept
        self._journal = journal
        self._mark = journal.mark()

    def verdict(self, paths: Sequence[str], folders: set[str] | None = None, *, files: bool) -> Verdict:
        """What rg found since the tree was held, ``paths`` (relative to its directory; ``folders``: their
        directories, when known), once rg has ended:

        - ``vouched``: each is where it says: in a directory the walk listed, none of which has changed
          shape (nor, with ``files``, which rg read, had a file or link made, removed or renamed: a file
          swapped for a link while rg read it).
        - ``changed``: not so; what rg found cannot be told from where a link swapped in and out led it.
        - ``look``: some are in directories the walk did not list (a link, or a rule the walk reads
          otherwise than rg): each must be looked at (:func:`~refagent.sandbox.search.ripgrep.where_it_says`).
        """
        if folders is None:
            folders = {path.rpartition("/")[0] for path in paths}
        listed = self._kept.listed
        if not self._kept.unchanged():
            return "changed"
        if files and self._journal.touched_since(self._mark, (listed[f] for f in folders if f in listed)):
            return "changed"
        return "vouched" if listed.keys() >= folders else "look"


class Clearances:
    """The last ``keep`` trees cleared for ripgrep (see the module docstring). Safe to use from several
    threads at once."""

    def __init__(
        self,
        keep: int = 8,
        clock: Callable[[], int] = time.time_ns,
        watch: Journal | Callable[[], Journal | None] | None = journal,
    ) -> None:
        """``watch``: the journal that watches clearances (default: the process's, where there is one;
        None: every clearance is stated)."""
        self.keep = keep
        self.clock = clock
        """The wall clock in ns, the one file times are set from."""
        self._journal = watch
        self._kept: OrderedDict[_Key, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.walks = 0
        """How many checks walked the tree (the others found it as it was cleared)."""
        self._unwatchable: set[_Key] = set()
        """The trees whose last walk could not watch them all (a network file system, too many directories)."""

    @property
    def journal(self) -> Journal | None:
        """The journal that watches the clearances kept here, or None (they are stated)."""
        journal = self._journal() if callable(self._journal) else self._journal
        return journal if self.keep else None

    def watches(self, directory: str, globs: list[str], confine: Sequence[str] = ()) -> bool:
        """Whether the tree is watched when it is cleared, as far as is known: there is a journal, and the
        tree's last walk (if any) could watch every directory. (A tree that cannot be watched is then
        checked beside rg, not before it: the check cannot vouch for rg's finds anyway.)"""
        return self.journal is not None and (directory, tuple(globs), tuple(confine)) not in self._unwatchable

    def held(self, directory: str, globs: list[str], confine: Sequence[str] = ()) -> Held | None:
        """The tree's watched clearance, held, when it is kept and nothing in it has changed: one read of
        the journal, no walk, no thread needed."""
        with self._lock:
            kept = self._kept.get((directory, tuple(globs), tuple(confine)))
        journal = self.journal
        if kept is None or kept.watcher is None or journal is None or not kept.unchanged():
            return None
        return Held(kept, journal)

    def rg_can_walk(
        self, directory: str, globs: list[str], confine: Sequence[str] = (), stop: threading.Event | None = None
    ) -> bool:
        """:func:`~refagent.sandbox.search.walk.rg_can_walk`'s answer for the tree (see :meth:`hold`)."""
        return self.hold(directory, globs, confine, stop) is not False

    def hold(
        self, directory: str, globs: list[str], confine: Sequence[str] = (), stop: threading.Event | None = None
    ) -> Held | bool:
        """Whether rg may walk the tree now (:func:`~refagent.sandbox.search.walk.rg_can_walk`), from a kept
        clearance when everything it read is as it was, else from a new walk (kept if it says yes and the
        tree held still): a :class:`Held` when the tree is watched, True when it is cleared but not
        watched (rg's finds must then be looked at), False when rg may not walk it: a ``.gitignore`` on
        its way is not safe to read, or the tree changed shape each of the two times it was walked and
        watched (a tree moving under the search, which the Python engine searches without being led by
        links)."""
        key = (directory, tuple(globs), tuple(confine))
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
        journal = self.journal
        if kept is not None and kept.unchanged():
            return Held(kept, journal) if kept.watcher is not None and journal is not None else True
        # A tree caught moving is walked once more: what moved it (a checkout, a build) may have ended.
        for _ in range(2):
            verdict, moving = self._walk(key, globs, confine, stop, journal)
            if not moving:
                return verdict
        log.info("searching %s without ripgrep: it changed shape while it was checked", directory)
        return False

    def _walk(
        self, key: _Key, globs: list[str], confine: Sequence[str], stop: threading.Event | None, journal: Journal | None
    ) -> tuple[Held | bool, bool]:
        """:meth:`hold`'s walk of the tree ``key`` names, keeping what it clears: its answer, and whether the
        tree changed shape while it was walked and watched (then not kept)."""
        directory = key[0]
        began = self.clock()
        watcher = journal.watcher(directory) if journal is not None else None
        seen: list[Seen] = []
        self.walks += 1
        safe = rg_can_walk(directory, globs, confine, stop, seen, watcher.add if watcher is not None else None)
        stopped = stop is not None and stop.is_set()
        moving = False
        if watcher is not None:
            watched = safe and not stopped and watcher.unchanged()
            moving = safe and not stopped and watcher.dirty and not watcher.failed
            with self._lock:
                if watcher.failed:
                    if len(self._unwatchable) >= 64:
                        self._unwatchable.clear()
                    self._unwatchable.add(key)
                else:
                    self._unwatchable.discard(key)
            if not watched:
                watcher.release()
                watcher = None
        newest = max((max(ident[4], ident[5]) for _, ident, _ in seen), default=0)
        keep = safe and not stopped and not moving and (watcher is not None or newest < began - SETTLING_NS)
        kept = _Kept(directory, seen, watcher) if keep else None
        dropped = []
        with self._lock:
            if (old := self._kept.pop(key, None)) is not None:
                dropped.append(old)
            if kept is not None:
                self._kept[key] = kept
                while len(self._kept) > self.keep:
                    dropped.append(self._kept.popitem(last=False)[1])
        for gone in dropped:
            gone.release()
        if kept is not None and kept.watcher is not None and journal is not None:
            return Held(kept, journal), moving
        return safe, moving


def _unchanged(seen: list[Seen]) -> bool:
    for path, was, whole in seen:
        try:
            if was == UNKNOWN or looked(path, whole) != was:
                return False
        except OSError:
            return False
    return True
