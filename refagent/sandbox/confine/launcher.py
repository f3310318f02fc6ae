"""The command launcher: confine, then exec. Every command the agent runs starts through it, as a local
process and in the editor's terminal alike::

    python -I -S .../refagent/sandbox/confine/launcher.py [options] -- /bin/sh -c 'pytest -q'

It is run as a script, by path, with ``-I -S`` (a few milliseconds, and immune to ``PYTHON*`` variables,
site-packages and the working directory), so it imports only the standard library and its two siblings.
What it does, in order:

1. Lowers the resource limits (``--limits CPU=1200,FSIZE=1073741824,...``) and resets the signals Python
   ignores, so that the command gets default dispositions.
2. With ``--namespaces``: a new user, mount and PID namespace (and with ``--netns`` a network namespace).
   Its first process is this launcher again, as the namespace's *init*. It makes every mount private and
   read-only except the ``--write`` directories, puts the private temporary directory (``--tmp``) over
   ``/tmp`` (with the ``--show`` directories of the host's ``/tmp`` back, read-only), a fresh tmpfs over
   ``/run``, and layers the ``--cache`` directories (the user's package caches) over private copies; it
   hides the ``--hide`` paths (the agent's files, the user's credentials) under empty stand-ins, holds
   read-only what git and editors run later (:mod:`refagent.sandbox.confine.run_later`), gives the command a
   ``/dev`` of its own (its own pseudo-terminals, no terminal of the user's) and a ``/proc`` of the
   namespace; then it starts the command, which drops every capability before exec, and reaps orphans
   until the command ends. Then it kills every process left in the namespace (``setsid`` and
   double-forked ones included), moves aside what they made for git or editors to run, and exits. The
   outer launcher waits and ends as the command did (the same exit code or signal); a signal it gets is
   passed on; with ``--parent`` it dies when the agent does, and init then ends the namespace as above;
   with ``--agent PID:START`` (the editor's terminal, whose parent is the editor) it watches the agent
   and ends when it does. Without ``--namespaces`` a keeper takes init's place (:func:`_keep`): the
   subreaper of everything the command starts, which kills what is left when the command or the outer
   launcher ends.
3. With ``--landlock ABI``: writes only beneath the ``--write`` directories and the temporary one, and with
   ``--deny-tcp`` no TCP (:mod:`refagent.sandbox.confine.landlock`).
4. Removes the ``--unset`` variables, sets ``TMPDIR`` and ``LC_CTYPE``, and execs the command.

A step that fails ends the launcher with exit code 125 and a line on stderr: a command never runs less
confined than it was promised. ``--probe`` tries each piece and prints what works (``key=value`` lines),
for :mod:`refagent.sandbox.confine.confinement` to read once at startup.

Another operating system slots in here: the options say *what* to confine, this module says how on Linux.
"""

from __future__ import annotations

import os
import resource
import select
import sys

TYPE_CHECKING = False  # typing costs 14 ms to import
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
else:
    import _signal as signal  # the C module under `signal`, whose enums cost 5 ms to import

if __package__ in (None, ""):  # run as a script: import the siblings as parts of the package
    # this file is refagent/sandbox/confine/launcher.py: the directory refagent is in, four levels up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from refagent.sandbox.confine import cgroups, descendants, landlock, namespaces, run_later, trials  # noqa: E402

CANNOT_CONFINE = 125
"""The exit code when the confinement could not be set up (the command did not run)."""
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_KEPT_SECONDS = 5.0
"""How long the keeper of a command without namespaces (:func:`_keep`) tries to end what is left of it."""
_ABANDONED = signal.SIGUSR2
"""What init gets when the outer launcher dies (killed with its process group, say): init ends the
command and everything it started, then sweeps (:func:`refagent.sandbox.confine.run_later.sweep`) and exits."""


class Options:
    """What to confine, from the command line (a plain class: ``dataclasses`` costs 15 ms to import)."""

    def __init__(self) -> None:
        self.write: list[str] = []
        self.caches: list[str] = []
        self.shown: list[str] = []
        self.hidden: list[str] = []
        self.held: list[str] = []
        self.cgroups: list[str] = []
        self.tmp = ""
        self.tmp_in = 0
        """The pid of the session's ``/tmp`` holder (:func:`hold_tmp`), whose namespaces the command joins."""
        self.hold_tmp = 0
        """This process is a session's ``/tmp`` holder, of this many bytes (:func:`hold_tmp`)."""
        self.layers = ""
        """Where the caches' private layers lie (the session's directory's sibling, on disk)."""
        self.landlock = 0
        self.deny_tcp = False
        self.namespaces = False
        self.netns = False
        self.limits = ""
        self.lc_ctype: str | None = None
        self.parent = 0
        self.agent = ""
        self.grace = 0.0
        self.unset: list[str] = []
        self.probe = False
        self.command: list[str] = []


