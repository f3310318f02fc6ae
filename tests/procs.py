"""Process checks shared by the tests."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Running, and not a zombie (here PID 1 may not reap orphans, so dead processes can linger as zombies)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
