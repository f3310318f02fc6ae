"""Landlock (Linux 5.13+): an unprivileged process restricts itself and everything it starts afterwards.

A small ``ctypes`` binding of the three system calls, owned here rather than taken from PyPI: the
launcher (:mod:`refagent.sandbox.confine.launcher`) runs it with ``python -I -S``, so it must be standard
library only and cheap to import, and it needs the newer ABIs (TCP rules in 4, scopes in 6) that the
small PyPI bindings do not all cover.

What refagent asks of it (see :func:`restrict`):

* **File system**: the *write* rights are handled (denied by default) and granted only beneath the given
  directories, plus writing to a few character devices (``/dev/null`` ...). Reading and executing are not
  handled: they stay allowed everywhere. Handling ``REFER`` (ABI 2) is what stops a hard link or a rename
  from carrying a file out of reach into a writable place: Landlock refuses a link whose destination
  would give more rights than its source.
* **TCP** (ABI 4): with ``deny_tcp``, ``bind`` and ``connect`` are handled with no rule, so both fail.
* **Scopes** (ABI 6): signals to processes outside the domain are refused (the agent cannot be killed
  from inside), and so are abstract Unix sockets created outside it (an X server or a session bus).

What it does not do: hide other processes. ``/proc/PID/environ`` of a process outside the domain (the
agent's, with its API key) stayed readable under ABI 7 on Linux 6.18 here; the PID namespace with its
own ``/proc`` (:mod:`refagent.sandbox.confine.namespaces`) is what hides them.

Reference: the kernel's ``Documentation/userspace-api/landlock.rst`` and ``include/uapi/linux/landlock.h``.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct

from refagent.sandbox.confine.libc import libc, syscall

TYPE_CHECKING = False  # typing itself costs 14 ms to import, and this module runs in the launcher
if TYPE_CHECKING:
    from collections.abc import Iterable

# System call numbers: the same on every architecture (they were added after the tables were unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# Access rights for files and directories, one bit each in the kernel's order (<linux/landlock.h>): the
# first thirteen came with ABI 1, REFER with ABI 2, TRUNCATE with ABI 3.
(
    EXECUTE,
    WRITE_FILE,
    READ_FILE,
    READ_DIR,
    REMOVE_DIR,
    REMOVE_FILE,
    MAKE_CHAR,
    MAKE_DIR,
    MAKE_REG,
    MAKE_SOCK,
    MAKE_FIFO,
    MAKE_BLOCK,
    MAKE_SYM,
    REFER,
    TRUNCATE,
) = (1 << bit for bit in range(15))

NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # network rights (ABI 4)
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # scopes (ABI 6)

_WRITE_V1 = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK
_WRITE_V1 |= MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
"""The only rights a rule on a file (not a directory) may carry."""

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts")
"""Character devices every command may open for writing (``> /dev/null``, terminals and pseudo-terminals)."""


class LandlockError(OSError):
    """A Landlock call failed (the message names which)."""


def abi_version() -> int:
    """The kernel's Landlock ABI version: 0 where Landlock is missing or switched off."""
    try:
        version = syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0
    return max(0, int(version))


def write_rights(abi: int) -> int:
    """Every right that changes the file system, as far as ``abi`` knows them."""
    rights = _WRITE_V1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict(writable: Iterable[str], *, abi: int, deny_tcp: bool, scope_signals: bool = True) -> None:
    """Restrict this process (and its future children) for good: writes only beneath ``writable`` (and
    to :data:`DEVICES`); with ``deny_tcp`` (ABI 4+), no TCP bind or connect; with ``scope_signals``
    (ABI 6+), no signals to processes outside and no abstract Unix sockets made outside.

    Paths that do not exist are skipped. Sets ``no_new_privs`` first, as Landlock requires of an
    unprivileged caller. Raises :class:`LandlockError` if the kernel refuses any step: the caller must
    then not run the command, since it would run less confined than promised.
    """
    if abi < 1:
        raise LandlockError("Landlock is not available")
    handled_fs = write_rights(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if deny_tcp and abi >= 4 else 0
    scoped = 0
    if abi >= 6:
        scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if scope_signals else 0
    # struct landlock_ruleset_attr grew with the ABI: pass only the fields this kernel knows.
    attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buffer = ctypes.create_string_buffer(attr[:size], size)
    ruleset = syscall(_CREATE_RULESET, buffer, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _error("landlock_create_ruleset")
    try:
        for path in writable:
            _allow(ruleset, path, handled_fs)
        for device in DEVICES:
            _allow(ruleset, device, handled_fs & (WRITE_FILE | TRUNCATE))
        _no_new_privs()
        if syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise _error("landlock_restrict_self")
    finally:
        os.close(int(ruleset))


def _allow(ruleset: int, path: str, rights: int) -> None:
    """Add a path-beneath rule; a missing path is skipped, a file gets only the rights files can have."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        # struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd.
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        if syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)) < 0:
            raise _error(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _no_new_privs() -> None:
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise _error("prctl(PR_SET_NO_NEW_PRIVS)")


def _error(call: str) -> LandlockError:
    number = ctypes.get_errno()
    return LandlockError(number, f"{call} failed: {os.strerror(number)}")
