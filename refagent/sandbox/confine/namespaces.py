"""Linux namespaces for a confined command: a user namespace (so no privilege is needed), a mount
namespace (everything read-only but the roots; a private ``/tmp``, ``/dev/shm`` and ``/run``; a ``/proc``
of its own), a PID namespace (its processes
see no others, and all die with its first one), and, for the ``workspace`` level, a network namespace
(no interface but its own loopback, brought up: a server the command starts is reachable from it, and
there is no way out at all).

Standard library and ``ctypes`` only: :mod:`refagent.sandbox.confine.launcher` runs this in a fresh
``python -I -S``. ``os.unshare`` exists only from Python 3.12 on, so the calls go through libc.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct

from refagent.sandbox.confine.libc import libc, syscall
from refagent.sandbox.within import within

TYPE_CHECKING = False  # typing itself costs 14 ms to import, and this module runs in the launcher
if TYPE_CHECKING:
    from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
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
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


class NamespaceError(OSError):
    """A namespace or mount step failed (the message names which)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise NamespaceError(number, f"{what} failed: {os.strerror(number)}")


def join(pid: int) -> None:
    """Enter the user and mount namespaces of ``pid`` (the session's ``/tmp`` holder, which is this user's:
    its user namespace gives this process every capability needed to enter its mounts). The working
    directory is the mount namespace's root afterwards: the caller changes back to its own."""
    for kind, flag in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS)):
        try:
            fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NamespaceError(exc.errno or 0, f"the session's /tmp is gone ({exc.strerror})") from None
        try:
            _check(libc.setns(ctypes.c_int(fd), ctypes.c_int(flag)), f"setns({kind})")
        finally:
            os.close(fd)


def unshare(flags: int) -> None:
    """Move this (single-threaded) process into new namespaces; a new PID namespace takes its next child."""
    _check(libc.unshare(ctypes.c_int(flags)), "unshare")


SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40
_IFREQ_SIZE = 40  # struct ifreq: a 16-byte name, then a 24-byte union whose first field is the flags


def loopback_up() -> None:
    """Bring up the loopback of this process's new network namespace (it starts down), so a command can
    talk to the servers it starts itself (a test suite's, a dev server's) on 127.0.0.1 and ::1. The
    namespace's loopback is its own: the host's servers stay out of reach."""
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM: any socket takes interface ioctls
    if fd < 0:
        _check(-1, "a socket to configure the loopback")
    try:
        request = ctypes.create_string_buffer(_IFREQ_SIZE)
        request.value = b"lo"  # the interface's name, NUL-terminated (the rest is zeros already)
        struct.pack_into("=h", request, 16, IFF_UP | IFF_LOOPBACK | IFF_RUNNING)
        _check(libc.ioctl(fd, ctypes.c_ulong(SIOCSIFFLAGS), request), "bringing the loopback up")
    finally:
        os.close(fd)


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
    layers: str | None = None,
) -> list[str]:
    """Every mount read-only, then ``writable`` (session roots) mounted back writable at their places,
    and ``tmp`` (the private temporary directory) writable as ``/tmp``, or at its own place when a root
    lies at or above ``/tmp``. Returns the ``caches`` made writable (see :func:`private_caches`), whose
    private layers lie in ``layers`` (by default in ``tmp``).

    Read-only mounts hold what Landlock does not: ``chmod``, ``chown``, timestamps and extended
    attributes of files outside the roots. Roots that lie under the host's ``/tmp`` are mounted back on
    top of the private one, and so are the ``shown`` directories there (toolchains: a virtual
    environment the agent runs from, what ``PATH`` names), read-only; the rest of the host's ``/tmp``
    (other users' files, the sockets of tmux, X and SSH agents) is out of sight. The paths are opened
    before anything is mounted, so each refers to the real directory.
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
    layers = layers or tmp
    layered = private_caches(caches, layers) if layers and tmp else []  # before the file system turns read-only
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
    for fd in held.values():
        os.close(fd)
    return layered


def hold_read_only(path: str) -> None:
    """Mount ``path`` (a directory with everything beneath it, or a file) over itself, read-only: the
    command can neither change it nor remove or rename it (a mount point cannot be)."""
    mount(path, path, None, MS_BIND | MS_REC)
    mount_setattr(path, read_only=True)


def pin(path: str) -> None:
    """Mount the directory ``path`` over itself with everything mounted beneath, as it is (writable stays
    writable): a mount point can be neither renamed nor removed, so what lies below keeps its place."""
    mount(path, path, None, MS_BIND | MS_REC)


def bounded_tmpfs(path: str, size: int) -> None:
    """A fresh tmpfs of ``size`` bytes over ``path``, for this user alone (mode 0700)."""
    mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0700")


def hide(path: str) -> None:
    """Put an empty, read-only stand-in over ``path``: an empty directory for a directory, ``/dev/null``
    for anything else. Nothing under it can be read, written, removed or renamed. A path the namespace
    cannot see (under the private ``/tmp``, say) is hidden already, and skipped."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):  # the caller passes real paths: a link here appeared since, and leads elsewhere
        return
    if stat.S_ISDIR(mode):
        mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=4k")
    else:
        mount("/dev/null", path, None, MS_BIND)
        mount_setattr(path, read_only=True, recursive=False)