_REPEATED = {
    "--write": "write",
    "--cache": "caches",
    "--show": "shown",
    "--hide": "hidden",
    "--hold": "held",
    "--cgroup": "cgroups",
    "--unset": "unset",
}
"""The options that may come again: each value is appended to the list of :class:`Options` named."""
_VALUED: dict[str, tuple[str, Callable[[str], object]]] = {
    "--tmp": ("tmp", str),
    "--tmp-in": ("tmp_in", int),
    "--hold-tmp": ("hold_tmp", int),
    "--layers": ("layers", str),
    "--landlock": ("landlock", int),
    "--limits": ("limits", str),
    "--lc-ctype": ("lc_ctype", str),
    "--parent": ("parent", int),
    "--agent": ("agent", str),
    "--grace": ("grace", float),
}
"""The options with one value: the attribute of :class:`Options` it sets, and what it is read as."""
_FLAGS = {"--deny-tcp": "deny_tcp", "--namespaces": "namespaces", "--netns": "netns", "--probe": "probe"}
"""The options without a value: the attribute of :class:`Options` each sets."""


def parse(argv: list[str]) -> Options:
    """The options before ``--``, and the command after it. No argparse: it alone costs 5 ms to import."""
    options = Options()
    index = 0
    while index < len(argv):
        name = argv[index]
        if name == "--":
            options.command = argv[index + 1 :]
            break
        if name in _FLAGS:
            setattr(options, _FLAGS[name], True)
            index += 1
            continue
        if name not in _REPEATED and name not in _VALUED:
            raise SystemExit(f"refagent launcher: unknown option {name}")
        if index + 1 >= len(argv):
            raise SystemExit(f"refagent launcher: {name} needs a value")
        value = argv[index + 1]
        index += 2
        if name in _REPEATED:
            getattr(options, _REPEATED[name]).append(value)
        else:
            attribute, read = _VALUED[name]
            setattr(options, attribute, read(value))
    if not options.command and not options.probe and not options.hold_tmp:
        raise SystemExit("refagent launcher: no command after --")
    return options


def main(argv: list[str]) -> None:
    options = parse(argv)
    if options.probe:
        sys.stdout.write(trials.probe())
        return
    if options.hold_tmp:
        hold_tmp(options.tmp, options.hold_tmp)
        return
    _default_signals()
    limits = _limits_of(options.limits)
    _lower_limits(limits)
    _first_to_go()
    try:
        if options.cgroups:  # before anything else starts: all of the command is born inside
            cgroups.enter(options.cgroups, limits)
        if options.parent:
            namespaces.die_with_parent(signal.SIGKILL)
            if os.getppid() != options.parent:  # the agent is already gone
                raise OSError(0, "the agent that started it has exited")
        if options.namespaces:
            _run_in_namespaces(options)
        if sys.platform.startswith("linux"):
            _supervise(options, _keep)
        _exec(options, options.tmp)
    except OSError as exc:
        _fail(exc)


def hold_tmp(tmp: str, size: int) -> None:
    """Be a session's ``/tmp`` holder: in a user and mount namespace of its own, a tmpfs of ``size`` bytes
    over ``tmp``, kept until stdin closes (the agent closes the session) or the agent dies. Each command of
    the session joins these namespaces before its own (``--tmp-in``), so its ``/tmp`` is this tmpfs: the
    same for every command of the session, bounded, and gone with the holder. Prints ``ready`` once it is
    mounted, or what failed. (It hears the agent die by its end of input: a parent-death signal would
    follow the thread that started it.)"""
    uid, gid = os.getuid(), os.getgid()
    try:
        namespaces.unshare(namespaces.CLONE_NEWUSER | namespaces.CLONE_NEWNS)
        namespaces.map_ids(uid, gid)
        namespaces.make_private()
        namespaces.bounded_tmpfs(tmp, size)
    except OSError as exc:
        sys.stdout.write(f"failed: {exc}\n")
        sys.stdout.flush()
        return
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        try:
            if not os.read(0, 4096):
                return
        except InterruptedError:
            continue
        except OSError:
            return


