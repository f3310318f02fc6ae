"""A session's private ``/tmp``: :class:`PrivateTmp`, and the removal of those dead agents left
(:func:`remove_stale_private_dirs`).

Each session has a directory of its own in the system's temporary directory, ``refagent-tmp-...``, beside
a ``.lock`` file its agent holds locked (``flock``) for as long as it lives, and a ``.layers`` directory
where the private layers of the user's caches lie (:func:`refagent.sandbox.confine.namespaces.private_caches`:
on the disk, and out of every command's sight).

Where commands get namespaces, the directory is only a mount point: the ``/tmp`` they share is a tmpfs of
:data:`TMP_SHARE` of the machine's memory, kept by a *holder*, a small process of the launcher's
(``launcher.py --hold-tmp``) in a user and mount namespace of its own, which each command joins before
making its own (``--tmp-in``). So the session's ``/tmp`` is bounded as a whole (a command that fills it
gets ``ENOSPC``), lasts from one command to the next, and is gone with the holder: when the session closes,
or the agent dies. Without namespaces, or where the holder cannot start, it is the directory itself,
bounded per file only (``RLIMIT_FSIZE``), and the agent says so in its log.

What is removed is removed by descriptor (:func:`refagent.sandbox.confine.removal.remove_tree`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import select
import sys
import tempfile
from typing import TYPE_CHECKING

from refagent.sandbox.confine.probe import LAUNCHER
from refagent.sandbox.confine.removal import remove_tree

if TYPE_CHECKING:  # made when a session's first command runs: subprocess is off the first answers' path
    import subprocess

log = logging.getLogger(__name__)

TMP_PREFIX = "refagent-tmp-"
"""Private directories are ``refagent-tmp-...`` in the system's temporary directory (see above)."""
TMP_SHARE = 0.25
"""The size of a session's ``/tmp`` (a tmpfs, where commands get namespaces), as a share of ``MemTotal``:
what it holds is memory, and counts against the command that wrote it."""
_HOLDER_SECONDS = 5.0


class PrivateTmp:
    """One session's private ``/tmp`` (see the module docstring), made on first use. ``bounded``: kept on a
    tmpfs by a holder (where commands get namespaces)."""

    def __init__(self, *, bounded: bool) -> None:
        self.bounded = bounded
        self._path: str | None = None
        self._lock: int | None = None
        self._holder: subprocess.Popen[bytes] | None = None

    def path(self) -> str:
        """The directory, made now (with its holder) if need be."""
        if self._path is None or not os.path.isdir(self._path):
            self.close()
            path = tempfile.mkdtemp(prefix=TMP_PREFIX)
            self._lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)  # held until close(), or until this process ends
            os.mkdir(path + ".layers", 0o700)
            self._path = path
            atexit.register(self.close)
        if self.bounded and (self._holder is None or self._holder.poll() is not None):
            self._holder = _start_holder(self._path)  # again if it died: what it held is gone with it
        return self._path

    def holder(self) -> int | None:
        """The pid of the holder whose namespaces commands join (``--tmp-in``), if there is one."""
        self.path()
        return self._holder.pid if self._holder is not None else None

    def layers(self) -> str:
        """Where the private layers of the user's caches lie (``--layers``)."""
        return self.path() + ".layers"

    def close(self) -> None:
        """End the holder (the tmpfs goes with it), and remove the directory, its layers and its lock."""
        holder, self._holder = self._holder, None
        if holder is not None:
            import subprocess  # here: kept off this module's import (1.3 ms, see _start_holder), which loaded it

            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                assert holder.stdin is not None
                holder.stdin.close()  # its end of input: it exits
                holder.wait(_HOLDER_SECONDS)
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        path, self._path = self._path, None
        lock, self._lock = self._lock, None
        if path is not None:
            _remove(path)
        if lock is not None:
            os.close(lock)


def _start_holder(path: str) -> subprocess.Popen[bytes] | None:
    """A holder of a tmpfs over ``path`` (``launcher.py --hold-tmp``), once it says it is ready; None (and
    a warning in the log) if it cannot start or does not say so in time."""
    import subprocess  # here: session/new (with initialize) is answered before subprocess is loaded (1.3 ms)

    size = _tmp_size()
    if size is None:
        return None
    try:
        holder = subprocess.Popen(
            [sys.executable, "-I", "-S", LAUNCHER, "--hold-tmp", str(size), "--tmp", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the agent's group: an editor's Ctrl-C is not for it
        )
    except OSError as exc:
        log.warning("the session's /tmp is not bounded: its holder did not start (%s)", exc)
        return None
    assert holder.stdout is not None
    said = b""
    if select.select([holder.stdout], [], [], _HOLDER_SECONDS)[0]:
        said = holder.stdout.readline()
    if said != b"ready\n":
        holder.kill()
        holder.wait()
        log.warning("the session's /tmp is not bounded: %s", said.decode("utf-8", "replace").strip() or "no answer")
        return None
    return holder


def _tmp_size() -> int | None:
    """:data:`TMP_SHARE` of the machine's memory, in bytes (None if unknown)."""
    total = memory_total()
    return None if total is None else int(total * TMP_SHARE)


def memory_total() -> int | None:
    """The machine's memory in bytes (``MemTotal`` of /proc/meminfo), if known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _remove(path: str) -> None:
    """Remove the directory and its layers; the lock file too once both are gone. What a command still
    running kept (it made entries faster than they went) stays with its lock file, which its agent no
    longer holds: the next agent's :func:`remove_stale_private_dirs` takes it."""
    remove_tree(path)
    remove_tree(path + ".layers")
    if not os.path.lexists(path) and not os.path.lexists(path + ".layers"):
        with contextlib.suppress(OSError):
            os.unlink(path + ".lock")


def remove_stale_private_dirs() -> list[str]:
    """Remove the private directories no living agent holds (``kill -9`` leaves them); returns them.

    A lock, not a process id, says whether the owner lives: an agent in another PID namespace that shares
    this ``/tmp`` has a pid this one cannot see."""
    removed: list[str] = []
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(TMP_PREFIX) or name.endswith((".lock", ".layers")):
            continue
        path = os.path.join(root, name)
        try:
            lock = os.open(path + ".lock", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue  # no lock file: not ours to judge
        try:
            if os.fstat(lock).st_uid != os.getuid():
                continue
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its agent lives
        finally:
            os.close(lock)
        _remove(path)
        removed.append(path)
    return removed
