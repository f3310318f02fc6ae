"""Linux namespaces for a confined command: a user namespace (so no privilege is needed), a mount
namespace (everything read-only but the roots; a private ``/tmp``, ``/dev/shm`` and ``/run``; a ``/proc``
of its own), a PID namespace (its processes
see no others, and all die with its first one), and, for the ``workspace`` level, a network namespace
(no interface but a loopback that is down: no way out at all).

Standard library and ``ctypes`` only: :mod:`refagent.sandbox.launcher` runs this in a fresh
``python -I -S``. ``os.unshare`` exists only from Python 3.12 on, so the calls go through libc.
"""

from __future__ import annotations

import ctypes
import os
import struct

from refagent.sandbox.libc import libc, syscall
from refagent.sandbox.within import within

TYPE_CHECKING = False  # typing itself costs 14 ms to import, and this module runs in the launcher
if TYPE_CHECKING:
    from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

MOUNT_ATTR_RDONLY = 0x1
AT_RECURSIVE = 0x8000
_MOUNT_SETATTR = 442  # the same on every architecture (Linux 5.12)

PR_SET_PDEATHSIG = 1


class NamespaceError(OSError):
    """A namespace or mount step failed (the message names which)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise NamespaceError(number, f"{what} failed: {os.strerror(number)}")


def unshare(flags: int) -> None:
    """Move this (single-threaded) process into new namespaces; a new PID namespace takes its next child."""
    _check(libc.unshare(ctypes.c_int(flags)), "unshare")


def map_ids(uid: int, gid: int) -> None:
    """Be the same user inside the new user namespace as outside. Only one's own ids can be mapped
    without help from a process outside (the map file is judged by the credentials it was opened with,
    which are the new namespace's by now); ``setgroups`` must be denied first for that. Files of other
    users then show as owned by ``nobody``, and root inside has no power over them."""
    _write("/proc/self/setgroups", "deny\n")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="ascii") as file:
            file.write(text)
    except OSError as exc:
        raise NamespaceError(exc.errno or 0, f"writing {path} failed: {exc.strerror}") from None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = _encode
    _check(
        libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
        f"mount {target}",
    )


def _encode(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def make_private() -> None:
    """Nothing mounted from here on propagates back to the host's mount namespace."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def mount_setattr(path: str, *, read_only: bool, recursive: bool = True) -> None:
    """Make the mount at ``path`` (and, ``recursive``, every mount beneath it) read-only or writable."""
    attr = struct.pack("=QQQQ", MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    flags = AT_RECURSIVE if recursive else 0
    result = syscall(
        _MOUNT_SETATTR, ctypes.c_int(-100), os.fsencode(path), ctypes.c_uint(flags), buffer, ctypes.c_size_t(len(attr))
    )
    _check(0 if result == 0 else -1, f"mount_setattr {path}")


def writable_only(
    writable: Sequence[str],
    tmp: str | None,
    caches: Sequence[str] = (),
    shown: Sequence[str] = (),
    git_dirs: Sequence[str] = (),
) -> list[str]:
    """Every mount read-only, then ``writable`` (session roots) mounted back writable at their places,
    and ``tmp`` (the private temporary directory) writable as ``/tmp``, or at its own place when a root
    lies at or above ``/tmp``. Returns the ``caches`` made writable (see :func:`private_caches`).

    Read-only mounts hold what Landlock does not: ``chmod``, ``chown``, timestamps and extended
    attributes of files outside the roots. Roots that lie under the host's ``/tmp`` are mounted back on
    top of the private one, and so are the ``shown`` directories there (toolchains: a virtual
    environment the agent runs from, what ``PATH`` names), read-only; the rest of the host's ``/tmp``
    (other users' files, the sockets of tmux, X and SSH agents) is out of sight. The ``git_dirs`` inside
    the roots keep what runs code read-only (:func:`protect_git`). The paths are opened before anything
    is mounted, so each refers to the real directory.
    """
    roots = sorted(set(writable), key=len)  # a root inside another is mounted on top of it
    over_tmp = bool(tmp) and not any(within("/tmp", root) for root in roots)
    over_tmp_shown = [path for path in sorted(set(shown), key=len) if within(path, "/tmp")] if over_tmp else []
    held = {}
    for path in [*roots, *filter(None, [tmp]), *over_tmp_shown]:
        try:
            held[path] = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:  # a root that is gone, or not a directory: nothing there to write to
            continue
    roots = [root for root in roots if root in held]
    tmp = tmp if tmp in held else None
    layered = private_caches(caches, tmp) if tmp else []  # before the file system turns read-only
    mount_setattr("/", read_only=True)
    for cache in layered:
        mount_setattr(cache, read_only=False, recursive=False)
    if not any(within(root, run) or within(run, root) for root in roots for run in _RUN):
        private_run()
    if tmp and over_tmp:
        _bind_writable(held[tmp], "/tmp")
        for path in over_tmp_shown:
            if path in held and not any(within(path, root) for root in roots):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{held[path]}", path, None, MS_BIND | MS_REC)  # read-only, as "/" is
    elif tmp:
        _bind_writable(held[tmp], tmp)
    for root in roots:
        if over_tmp and within(root, "/tmp"):
            os.makedirs(root, exist_ok=True)  # inside the private /tmp: where the root shows again
        _bind_writable(held[root], root)
    for git_dir in git_dirs:
        if any(within(git_dir, root) for root in roots):
            protect_git(git_dir)
    for fd in held.values():
        os.close(fd)
    return layered


GIT_CODE = ("config", "config.worktree", "hooks", "info")
"""What in a git directory makes git run code or reach elsewhere: the configuration (``core.fsmonitor``,
``core.pager``, ``core.hooksPath``, aliases, filters), the hooks, and ``info`` (attributes that pick
filters, ``info/exclude``)."""


def protect_git(git_dir: str) -> None:
    """A sandboxed command may commit (objects, refs, the index stay writable), but may not plant what
    git runs later, outside the sandbox, when the user or an unconfined command uses the repository:
    :data:`GIT_CODE` of ``git_dir`` and of its submodules (``modules/*``) is mounted read-only, and
    ``git_dir`` itself becomes a mount point, so it can be neither removed nor renamed away (a new
    ``.git`` with a configuration of the command's own cannot take its place)."""
    if os.path.islink(git_dir) or not os.path.isdir(git_dir):
        return
    mount(git_dir, git_dir, None, MS_BIND)
    directories = [git_dir]
    modules = os.path.join(git_dir, "modules")
    if os.path.isdir(modules) and not os.path.islink(modules):
        for directory, subdirectories, _ in os.walk(modules):
            if "HEAD" in os.listdir(directory):
                directories.append(directory)
            subdirectories[:] = [name for name in subdirectories if name not in ("objects", "refs", "logs")]
    for directory in directories:
        hooks = os.path.join(directory, "hooks")
        if not os.path.lexists(hooks):
            os.mkdir(hooks)  # git makes it at `init`; here it must exist to be held read-only
        for name in GIT_CODE:
            path = os.path.join(directory, name)
            if os.path.lexists(path) and not os.path.islink(path):
                mount(path, path, None, MS_BIND | MS_REC)
                mount_setattr(path, read_only=True)


def private_caches(caches: Sequence[str], tmp: str) -> list[str]:
    """Each of ``caches`` (the user's package and build caches: ``~/.cache``, ``~/.cargo``, ...) under an
    overlay whose upper layer lies in ``tmp``: a toolchain reads what the host's cache holds and writes
    its locks and downloads into the session's own copy, so ``cargo build`` and ``go test`` work and the
    host's caches never change (nothing a command writes there can poison a later, unconfined build). A
    cache that cannot be layered (a file system overlayfs refuses) stays read-only. Returns those layered."""
    layered = []
    for index, cache in enumerate(caches):
        upper, work = (os.path.join(tmp, ".refagent-caches", str(index), part) for part in ("upper", "work"))
        try:
            os.makedirs(upper, exist_ok=True)
            os.makedirs(work, exist_ok=True)
            mount("overlay", cache, "overlay", 0, f"lowerdir={cache},upperdir={upper},workdir={work}")
        except OSError:
            continue
        layered.append(cache)
    return layered


_RUN = ("/run", "/var/run")


def private_run() -> None:
    """An empty ``/run`` (and ``/var/run`` where it is a directory of its own): the host's services listen
    there on Unix sockets (Docker, systemd and D-Bus, databases, the user's session in ``/run/user``),
    and neither a network namespace nor Landlock stops a ``connect`` to a socket file. What commands need
    of it comes back: the directory ``/etc/resolv.conf`` lives in (name lookups at level ``network``), the
    ``shm`` link, ``lock``, and the user's own ``/run/user/UID`` (empty)."""
    resolv = os.path.realpath("/etc/resolv.conf")
    keep = os.path.dirname(resolv) if any(within(resolv, run) for run in _RUN) else None
    held = os.open(keep, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if keep and os.path.isdir(keep) else None
    for run in _RUN:
        if os.path.isdir(run) and not os.path.islink(run):
            mount("tmpfs", run, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
    if os.path.isdir("/run") and not os.path.exists("/run/shm"):
        os.symlink("/dev/shm", "/run/shm")
        os.makedirs("/run/lock", exist_ok=True)
        os.chmod("/run/lock", 0o1777)  # as on the host (makedirs' mode goes through the umask)
        os.makedirs(f"/run/user/{os.getuid()}", mode=0o700, exist_ok=True)
    if held is not None and keep is not None:
        os.makedirs(keep, exist_ok=True)
        mount(f"/proc/self/fd/{held}", keep, None, MS_BIND | MS_REC)
        os.close(held)


def private_tmp_is_mounted(writable: Sequence[str]) -> bool:
    """Whether :func:`writable_only` puts the private directory over ``/tmp`` for these roots."""
    return not any(within("/tmp", root) for root in writable)


def _bind_writable(fd: int, target: str) -> None:
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    try:
        mount_setattr(target, read_only=False)
    except NamespaceError:  # a mount beneath it was read-only before us: it stays so (the kernel locks it)
        try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
            mount_setattr(target, read_only=False, recursive=False)
        except NamespaceError:  # so was the root's own: a workspace on a read-only file system stays one
            pass


def fresh_tmpfs(target: str) -> None:
    """An empty, private tmpfs at ``target`` (``/dev/shm``: POSIX semaphores and shared memory)."""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def fresh_proc() -> None:
    """A ``/proc`` that shows this PID namespace only: must run inside it (as its first process)."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def die_with_parent(signal_number: int) -> None:
    """Have the kernel send ``signal_number`` when the parent (thread) exits."""
    _check(libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
