"""What the launcher's modules share (:mod:`refagent.sandbox.confine.landlock`,
:mod:`refagent.sandbox.confine.namespaces`): the C library and its ``syscall``. Standard library only, as
they are. (Their path test is :func:`refagent.sandbox.within.within`, which needs no ``ctypes``.)"""

from __future__ import annotations

import ctypes

libc = ctypes.CDLL(None, use_errno=True)
"""The process's C library (``errno`` kept for :func:`ctypes.get_errno`)."""

syscall = libc.syscall
"""``syscall(2)``, for the calls libc has no wrapper for (Landlock, ``mount_setattr``)."""
syscall.restype = ctypes.c_long