def _run_in_namespaces(options: Options) -> None:
    """Unshare, start init (which runs the command), and end as the command ended. Never returns."""
    if options.tmp_in:  # the session's /tmp is the tmpfs its holder keeps: start from its namespaces
        cwd = os.getcwd()
        try:
            namespaces.join(options.tmp_in)
        except OSError as exc:  # an editor's terminal in another PID namespace (a Flatpak) cannot see it
            sys.stderr.write(f"refagent: this command's /tmp is the session's directory, not its tmpfs ({exc})\n")
        os.chdir(cwd)
    uid, gid = os.getuid(), os.getgid()
    flags = namespaces.CLONE_NEWUSER | namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID
    if options.netns:
        flags |= namespaces.CLONE_NEWNET
    namespaces.unshare(flags)
    if options.netns:
        namespaces.loopback_up()
    namespaces.map_ids(uid, gid)
    _supervise(options, _init)


def _supervise(options: Options, keeper: Callable[[Options, int, int], None]) -> None:
    """Fork ``keeper`` (the namespace's init, or :func:`_keep`), which runs the command; pass it the signals
    this process gets, and end as the command ended. With ``--agent`` (a command in the editor's terminal,
    whose parent is the editor), this process ends when the agent does, and the keeper with it ends the
    command (:func:`_watch`). Never returns."""
    agent = _watch(options.agent)
    alive_read, alive_write = os.pipe()  # closed when this process dies: the keeper checks it once
    status_read, status_write = os.pipe()  # the keeper reports the command's wait status here
    child = os.fork()
    if child == 0:
        if agent is not None:
            os.close(agent)
        os.close(alive_write)
        os.close(status_read)
        keeper(options, alive_read, status_write)
    os.close(alive_read)
    os.close(status_write)
    for number in _FORWARDED:
        signal.signal(number, lambda number, _frame: descendants.kill(child, number))
    if agent is not None:
        # Both ends at once: the command's keeper reports (or dies), or the agent is gone.
        while True:
            ready, _, _ = select.select([agent, status_read], [], [])
            if status_read in ready:
                break
            if agent in ready:
                os._exit(CANNOT_CONFINE)  # the keeper hears this process die, and ends the command
    _, status = os.waitpid(child, 0)
    reported = os.read(status_read, 64)
    _end_as(int(reported) if reported else status)


def _watch(agent: str) -> int | None:
    """A pidfd of the agent named ``PID:START`` (its start time, in clock ticks after boot, as
    ``/proc/PID/stat`` gives it: a pid reused since is another process), readable once the agent has
    exited; None without ``--agent``, or where the agent cannot be seen from here (another PID namespace,
    a kernel before 5.3), when the editor alone decides when the command ends."""
    pid, _, start = agent.partition(":")
    if not pid.isdigit():
        return None
    try:
        fd = os.pidfd_open(int(pid))
    except (OSError, AttributeError):
        return None
    if descendants.start_time(int(pid)) != start:
        os.close(fd)
        return None
    return fd


def _keep(options: Options, alive: int, report: int) -> None:
    """Without namespaces, the command's keeper: the subreaper of everything the command starts
    (:func:`refagent.sandbox.confine.namespaces.child_subreaper`), so a process that leaves the command's process
    group or double-forks is still its descendant. When the command ends, or the outer launcher dies (the
    agent killed, a kill of the launcher's group), every descendant left is killed: nothing the command
    started outlives it, as a namespace's init ensures with namespaces. Leaves the launcher's process
    group, as init does, so that a kill of that group does not skip this. Never returns."""
    try:
        _heard(alive)
        os.setpgid(0, 0)
        namespaces.child_subreaper()
    except OSError as exc:
        _report_failure(report, exc)
    _run_command(options, options.tmp, report, descendants.signal_all, lambda status: _end_kept(report, status))


def _heard(alive: int) -> None:
    """The keeper's (or init's) first step: it hears the outer launcher die (:data:`_ABANDONED`), and ends
    at once if that has happened already (``alive`` at end of file)."""
    namespaces.die_with_parent(_ABANDONED)
    if select.select([alive], [], [], 0)[0]:  # end of file: the outer launcher died before the line above
        os._exit(CANNOT_CONFINE)
    os.close(alive)


