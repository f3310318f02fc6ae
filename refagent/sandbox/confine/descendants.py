"""The processes below this one, found in ``/proc`` and ended: what the launcher's keeper does without a PID
namespace (:func:`refagent.sandbox.confine.launcher._keep`); and a process's start time (:func:`start_time`), which
tells it from a later one given the same pid. The keeper is their subreaper
(:func:`refagent.sandbox.confine.namespaces.child_subreaper`), so a process that double-forks or calls ``setsid``
is still below it, and none of its children left means none of its descendants is left.

Standard library only: the launcher runs this in a fresh ``python -I -S``.
"""

from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False  # typing costs 14 ms to import
if TYPE_CHECKING:
    import signal
    from collections.abc import Iterator
else:
    import _signal as signal  # the C module under `signal`, whose enums cost 5 ms to import


def signal_all(number: int) -> None:
    """Send ``number`` to every process below this one (with SIGCONT, so a stopped one acts on it)."""
    for pid in below(os.getpid()):
        kill(pid, number)
        kill(pid, signal.SIGCONT)


def end_all(seconds: float) -> None:
    """Kill every process below this one and reap them all: again and again, since a killed parent's
    children come to this process and are found on the next round. Gives up after ``seconds`` (a process
    that cannot be killed, another user's now, is left)."""
    me = os.getpid()
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # no child left: no descendant is left
        except InterruptedError:
            continue
        left = below(me)
        for pid in left:
            kill(pid, signal.SIGKILL)
        select.select([], [], [], 0.002 if left else 0.01)


def below(ancestor: int) -> list[int]:
    """The live processes below ``ancestor``, from ``/proc`` (zombies left out: they are only to reap)."""
    children: dict[int, list[int]] = {}
    for pid, fields in live():
        children.setdefault(int(fields[1]), []).append(pid)
    found, level = [], [ancestor]
    while level:
        level = [child for parent in level for child in children.get(parent, ())]
        found += level
    return found


def live() -> Iterator[tuple[int, list[bytes]]]:
    """Each process running now (zombies left out) with the fields of its ``/proc/PID/stat`` after
    ``pid (comm)``: state, ppid, pgrp, session, ... A process that ends while this looks is passed over."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if len(fields) > 3 and fields[0] not in (b"Z", b"X"):
            yield int(name), fields


def start_time(pid: int) -> str:
    """When ``pid`` started, in clock ticks after boot (field 22 of ``/proc/PID/stat``); "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def kill(pid: int, number: int) -> None:
    """Send ``number`` to ``pid``, if it can still be sent (gone or another user's: nothing to do)."""
    try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
        os.kill(pid, number)
    except OSError:
        pass
