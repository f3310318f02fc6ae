"""Local commands (:class:`refagent.sandbox.seams.Terminals`): one shell command in a process group of its own.

Contract: :meth:`LocalTerminals.run` runs ``command`` through the shell in ``cwd`` and returns a
:class:`~refagent.sandbox.seams.CommandResult` — the merged stdout and stderr (UTF-8, invalid bytes
replaced), the exit code or the name of the signal that ended the shell, and whether the output was cut
or the time limit hit. Local processes have no terminal id, so ``on_start`` is never called.

What a command gets, and why (docs/sandbox.md):

* **The shell**: ``/bin/bash`` (else the first ``bash`` on ``PATH``), falling back to ``/bin/sh``. Models
  write bash (``[[ ]]``, ``source``, brace expansion, ``pipefail``); ``/bin/sh`` is dash on Debian and
  Ubuntu and would fail them. ``bash -c`` is non-interactive: no rc files are read, no job control.
* **Its own session and process group** (``setsid``), so the whole group can be signalled; and no
  controlling terminal, so nothing can prompt on ``/dev/tty``.
* **stdin is /dev/null**: a command that reads input gets end-of-file at once instead of hanging.
* **The end of the group.** When the shell exits, when the time limit passes, and when the caller
  cancels, every process left in the group gets SIGTERM (and SIGCONT, so stopped ones can act on it),
  then SIGKILL after ``kill_grace`` seconds, and the shell is reaped. So ``sleep 100 &`` does not
  outlive its command, nor hold the output pipe open. A process that leaves the group (``setsid``,
  daemons) is killed by the launcher: by the command's PID namespace where there is one, by the
  launcher's keeper (a subreaper) where there is none (level ``none``, or a machine without namespaces);
  either ends everything when the command does, and when the agent dies. Its hold on the output pipe is
  bounded by ``drain_seconds`` all the same.
* **Confinement** at the level the call asked for (:mod:`refagent.sandbox.confine.confinement`): with one, the
  command starts through :mod:`refagent.sandbox.confine.launcher`, which confines it, ties it to this process
  (it dies when the agent does) and, with namespaces, kills everything it started when it ends. Without
  one (``confinement=None``) every level runs unconfined (and the sandbox's holding says so:
  :attr:`refagent.sandbox.local.Sandbox.holding`).
* **Resource limits** (``setrlimit`` in the launcher: ``anyio.open_process`` has no ``preexec_fn``, which
  is unsafe in threaded programs anyway), soft and hard, only ever lowered:
  CPU time ``max(min_cpu_seconds, cpu_factor * time_limit)`` (per process: a 10-fold factor leaves room
  for multi-threaded compilers and test runners); file size 1 GiB; no core dumps (they would land in
  the workspace); processes: the number of threads running on the machine now plus 4096 (RLIMIT_NPROC
  counts every thread of the user, so a fixed number would break commands on a busy desktop; root is
  exempt from it). Root too: 4096 tasks and half the machine's memory for the command as a whole, in
  its cgroup where the agent can make one (:mod:`refagent.sandbox.confine.cgroups`), and 4096 tasks by its PID
  namespace's ``pid_max`` on Linux 6.14+. See :class:`ResourceLimits` and docs/sandbox.md, "Limits".
* **No credentials of the model** (:func:`is_secret_name`): variables starting with ``OPENAI_``,
  ``ANTHROPIC_`` or ``REFAGENT_`` (the model's endpoint, key and our own settings: a command has no
  business with them, and a base URL can carry a key); and any variable whose name contains
  ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL``, ``APIKEY``, ``API_KEY``,
  ``ACCESS_KEY``, ``PRIVATE_KEY`` or ``COOKIE``, ends in ``_KEY``/``_KEYS``, or has ``TOKEN``/``TOKENS``
  as a word (``GITHUB_TOKEN``, ``HF_TOKEN``; not ``TOKENIZERS_PARALLELISM``). ``PATH``, ``HOME``,
  ``SSH_AUTH_SOCK`` (git over ssh) and the like stay. ``keep_env`` names exceptions.
* **Output capped**: the first and last ``output_limit / 2`` bytes are kept with a
  ``[... N bytes omitted ...]`` marker between; the middle is never stored, so a command that prints
  gigabytes costs no memory.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread
from anyio.abc import TaskGroup

from refagent.errors import ToolError
from refagent.sandbox.confine.confinement import UNCONFINED, Confinement
from refagent.sandbox.confine.descendants import live
from refagent.sandbox.confine.private_tmp import memory_total
from refagent.sandbox.seams import CommandResult, Level, OnStart, WatchOutput

DEFAULT_OUTPUT_LIMIT = 40_000
"""Bytes of output kept: the first and the last 20 000."""
BACKGROUND_CPU_BASIS = 24 * 3600.0
"""The time limit a background command with none is given its CPU limit for (:class:`ResourceLimits`)."""

_PROVIDER_PREFIXES = ("OPENAI_", "ANTHROPIC_", "REFAGENT_")
_SECRET_PARTS = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "APIKEY",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "COOKIE",
)
_TOKEN_WORD = re.compile(r"(?:^|_)[A-Z0-9]*TOKENS?(?:_|$)")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable is withheld from commands (see the module docstring)."""
    upper = name.upper()
    return (
        upper.startswith(_PROVIDER_PREFIXES)
        or any(part in upper for part in _SECRET_PARTS)
        or _TOKEN_WORD.search(upper) is not None
        or upper.endswith(("_KEY", "_KEYS"))
    )