def _run_command(
    options: Options,
    tmp: str,
    report: int,
    forward: Callable[[int], None],
    end: Callable[[int], None],
    before_exec: Callable[[], None] | None = None,
) -> None:
    """The keeper's (or init's) work: pass signals on (:func:`_pass_on`), start the command (``before_exec``
    runs in its process), reap every child until the command ends, then ``end`` with its wait status (with
    125's, if the outer launcher dies first). Never returns."""
    _pass_on(options, forward, end)
    signal.signal(_ABANDONED, lambda _number, _frame: end(CANNOT_CONFINE << 8))
    command = os.fork()
    if command == 0:
        os.close(report)
        _default_signals()
        signal.signal(_ABANDONED, signal.SIG_DFL)
        try:
            if before_exec is not None:
                before_exec()
            _exec(options, tmp)
        except OSError as exc:
            _fail(exc)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            end(CANNOT_CONFINE << 8)
        if pid == command:
            end(status)


def _pass_on(options: Options, forward: Callable[[int], None], end: Callable[[int], None]) -> None:
    """The keeper's (or init's) signals: each of :data:`_FORWARDED` passed on with ``forward``; after a
    SIGTERM, once ``--grace`` seconds have passed, ``end`` (every process left is killed) with the wait
    status of a SIGKILL. So a command that ignores SIGTERM is ended, and all it started with it, before
    the agent's own SIGKILL of the outer launcher (whose death the keeper would only hear), and the agent
    knows the command has ended when the outer launcher has."""

    def passed_on(number: int, _frame: object) -> None:
        forward(number)
        if number == signal.SIGTERM and options.grace > 0:
            signal.setitimer(signal.ITIMER_REAL, options.grace)

    for number in _FORWARDED:
        signal.signal(number, passed_on)
    signal.signal(signal.SIGALRM, lambda _number, _frame: end(signal.SIGKILL))