def private_caches(caches: Sequence[str], tmp: str) -> list[str]:
    """Each of ``caches`` (the user's package and build caches: ``~/.cache``, ``~/.cargo``, ...) under an
    overlay whose upper layer lies in ``tmp``: a toolchain reads what the host's cache holds and writes
    its locks and downloads into the session's own copy, so ``cargo build`` and ``go test`` work and the
    host's caches never change (nothing a command writes there can poison a later, unconfined build). A
    cache that cannot be layered (a file system overlayfs refuses) stays read-only. Returns those layered.

    ``tmp`` is the commands' own ``/tmp``: an earlier command may have left a link where a layer goes
    (``/tmp/.refagent-caches`` -> a directory outside the roots, which would become the upper layer, where
    the next command's writes land). So each directory of the way is made and opened by descriptor without
    following a link (a link or a file in its place is removed first), and the overlay is given the
    descriptors' paths."""
    layered: list[str] = []
    try:
        base = _directory_at(os.open(tmp, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), ".refagent-caches")
    except OSError:
        return layered
    for index, cache in enumerate(caches):
        opened: list[int] = []
        try:
            opened.append(_directory_at(base, str(index), close_parent=False))
            for part in ("upper", "work"):
                opened.append(_directory_at(opened[0], part, close_parent=False))
            upper, work = opened[1:]
            options = f"lowerdir={cache},upperdir=/proc/self/fd/{upper},workdir=/proc/self/fd/{work}"
            mount("overlay", cache, "overlay", 0, options)
        except OSError:
            continue
        finally:
            for fd in opened:
                os.close(fd)
        layered.append(cache)
    os.close(base)
    return layered


def _directory_at(parent: int, name: str, *, close_parent: bool = True) -> int:
    """``name`` in the directory ``parent`` (a descriptor, closed unless ``close_parent`` is False), a
    directory of its own: made if missing, and anything else there (a link, a file) removed first. An
    ``O_PATH`` descriptor of it; no link is ever followed."""
    try:
        for _ in range(3):
            try:
                return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except FileNotFoundError:
                pass
            except OSError:  # a link (ELOOP), or not a directory: an earlier command's, and not ours to keep
                os.unlink(name, dir_fd=parent)
            try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass
        raise OSError(f"{name} keeps changing")
    finally:
        if close_parent:
            os.close(parent)


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


DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
"""The host's devices a command gets in its ``/dev`` (``tty`` is the controlling terminal, its own)."""