def scrub_env(env: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """``env`` without the variables :func:`is_secret_name` withholds, except those in ``keep``."""
    kept = set(keep)
    return {name: value for name, value in env.items() if name in kept or not is_secret_name(name)}


def default_shell(path: str | None = None) -> str:
    """``/bin/bash``, else ``bash`` on ``path``, else ``/bin/sh``."""
    if os.access("/bin/bash", os.X_OK):
        return "/bin/bash"
    return shutil.which("bash", path=path) or "/bin/sh"


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    """Limits for each command (None switches one off). Applied as soft and hard limits; a limit the
    agent already runs under that is lower is kept."""

    cpu_factor: float | None = 10.0
    """CPU seconds per process: ``max(min_cpu_seconds, cpu_factor * time_limit)``."""
    min_cpu_seconds: int = 60
    file_size: int | None = 1 << 30
    """Largest file a command may write, in bytes (bigger writes fail with SIGXFSZ / EFBIG)."""
    core_size: int | None = 0
    """Core dumps: none."""
    process_headroom: int | None = 4096
    """RLIMIT_NPROC = threads running on the machine now + this (Linux; not set where unknown). Root is
    exempt from it: :attr:`tasks` binds root too."""
    tasks: int | None = 4096
    """Processes and threads of one command at once, root's too: its cgroup's ``pids.max`` where the agent
    can make one, its PID namespace's ``pid_max`` on Linux 6.14+ (:mod:`refagent.sandbox.confine.cgroups`)."""
    memory_share: float | None = 0.5
    """The memory of one command and all it starts, as a share of the machine's (``MemTotal``), swap
    included: its cgroup's bound, where the agent can make one; past it the kernel kills the command."""

    def for_time_limit(self, time_limit: float) -> dict[str, int]:
        """The ``RLIMIT_*`` suffixes and values for a command with this time limit."""
        limits: dict[str, int] = {}
        if self.cpu_factor is not None:
            limits["CPU"] = max(self.min_cpu_seconds, math.ceil(self.cpu_factor * time_limit))
        if self.file_size is not None:
            limits["FSIZE"] = self.file_size
        if self.core_size is not None:
            limits["CORE"] = self.core_size
        if self.process_headroom is not None:
            running = _threads_running()
            if running is not None:
                limits["NPROC"] = running + self.process_headroom
        if self.tasks is not None:
            limits["TASKS"] = self.tasks
        memory = memory_total()
        if self.memory_share is not None and memory is not None:
            limits["MEMORY"] = int(memory * self.memory_share)
        return limits


def _threads_running() -> int | None:
    """All threads on the machine (the 4th field of /proc/loadavg is ``running/total``), if known."""
    try:
        with open("/proc/loadavg", encoding="ascii") as file:
            return int(file.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class LocalTerminals:
    """Runs commands as local process groups. ``env`` defaults to this process's environment (read
    now); either way the credentials are removed from it once, here."""

    env: Mapping[str, str] | None = None
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    shell: str | None = None
    """The shell to run commands with; default: :func:`default_shell`."""
    keep_env: Iterable[str] = ()
    """Variable names to pass on even though :func:`is_secret_name` would withhold them."""
    confinement: Confinement | None = None
    """How commands are confined (the session's roots and this machine's support); None: not at all."""
    kill_grace: float = 2.0
    """Seconds between SIGTERM and SIGKILL."""
    drain_seconds: float = 2.0
    """How long to keep reading after the group is gone (a process that left it may hold the pipe)."""
    _env: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._env = scrub_env(os.environ if self.env is None else self.env, self.keep_env)
        if self.shell is None:
            self.shell = default_shell(self._env.get("PATH"))

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: OnStart = None,
        *,
        sandbox: Level = "workspace",
        watch_output: WatchOutput = None,
    ) -> CommandResult:
        """Run ``command`` through the shell in ``cwd``, confined at level ``sandbox``; kill it after
        ``time_limit`` seconds. ``watch_output`` gets what gives its output so far (head and tail, as kept).

        Cancellation kills the group too (and waits for it, shielded, before re-raising).
        """
        await _check(command, cwd, time_limit)
        output = KeptOutput(self.output_limit)
        if watch_output is not None:
            watch_output(lambda: output.since(0, final=False)[0])
        with anyio.CancelScope(shield=True):  # once spawned, the process must reach the cleanup below
            process = await self._spawn(command, cwd, time_limit, sandbox)
        timed_out = False
        try:
            async with anyio.create_task_group() as tasks:
                read_all = anyio.Event()
                assert process.stdout is not None
                tasks.start_soon(_pump, process.stdout, output, read_all)
                with anyio.move_on_after(time_limit) as deadline:
                    await process.wait()
                timed_out = deadline.cancelled_caught
                # The shell is done, or out of time: nothing of its group may outlive it.
                await end_group(process.pid, self.kill_grace)
                with anyio.move_on_after(self.drain_seconds):
                    await read_all.wait()
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await end_group(process.pid, self.kill_grace)
                await process.aclose()
        return _result(process, output, timed_out)

    async def start(
        self, command: str, cwd: str, tasks: TaskGroup, *, sandbox: Level = "workspace", time_limit: float | None = None
    ) -> LocalJob:
        """Start ``command`` as :meth:`run` would, watched by a task in ``tasks`` (:class:`LocalJob`)."""
        await _check(command, cwd, time_limit)
        job = LocalJob(KeptOutput(self.output_limit), self.kill_grace, self.drain_seconds)
        with anyio.CancelScope(shield=True):  # once spawned, the process must reach the job's cleanup
            # Resource limits want a time: a command with none gets the CPU time of a day's run.
            process = await self._spawn(command, cwd, time_limit or BACKGROUND_CPU_BASIS, sandbox)
            tasks.start_soon(job.watch, process, time_limit)
        return job

    async def _spawn(self, command: str, cwd: str, time_limit: float, level: Level) -> anyio.abc.Process:
        if self.confinement is not None and level != "none":
            # The session's /tmp (and its holder) is made off the event loop: the loop keeps reading.
            await anyio.to_thread.run_sync(self.confinement.private_tmp)
        try:
            return await anyio.open_process(
                self._argv(command, time_limit, level),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self._env,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"Cannot start the shell {self.shell}: {exc.strerror or exc}.") from None

    def _argv(self, command: str, time_limit: float, level: Level) -> list[str]:
        shell = self.shell or "/bin/sh"
        if not sys.executable:  # embedded without an interpreter: no launcher, no limits
            return [shell, "-c", command]
        confinement = self.confinement or UNCONFINED
        return confinement.argv(
            [shell, "-c", command],
            level if self.confinement is not None else "none",
            limits=self.limits.for_time_limit(time_limit),
            lc_ctype=self._env.get("LC_CTYPE"),
            parent=os.getpid(),
            grace=self.kill_grace * 0.75,  # the launcher ends the command before end_group's SIGKILL
        )


async def _check(command: str, cwd: str, time_limit: float | None) -> None:
    """Refuse what no shell could run: a time limit that is not positive, a NUL, a missing directory."""
    if time_limit is not None and not time_limit > 0:
        raise ToolError(f"The time limit must be a positive number of seconds, got {time_limit}.")
    if "\x00" in command:
        raise ToolError("The command contains a NUL byte, which no shell command can contain.")
    if not await anyio.Path(cwd).is_dir():
        raise ToolError(f"Cannot run the command: the working directory {cwd} does not exist.")


def _result(process: anyio.abc.Process, output: KeptOutput, timed_out: bool) -> CommandResult:
    text, truncated = output.text()
    code = process.returncode
    if code is not None and code < 0:
        return CommandResult(text, None, _signal_name(-code), truncated, timed_out)
    return CommandResult(text, code, None, truncated, timed_out)


class Watched:
    """What every background job (:class:`~refagent.sandbox.seams.Job`) keeps of its end: :attr:`result` once it has
    one, the cancel scope its watcher runs in (:meth:`stop` cancels it), and the event set when the watcher
    is done (:meth:`wait`). The watcher (a subclass's ``watch``) sets both."""

    def __init__(self) -> None:
        self.result: CommandResult | None = None
        self._scope = anyio.CancelScope()
        self._ended = anyio.Event()

    async def wait(self) -> CommandResult:
        await self._ended.wait()
        assert self.result is not None
        return self.result

    async def stop(self) -> None:
        self._scope.cancel()
        await self._ended.wait()


class LocalJob(Watched):
    """A local command in the background (:meth:`LocalTerminals.start`): its process group, watched by
    :meth:`watch` (a task of the caller's task group), which ends the group as :meth:`LocalTerminals.run`
    does when the shell exits, the time limit passes, :meth:`stop` is called or the task is cancelled."""

    terminal_id: str | None = None

    def __init__(self, output: KeptOutput, kill_grace: float, drain_seconds: float) -> None:
        super().__init__()
        self._output = output
        self._kill_grace = kill_grace
        self._drain_seconds = drain_seconds
        self._read = 0
        """Bytes of output :meth:`new_output` has given so far."""

    async def watch(self, process: anyio.abc.Process, time_limit: float | None) -> None:
        """Read its output until it ends (or is stopped, or out of time), then end its group and reap it."""
        timed_out = False
        try:
            with self._scope:
                async with anyio.create_task_group() as tasks:
                    read_all = anyio.Event()
                    assert process.stdout is not None
                    tasks.start_soon(_pump, process.stdout, self._output, read_all)
                    with anyio.move_on_after(math.inf if time_limit is None else time_limit) as deadline:
                        await process.wait()
                    timed_out = deadline.cancelled_caught
                    await end_group(process.pid, self._kill_grace)
                    with anyio.move_on_after(self._drain_seconds):
                        await read_all.wait()
                    tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await end_group(process.pid, self._kill_grace)
                await process.aclose()
                self.result = _result(process, self._output, timed_out)
                self._ended.set()

    async def output(self) -> str:
        return self._output.text()[0]

    async def new_output(self) -> str:
        text, self._read = self._output.since(self._read, final=self._ended.is_set())
        return text


async def _pump(stream: anyio.abc.ByteReceiveStream, output: KeptOutput, done: anyio.Event) -> None:
    try:
        async for chunk in stream:
            output.feed(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        done.set()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


# -- ending a process group ------------------------------------------------------------------------------


async def end_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, SIGKILL what is left after ``grace`` seconds; return once it is gone (or after
    one more second: a process stuck in the kernel cannot be hurried)."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    _signal_group(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    if not await _gone_within(pgid, grace):
        _signal_group(pgid, signal.SIGKILL)
        await _gone_within(pgid, 1.0)


async def _gone_within(pgid: int, seconds: float) -> bool:
    """Poll until no process of the group runs (True), or ``seconds`` pass (False). There is nothing to
    wait on: the group's members are not our children, so polling it is."""
    deadline = anyio.current_time() + seconds
    while True:
        if not _group_alive(pgid):
            return True
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.01)


def _signal_group(pgid: int, number: int) -> bool:
    """Send a signal to the group; False if the group is gone."""
    try:
        os.killpg(pgid, number)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we may not signal (it changed user): nothing more we can do to it
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group, or of the session its leader leads (the launcher's: it starts with
    a session of its own), still runs. The launcher's keeper or init leaves the group, so that a kill of
    the group cannot skip their cleanup, but not the session: while one of them ends what the command
    left, the command has not ended. Zombies do not count: where PID 1 does not reap orphans (some
    containers), they stay forever and ``killpg(pgid, 0)`` keeps succeeding."""
    group = _signal_group(pgid, 0)
    if not os.path.isdir("/proc/self"):
        return group
    # After "pid (comm)": state, ppid, pgrp, session.
    return any(pgid in (int(fields[2]), int(fields[3])) for _, fields in live())


# -- output -------------------------------------------------------------------------------------------------


class KeptOutput:
    """The first and last ``limit / 2`` bytes of a stream, and how many bytes went by: what is kept of a
    command's output (here, and for the chat's ``!command``), the middle never stored."""

    def __init__(self, limit: int) -> None:
        self.head_limit = max(0, limit) // 2
        self.tail_limit = max(0, limit) - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_limit:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_limit:  # trim now and then, not on every chunk
                del self.tail[: len(self.tail) - self.tail_limit]

    def since(self, position: int, *, final: bool) -> tuple[str, int]:
        """What came after byte ``position`` (one this returned, or 0), as text, and the position it ends
        at. What was not kept is a marker; a character not complete yet waits for the next call, unless
        the stream is ``final``."""
        head_end = len(self.head)
        tail_start = self.total - len(self.tail)
        first = bytes(self.head[position:]) if position < head_end else b""
        after_head = max(position, head_end)
        tail = bytes(self.tail[max(after_head - tail_start, 0) :])
        if len(tail) > self.tail_limit:
            tail = tail[len(tail) - self.tail_limit :]
        skipped = self.total - after_head - len(tail)
        end = self.total
        if not final:
            held = _incomplete_end(tail or first)
            end -= held
            if tail:
                tail = tail[: len(tail) - held]
            else:
                first = first[: len(first) - held]
        if skipped <= 0:
            return (first + tail).decode("utf-8", "replace"), end
        return f"{_decode_head(first)}\n[... {skipped} bytes not kept ...]\n{_decode_tail(tail)}", end

    def text(self) -> tuple[str, bool]:
        """The output as text, and whether some of it was left out."""
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit else b""
        omitted = self.total - len(self.head) - len(tail)
        if omitted <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace"), False
        head = _decode_head(bytes(self.head))
        tail_text = _decode_tail(tail)
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail_text}", True


def _incomplete_end(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character that is not complete (0 to 3)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return 0
        if byte >= 0xC0:  # a lead byte: the sequence it starts needs this many bytes
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return back if back < needed else 0
    return 0


def _decode_head(data: bytes) -> str:
    """Decode, dropping a character cut in two at the end."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.end < len(data) - cut:  # invalid in the middle: not a cut character
                break
    return data.decode("utf-8", "replace")


def _decode_tail(data: bytes) -> str:
    """Decode, dropping the continuation bytes of a character cut in two at the start."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:].decode("utf-8", "replace")
