"""Which files changed under the roots outside the agent's own tool calls.

Contract: a session starts :meth:`RootWatcher.run` as a background task (``await tg.start(w.run)``
returns once the watch is in place). :meth:`RootWatcher.drain` returns the paths changed since the last
drain — sorted, relative to the first root (the cwd) when under it, else absolute — and forgets them.
The tools call :meth:`RootWatcher.note_own_write` *after* each change they make (write, delete, move:
both ends), so the agent's own changes are not reported back to it as someone else's.

How: watchfiles' Rust notifier (``inotify``, FSEvents, ...) on each root, recursively. Its blocking
``watch`` runs in a worker thread of its own, which also filters the events, so the event loop only
ever takes a lock to drain. Not reported: directories (their files are), paths git ignores
(:class:`refagent.sandbox.disk.gitignore.GitIgnore`, ``.git`` always), what watchfiles' default filter drops
(``__pycache__``, ``node_modules``, editor swap and backup files, ...), and our own temporary files
(:data:`~refagent.sandbox.disk.write.TEMP_PREFIX`).

The agent's own writes: ``note_own_write(path)`` records the file's identity after the change (inode,
size, modification time, or "missing"). An event for that path whose file still has that identity is
ours and dropped; if the file changed again, the change is someone else's and reported. Events *below*
a noted path (a directory deleted or moved) are dropped for ``own_write_seconds``. A note also removes
the path from what is pending, so an event that beat the note does not count either.

Keeping it cheap and safe: a root with more than ``max_dirs`` directories (counted first, stopping at
the cap) is not watched at all — every directory costs a kernel watch and the notifier adds them all,
ignored ones included — and the watcher says so in the log. At most ``max_changes`` paths are kept
between drains (the rest are counted, see :meth:`drain_counted`). Cancelling ``run`` stops it (the
thread notices within ``step_ms``). An error (a root deleted, the OS watch limit reached) is logged and
the watch restarted later with back-off; it never reaches the agent.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import anyio.abc
import anyio.to_thread
from watchfiles import Change, DefaultFilter
from watchfiles._rust_notify import RustNotify
from watchfiles.main import _default_force_polling

from refagent.sandbox.disk.gitignore import GitIgnore
from refagent.sandbox.disk.write import TEMP_PREFIX

log = logging.getLogger(__name__)

Identity = tuple[int, int, int] | None
"""(inode, size, mtime in ns) of a file, or None when there is none."""


@dataclass(slots=True)
class _Note:
    identity: Identity
    until: float


class _TooBig(Exception):
    pass


class _RootGone(Exception):
    """A watched root was deleted or replaced: its kernel watch is gone, so the watch must restart."""


class RootWatcher:
    """Collects changed paths under ``roots`` (absolute paths; the first is the session cwd)."""

    def __init__(
        self,
        roots: Sequence[str],
        *,
        max_dirs: int = 20_000,
        max_changes: int = 1_000,
        debounce_ms: int = 200,
        step_ms: int = 50,
        own_write_seconds: float = 5.0,
        force_polling: bool | None = None,
    ) -> None:
        resolved = [os.path.realpath(root) for root in roots]
        self.roots = list(dict.fromkeys(resolved))
        self.max_dirs = max_dirs
        self.max_changes = max_changes
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.own_write_seconds = own_write_seconds
        self.force_polling = _default_force_polling(force_polling)
        """Poll instead of kernel events: None decides as watchfiles does (``WATCHFILES_FORCE_POLLING``,
        or WSL, where inotify does not see changes made from Windows)."""
        self.watching = False
        """A watch is in place now."""
        # Nested roots would report each event twice: watch only the outermost ones.
        self._watched = [
            r for r in self.roots if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in self.roots)
        ]
        self._rules = {root: GitIgnore(root) for root in self.roots}
        self._default_filter = DefaultFilter()
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._missed = 0
        self._notes: dict[str, _Note] = {}

    # -- the session's side ---------------------------------------------------------------------------

    def drain(self) -> list[str]:
        """The paths changed since the last drain (sorted; relative to the cwd when under it)."""
        return self.drain_counted()[0]

    def drain_counted(self) -> tuple[list[str], int]:
        """:meth:`drain`, and how many more paths changed than were kept (``max_changes``)."""
        with self._lock:
            pending, missed = self._pending, self._missed
            self._pending, self._missed = set(), 0
        return sorted(self._shown(path) for path in pending), missed

    def note_own_write(self, path: str) -> None:
        """The agent itself has just created, changed, deleted or moved ``path`` (absolute, resolved)."""
        path = path.rstrip("/") or "/"
        note = _Note(_identity(path), time.monotonic() + self.own_write_seconds)
        prefix = path + "/"
        with self._lock:
            self._notes[path] = note
            self._pending = {p for p in self._pending if p != path and not p.startswith(prefix)}

    # -- the watch ------------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled. Reports started once the first watch is in place (or has failed)."""
        stop = threading.Event()
        limiter = anyio.CapacityLimiter(1)  # our long-lived thread must not hold one of the shared tokens
        started = False
        delay = 1.0
        try:
            while True:
                opened: tuple[RustNotify, dict[str, Identity]] | None = None
                try:
                    opened = await anyio.to_thread.run_sync(self._open, limiter=limiter)
                except _TooBig:
                    roots = ", ".join(self._watched)
                    log.warning("not watching %s for changes: more than %d directories", roots, self.max_dirs)
                    if not started:
                        task_status.started()
                    return
                except Exception as exc:
                    log.warning("cannot watch %s for changes (%s); retrying in %.0f s", self._watched, exc, delay)
                if not started:
                    task_status.started()
                    started = True
                if opened is not None:
                    self.watching = True
                    try:
                        await anyio.to_thread.run_sync(
                            self._loop, opened, stop, abandon_on_cancel=True, limiter=limiter
                        )
                        return
                    except _RootGone as exc:
                        log.info("restarting the file watcher: %s", exc)
                        delay = 1.0
                    except Exception as exc:
                        log.warning("the file watcher failed (%s); restarting in %.0f s", exc, delay)
                    finally:
                        self.watching = False
                await anyio.sleep(delay)
                delay = min(delay * 2, 60.0)
        finally:
            stop.set()  # an abandoned watch thread sees this within step_ms, closes the notifier, and ends

    def _open(self) -> tuple[RustNotify, dict[str, Identity]]:
        roots = [root for root in self._watched if os.path.isdir(root)]
        if not roots:
            raise FileNotFoundError(f"no root exists ({', '.join(self._watched)})")
        if _count_dirs(roots, self.max_dirs) > self.max_dirs:
            raise _TooBig
        identities = {root: _dir_identity(root) for root in roots}
        return RustNotify(roots, False, self.force_polling, 300, True, True), identities

    def _loop(self, opened: tuple[RustNotify, dict[str, Identity]], stop: threading.Event) -> None:
        notify, roots = opened
        try:
            while not stop.is_set():
                changes = notify.watch(self.debounce_ms, self.step_ms, 5_000, stop)
                if not isinstance(changes, str):  # else "timeout", "stop", or "signal" (never in a thread)
                    self._take(changes)
                for root, identity in roots.items():
                    if _dir_identity(root) != identity:
                        raise _RootGone(f"{root} was deleted or replaced")
        finally:
            notify.close()

    def _take(self, changes: set[tuple[int, str]]) -> None:
        now = time.monotonic()
        kept: list[str] = []
        for change, path in changes:
            if os.path.basename(path) == ".gitignore":
                rules = self._rules_for(path)
                if rules is not None:
                    rules.forget(os.path.dirname(path))
            if not self._ignored(change, path):
                kept.append(path)
        identities = {path: _identity(path) for path in kept}  # stat outside the lock
        with self._lock:
            self._notes = {p: n for p, n in self._notes.items() if n.until > now}
            for path in kept:
                if self._is_own(path, identities[path]):
                    continue
                if path in self._pending:
                    continue
                if len(self._pending) >= self.max_changes:
                    self._missed += 1
                else:
                    self._pending.add(path)

    def _is_own(self, path: str, identity: Identity) -> bool:
        note = self._notes.get(path)
        if note is not None:
            return note.identity == identity
        parent = os.path.dirname(path)
        while parent and parent != "/":
            if parent in self._notes:
                return True
            parent = os.path.dirname(parent)
        return False

    def _ignored(self, change: int, path: str) -> bool:
        if os.path.basename(path).startswith(TEMP_PREFIX):
            return True
        if not self._default_filter(Change(change), path):
            return True
        rules = self._rules_for(path)
        if rules is None:
            return False
        try:
            info = os.lstat(path)
        except OSError:
            # Gone: it could have been a file or a directory; ignored if either would be.
            return rules.is_ignored(path) or rules.is_ignored(path, is_dir=True)
        if stat.S_ISDIR(info.st_mode):
            # Directories are not reported, their files are (a directory the agent's write created with
            # its parents would otherwise look like someone else's change).
            return True
        return rules.is_ignored(path)

    def _rules_for(self, path: str) -> GitIgnore | None:
        """The rules of the deepest root containing ``path``."""
        best: str | None = None
        for root in self.roots:
            if (path == root or path.startswith(root.rstrip("/") + "/")) and (best is None or len(root) > len(best)):
                best = root
        return self._rules[best] if best is not None else None

    def _shown(self, path: str) -> str:
        cwd = self.roots[0] if self.roots else "/"
        if path.startswith(cwd.rstrip("/") + "/"):
            return path[len(cwd.rstrip("/")) + 1 :]
        return path


def _identity(path: str) -> Identity:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _dir_identity(path: str) -> Identity:
    """(device, inode, 0) of a directory: a deleted and re-created root differs."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, 0


def _count_dirs(roots: Sequence[str], cap: int) -> int:
    """The number of directories under ``roots`` (links not followed), counting stops past ``cap``."""
    count = 0
    stack = list(roots)
    while stack:
        directory = stack.pop()
        count += 1
        if count > cap:
            return count
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return count
