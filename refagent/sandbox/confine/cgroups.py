"""A command's control group: a memory bound and a task bound on a command and everything it starts, as
root too, where this machine lets the agent make one.

``RLIMIT_NPROC`` binds no process of root's (the kernel exempts it), and no resource limit bounds the
memory of a command's processes together. A cgroup does both: the launcher makes one for each command
(``refagent-PID-...`` in each of :func:`bases`), writes the limits its controllers take and moves itself
in before it starts anything (:func:`enter`: everything the command starts is born inside, and with
namespaces the mounts that hold ``/sys/fs/cgroup`` read-only keep it there); the agent removes it once
the launcher has exited and it is empty (:func:`remove_stale`, before each command and when a session
closes). A command that goes past the memory bound is killed by the kernel's
OOM killer inside its cgroup; one that forks past the task bound gets ``EAGAIN``. The agent and the editor
are outside it and go on.

Where a cgroup can be made:

- cgroup v1 (one hierarchy per controller): the agent's own ``memory`` and ``pids`` cgroups, where it may
  write them (as root, as a rule);
- cgroup v2: the agent's own cgroup when its ``cgroup.subtree_control`` already gives children the
  ``memory`` or ``pids`` controller and it may write it (the root cgroup of a container's namespace, say).
  A desktop's systemd session does not: the agent shares its cgroup with the editor, and the kernel gives
  a cgroup that holds processes no controlled children. There the memory is not bounded, and the PID
  namespace's own ``pid_max`` (Linux 6.14+) bounds the tasks (:func:`refagent.sandbox.confine.namespaces.limit_tasks`).

Standard library only: :func:`enter` runs in the launcher (a fresh ``python -I -S``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs 14 ms to import, and the launcher imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

PREFIX = "refagent-"
"""A command's cgroup is ``refagent-PID-RANDOM`` (the launcher's pid) in a base."""

_LIMITS = (
    # (file, the --limits name it takes its value from): each file a cgroup has is written.
    ("memory.max", "MEMORY"),  # v2
    ("memory.swap.max", "SWAP"),  # v2: no swap, or the bound would only make the machine swap
    ("memory.oom.group", "OOM_GROUP"),  # v2: an OOM kill ends the whole command, not one process of it
    ("memory.limit_in_bytes", "MEMORY"),  # v1
    ("memory.memsw.limit_in_bytes", "MEMORY"),  # v1 with swap accounting: memory and swap together
    ("pids.max", "TASKS"),  # v1 and v2
)
_FIXED = {"SWAP": 0, "OOM_GROUP": 1}


def bases() -> list[str]:
    """The directories in which a command's cgroup can be made with a memory or a task limit (see the
    module docstring): the agent's own cgroups, where it may write them. Reads ``/proc``; makes nothing."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as file:
            memberships = [line.rstrip("\n").split(":", 2) for line in file]
        with open("/proc/self/mountinfo", encoding="utf-8") as file:
            mounts = [line.split() for line in file]
    except OSError:
        return []
    found: list[str] = []
    for parts in memberships:
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        wanted = {"memory", "pids"} & set(controllers.split(","))
        if controllers and not wanted:
            continue
        base = _mounted(mounts, "cgroup2" if not controllers else "cgroup", wanted, path)
        if base is None or not os.access(base, os.W_OK):
            continue
        if not controllers:  # v2: its children must have a controller
            try:
                with open(os.path.join(base, "cgroup.subtree_control"), encoding="utf-8") as file:
                    if not {"memory", "pids"} & set(file.read().split()):
                        continue
            except OSError:
                continue
        if base not in found:
            found.append(base)
    return found


def _mounted(mounts: list[list[str]], kind: str, controllers: set[str], path: str) -> str | None:
    """Where the cgroup ``path`` of a hierarchy (``kind``, with one of ``controllers`` for v1) is mounted."""
    for fields in mounts:
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or fields[dash + 1] != kind:
            continue
        if kind == "cgroup" and not controllers & set(fields[dash + 3].split(",")):
            continue
        root, point = fields[3], fields[4]
        if path == root or path.startswith(root.rstrip("/") + "/"):
            inner = path[len(root.rstrip("/")) :].lstrip("/")
            return os.path.join(point, inner) if inner else point
    return None


def enter(bases: Sequence[str], limits: Mapping[str, int]) -> list[str]:
    """Make this process's cgroup in each of ``bases``, write ``limits`` (``MEMORY`` bytes, ``TASKS``) to
    the files it has for them, and move this process in; the cgroups made. Raises :class:`OSError` if one
    cannot be made or entered (what was made is removed): the command must not run less bounded than the
    agent found it could be.

    The move is the one slow step (the kernel waits for an RCU grace period before the first move of a
    while: some 18 ms on a 2-core machine; the second base's is then free), so this process moves once,
    and never back: the agent removes the cgroup once this process has exited (:func:`remove_stale`)."""
    values = {**limits, **_FIXED}
    made: list[str] = []
    try:
        for base in bases:
            path = os.path.join(base, f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
            os.mkdir(path, 0o755)
            made.append(path)
            for name, key in _LIMITS:  # in order: v1's memory and swap bound after its memory bound
                if key in values:
                    _write(os.path.join(path, name), values[key], missing_ok=True)
            _write(os.path.join(path, "cgroup.procs"), os.getpid())
    except OSError:
        for path in reversed(made):
            try:
                _write(os.path.join(os.path.dirname(path), "cgroup.procs"), os.getpid())
                os.rmdir(path)
            except OSError:
                pass
        raise
    return made


def remove_stale(bases: Sequence[str]) -> None:
    """Remove the commands' cgroups in ``bases`` whose launcher has exited and that hold no process any
    more. A live launcher's is left, empty or not (it may have made it and not yet moved in), and so is
    one that still holds a process (a command's keeper ending what is left): the next call takes it."""
    for base in bases:
        try:
            names = [name for name in os.listdir(base) if name.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            pid = name[len(PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
                os.rmdir(os.path.join(base, name))  # refused while a process is inside
            except OSError:
                pass


def _write(path: str, value: int, *, missing_ok: bool = False) -> bool:
    """Write ``value`` to the cgroup file ``path``; False if it does not exist and ``missing_ok``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)
    return True
