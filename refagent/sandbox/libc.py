"""What the launcher's modules share (:mod:`refagent.sandbox.landlock`, :mod:`refagent.sandbox.namespaces`):
the C library, its ``syscall``, and a path test. Standard library only, as they are."""

from __future__ import annotations

import ctypes

libc = ctypes.CDLL(None, use_errno=True)
"""The process's C library (``errno`` kept for :func:`ctypes.get_errno`)."""

syscall = libc.syscall
"""``syscall(2)``, for the calls libc has no wrapper for (Landlock, ``mount_setattr``)."""
syscall.restype = ctypes.c_long


def within(path: str, ancestor: str) -> bool:
    """Whether ``path`` is ``ancestor`` or lies beneath it (both absolute and normalised)."""
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")