def private_dev() -> None:
    """A ``/dev`` of the command's own, as a container has: the :data:`DEVICES` of the host, a private
    ``devpts`` instance (pseudo-terminals the command opens are its own, and no terminal of the user's
    shows in ``/dev/pts``), ``ptmx`` leading there, a fresh ``/dev/shm``, and the ``fd``, ``stdin``,
    ``stdout`` and ``stderr`` links. Nothing else of the host's ``/dev`` (other terminals and consoles,
    disks, ``/dev/kmsg``) is there to open, whoever the command runs as. The directory itself is
    read-only. Where the kernel refuses a ``devpts`` instance, ``/dev/pts`` stays empty: no
    pseudo-terminals rather than the host's."""
    held = {}
    for name in DEVICES:
        try:
            held[name] = os.open("/dev/" + name, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name, fd in held.items():
        os.close(os.open("/dev/" + name, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        mount(f"/proc/self/fd/{fd}", "/dev/" + name, None, MS_BIND)
        os.close(fd)
    os.mkdir("/dev/pts", 0o755)
    try:
        mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
        os.symlink("pts/ptmx", "/dev/ptmx")
    except NamespaceError:
        pass
    os.mkdir("/dev/shm", 0o1777)
    fresh_tmpfs("/dev/shm")
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, "/dev/" + link)
    os.symlink("/proc/self/fd/2", "/dev/stderr")
    mount_setattr("/dev", read_only=True, recursive=False)


PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
"""Parts of ``/proc`` that change the kernel rather than describe the namespace: read-only, for a
command that runs as root (whose user id the kernel's own checks there take for the real root)."""


def protect_proc() -> None:
    """Hold the :data:`PROC_READ_ONLY` parts of the namespace's ``/proc`` read-only (after :func:`fresh_proc`)."""
    for name in PROC_READ_ONLY:
        path = "/proc/" + name
        if os.path.lexists(path):
            hold_read_only(path)


def drop_privileges() -> None:
    """What the command's process does last before exec: empty the capability bounding set and the
    ambient set, and set ``no_new_privs``. A user namespace gives its first processes every capability
    inside it, and a command run as root would keep them across exec: it could then unmount or remount
    what holds it (without Landlock, which refuses every mount change, nothing else would stop it).
    With an empty bounding set, exec leaves root with no capability, and nothing the command runs
    (setuid programs, file capabilities) gains one. A user namespace the command makes has capabilities
    again, but over mounts the kernel locks: it cannot make one writable or take one away."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as file:
            last = int(file.read())
    except (OSError, ValueError):
        last = 63
    for capability in range(last + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # kernels before 4.3 have no ambient set
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def not_dumpable() -> None:
    """The namespace's init: no command can trace it or read its memory and file descriptors."""
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def fresh_tmpfs(target: str) -> None:
    """An empty, private tmpfs at ``target`` (``/dev/shm``: POSIX semaphores and shared memory)."""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def fresh_proc() -> None:
    """A ``/proc`` that shows this PID namespace only: must run inside it (as its first process)."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


RESERVED_PIDS = 300
"""Pids a namespace does not hand out again once they have wrapped (the kernel's ``RESERVED_PIDS``)."""


def limit_tasks(tasks: int) -> bool:
    """Fewer than ``tasks`` processes and threads in this PID namespace at once, root's too: its own
    ``pid_max`` (Linux 6.14+, which makes it per namespace), after :func:`fresh_proc`. Pids are numbers
    below it; once they wrap, the first :data:`RESERVED_PIDS` are not handed out again, so the bound is then
    ``tasks - 300``, and it is never below 300 (the kernel's least ``pid_max``). False where the kernel
    keeps one ``pid_max`` for the machine (the cgroup's ``pids.max``, where there is one, and
    ``RLIMIT_NPROC`` for others than root, still bound it)."""
    try:
        fd = os.open("/proc/sys/kernel/pid_max", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, str(max(tasks, RESERVED_PIDS + 1)).encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def child_subreaper() -> None:
    """Become the subreaper of this process's descendants: an orphan among them (a double fork, a
    daemon's ``setsid``) becomes this process's child, not init's, so it can always be found and ended."""
    _check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")


def die_with_parent(signal_number: int) -> None:
    """Have the kernel send ``signal_number`` when the parent (thread) exits."""
    _check(libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