def _end_kept(report: int, status: int) -> None:
    """Kill every descendant of this keeper and reap them all, report ``status``, exit."""
    signal.signal(_ABANDONED, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    descendants.end_all(_KEPT_SECONDS)
    try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
        os.write(report, str(status).encode())
    except OSError:
        pass
    os._exit(0)


def _init(options: Options, alive: int, report: int) -> None:
    """The namespace's first process (PID 1): mounts, then the command, then reaping; when the command
    ends, the rest of the namespace is killed and what it made for git or editors to run later is moved
    aside (:mod:`refagent.sandbox.confine.run_later`). Never returns.

    It leaves the launcher's process group, so that a kill of the group (the agent's time limit, an
    editor's ``terminal/kill``) reaches the outer launcher, whose death it hears (:data:`_ABANDONED`),
    and not itself: the sweep must not be skipped. Nothing in the namespace can trace it or read its
    memory. A signal from inside (where Landlock does not scope them) reaches it only if it handles that
    one, and then at most ends the namespace early, sweep included."""
    try:
        _heard(alive)
        namespaces.not_dumpable()
        os.setpgid(0, 0)
        tmp, held = _mount(options)
    except OSError as exc:
        _report_failure(report, exc)
    _run_command(
        options,
        tmp,
        report,
        lambda number: descendants.kill(
            -1, number
        ),  # PID 1 gets only the signals it handles: pass them to the namespace
        lambda status: _end_namespace(held, report, status),
        namespaces.drop_privileges,
    )


def _end_namespace(held: run_later.Held, report: int, status: int) -> None:
    """Kill what is left in the namespace and wait for all of it, sweep, report ``status``, exit."""
    signal.signal(_ABANDONED, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # the agent may be gone: the sweep must still finish
    descendants.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    try:
        lines = run_later.sweep(held)
    except OSError as exc:
        lines = [f"refagent: the check for what git and editors run later failed: {exc}"]
    for line in lines:
        try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
            os.write(2, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
    try:  # noqa: SIM105
        os.write(report, str(status).encode())
    except OSError:
        pass
    os._exit(0)


def _mount(options: Options) -> tuple[str, run_later.Held]:
    """Private mounts for the command; returns its temporary directory as the command sees it, and what
    of the roots is held for :func:`refagent.sandbox.confine.run_later.sweep`. The caches that could be layered
    join ``options.write`` (Landlock must let the command write there)."""
    cwd = os.getcwd()
    roots = [*options.write]
    namespaces.make_private()
    options.write += namespaces.writable_only(
        roots, options.tmp or None, options.caches, options.shown, options.layers or options.tmp
    )
    held = run_later.hold(roots, options.hidden, options.held)
    try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
        os.chdir(cwd)  # the old working directory is on the read-only mount beneath: enter the new one
    except OSError:
        pass  # not inside a root (hidden under the private /tmp, say): it stays where it was, read-only
    namespaces.private_dev()
    namespaces.fresh_proc()
    tasks = _limits_of(options.limits).get("TASKS")
    if tasks:
        namespaces.limit_tasks(tasks)
    namespaces.protect_proc()
    if options.tmp and namespaces.private_tmp_is_mounted(options.write):
        return "/tmp", held
    return options.tmp, held


def _exec(options: Options, tmp: str) -> None:
    """Landlock, the environment, exec. Returns only by raising."""
    if options.landlock:
        writable = [*options.write]
        if tmp:
            writable.append(tmp)
        if options.namespaces:
            writable.append("/dev/shm")  # a private tmpfs by now
        landlock.restrict(writable, abi=options.landlock, deny_tcp=options.deny_tcp)
    for name in options.unset:
        os.environ.pop(name, None)
    if tmp:
        os.environ["TMPDIR"] = tmp
    # Undo Python's own change (PEP 538 coerces LC_CTYPE when it names the C locale or a missing one).
    if options.lc_ctype:
        os.environ["LC_CTYPE"] = options.lc_ctype[1:]
    elif options.lc_ctype is not None:
        os.environ.pop("LC_CTYPE", None)
    program = options.command[0]
    try:
        os.execv(program, options.command)
    except OSError as error:
        sys.stderr.write(f"refagent: cannot run {program}: {error.strerror}\n")
        os._exit(127)


def _default_signals() -> None:
    # Python ignores these at startup, and an ignored signal stays ignored across exec: without this,
    # `yes | head` would end in "Broken pipe" errors and a file over the size limit in EFBIG, not a kill.
    for number in (signal.SIGPIPE, signal.SIGXFSZ, *_FORWARDED):
        signal.signal(number, signal.SIG_DFL)


def _first_to_go() -> None:
    """The command's processes are the first the kernel's OOM killer ends when the machine runs out of
    memory (``oom_score_adj`` 1000, which any process may raise): not the agent, nor the editor. (Inside
    its cgroup's bound, the kernel kills within the cgroup anyway.)"""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, b"1000")
    except OSError:
        pass
    finally:
        os.close(fd)


def _limits_of(spec: str) -> dict[str, int]:
    """``--limits NAME=VALUE,...`` as a table (a value that is not a whole number is left out)."""
    limits = {}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        if value.isdigit():
            limits[name] = int(value)
    return limits


def _lower_limits(limits: dict[str, int]) -> None:
    """Apply the ``RLIMIT_*`` ones of ``limits`` as soft and hard limits, never raising one (the others,
    ``MEMORY`` and ``TASKS``, are for cgroups and the PID namespace)."""
    infinity = resource.RLIM_INFINITY
    for name, value in limits.items():
        which = getattr(resource, "RLIMIT_" + name, None)
        if which is None:
            continue
        soft, hard = resource.getrlimit(which)
        limit = value if hard == infinity else min(value, hard)
        try:  # noqa: SIM105 (contextlib is one more import in a process that counts milliseconds)
            resource.setrlimit(which, (limit if soft == infinity else min(soft, limit), limit))
        except (ValueError, OSError):
            pass


def _end_as(status: int) -> None:
    """Exit the way a process with this wait status ended: the same code, or the same signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # the two whose disposition cannot change
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else CANNOT_CONFINE)


def _fail(error: OSError) -> None:
    sys.stderr.write(f"refagent: the command was not run: cannot confine it ({error.strerror or error})\n")
    os._exit(CANNOT_CONFINE)


def _report_failure(report: int, error: OSError) -> None:
    sys.stderr.write(f"refagent: the command was not run: cannot confine it ({error.strerror or error})\n")
    os.write(report, str(CANNOT_CONFINE << 8).encode())  # a wait status for "exited with 125"
    os._exit(CANNOT_CONFINE)


if __name__ == "__main__":
    main(sys.argv[1:])
