"""Process checks shared by the tests."""

from __future__ import annotations

import os

import anyio


def alive(pid: int) -> bool:
    """Running, and not a zombie (here PID 1 may not reap orphans, so dead processes can linger as zombies)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def survivors(marker: str) -> list[int]:
    """Processes (not zombies) with an argument that starts with ``marker`` (``sleep 71234.5`` for the
    marker ``71234``; a shell whose script merely mentions it does not count)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read()
        except OSError:
            continue
        if b"\0" + marker.encode() in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


async def gone(marker: str, within: float = 5.0) -> list[int]:
    """Wait until no process carries ``marker`` (the kernel tears a namespace down asynchronously)."""
    with anyio.move_on_after(within):
        while survivors(marker):  # noqa: ASYNC110 - processes of another namespace: nothing to wait on
            await anyio.sleep(0.02)
    return survivors(marker)
