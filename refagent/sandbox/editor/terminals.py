"""The editor's terminals (ACP "Terminals"): :class:`EditorTerminals` runs a command in a terminal of the
client's, which the user watches live in the tool call.

``terminal/create`` -> embed in the tool call -> ``terminal/wait_for_exit`` raced against the time limit ->
``terminal/kill`` on timeout -> ``terminal/output`` -> ``terminal/release``, which always happens: on
success, error, timeout and cancellation. With the sandbox's confinement the editor runs our launcher
(:mod:`refagent.sandbox.confine.launcher`), which confines the command as a local one is confined and then execs
``/bin/sh -c``: the editor's terminal holds no more power than ours.
"""

from __future__ import annotations

import logging
import math
import os
import sys

import anyio
import anyio.abc
import anyio.to_thread
from anyio.abc import TaskGroup

from refagent.acp.client import ExitStatus, SessionClient, TerminalOutput
from refagent.acp.errors import RequestError
from refagent.acp.text import has_surrogates
from refagent.errors import ToolError
from refagent.sandbox.confine.confinement import Confinement, agent_identity
from refagent.sandbox.confine.process import BACKGROUND_CPU_BASIS, ResourceLimits, Watched, is_secret_name
from refagent.sandbox.seams import CommandResult, Level, OnStart, WatchOutput

log = logging.getLogger(__name__)

OUTPUT_BYTE_LIMIT = 64 * 1024
_CLEANUP_SECONDS = 5


class EditorTerminals:
    """Commands in editor terminals. The user watches the output live in the tool call."""

    def __init__(
        self,
        client: SessionClient,
        *,
        confinement: Confinement | None = None,
        limits: ResourceLimits | None = None,
        output_byte_limit: int = OUTPUT_BYTE_LIMIT,
    ) -> None:
        self.client = client
        self.confinement = confinement
        """None: the editor runs ``/bin/sh -c`` itself, unconfined."""
        self.limits = limits or ResourceLimits()
        self.output_byte_limit = output_byte_limit

    def _command(self, command: str, level: Level, time_limit: float) -> tuple[str, list[str]]:
        """The executable and arguments for ``terminal/create``: through the shell, as the model wrote it
        (ACP's ``command`` is an executable, not a line), behind the launcher when there is confinement."""
        if self.confinement is None or not sys.executable:
            return "/bin/sh", ["-c", command]
        argv = self.confinement.argv(
            ["/bin/sh", "-c", command],
            level,
            limits=self.limits.for_time_limit(time_limit),
            lc_ctype=os.environ.get("LC_CTYPE"),
            # The editor's environment is, as a rule, the one it gave us: withhold the same secrets.
            unset=[name for name in os.environ if is_secret_name(name)],
            agent=agent_identity(),  # the editor is its parent: it must still end when the agent does
        )
        return argv[0], argv[1:]

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
        terminal_id = await self._create(command, cwd, sandbox, time_limit)
        try:
            if on_start is not None:
                await on_start(terminal_id)
            timed_out = False
            exit_status = ExitStatus()
            with anyio.move_on_after(time_limit) as deadline:
                exit_status = await self.client.wait_for_terminal_exit(terminal_id)
            if deadline.cancelled_caught:
                timed_out = True
                await self.client.kill_terminal(terminal_id)
            return _result(await self.client.terminal_output(terminal_id), exit_status, timed_out)
        except RequestError as exc:
            raise ToolError(f"The editor's terminal failed: {exc.message}") from None
        finally:
            await _release(self.client, terminal_id)

    async def start(
        self, command: str, cwd: str, tasks: TaskGroup, *, sandbox: Level = "workspace", time_limit: float | None = None
    ) -> EditorJob:
        """Start ``command`` in a terminal of the editor's, watched by a task in ``tasks`` (:class:`EditorJob`)."""
        # Resource limits want a time: a command with none gets the CPU time of a day's run.
        terminal_id = await self._create(command, cwd, sandbox, time_limit or BACKGROUND_CPU_BASIS)
        job = EditorJob(self.client, terminal_id)
        tasks.start_soon(job.watch, time_limit)
        return job

    async def _create(self, command: str, cwd: str, level: Level, time_limit: float) -> str:
        """``terminal/create`` for ``command``; the terminal's id."""
        if has_surrogates(command) or has_surrogates(cwd):
            # The wire would send U+FFFD for it: the editor would run another command than this one.
            raise ToolError(
                "The command or its working directory holds a byte of a file name that is not UTF-8 (such as "
                "\\udcff), which the editor's terminal cannot be sent: ACP carries Unicode text only. Match "
                "that name with a shell pattern instead (? for the byte)."
            )
        if self.confinement is not None and level != "none":
            await anyio.to_thread.run_sync(self.confinement.private_tmp)  # its holder starts off the loop
        executable, args = self._command(command, level, time_limit)
        # Shielded: a cancel while the editor makes the terminal must not leave its answer (a terminal
        # running the command) to no one. The id comes back, and the caller's finally releases it.
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CREATE_SECONDS) as waited:
            try:
                return await self.client.create_terminal(executable, args, cwd, self.output_byte_limit)
            except RequestError as exc:
                raise ToolError(f"The editor could not start a terminal: {exc.message}") from None
        assert waited.cancelled_caught
        raise ToolError(f"The editor did not answer terminal/create within {_CREATE_SECONDS:g} s.")


class EditorJob(Watched):
    """A command in the background in an editor's terminal (:meth:`EditorTerminals.start`). :meth:`watch`
    (a task of the caller's) waits for its exit, kills it when the time limit passes, :meth:`stop` is
    called or the task is cancelled, keeps its last output and releases the terminal, always. The tool
    call that embeds the terminal keeps showing it after that.

    The editor keeps the last ``outputByteLimit`` bytes and says only whether it dropped some, so what is
    new since the last read is found by where the last read's end appears in the output now."""

    def __init__(self, client: SessionClient, terminal_id: str) -> None:
        super().__init__()
        self.client = client
        self.terminal_id: str | None = terminal_id
        self._seen = ""
        """The output as of the last :meth:`new_output`."""

    async def watch(self, time_limit: float | None) -> None:
        assert self.terminal_id is not None
        terminal_id = self.terminal_id
        timed_out = False
        status = ExitStatus()
        try:
            with self._scope:
                with anyio.move_on_after(math.inf if time_limit is None else time_limit) as deadline:
                    status = await self.client.wait_for_terminal_exit(terminal_id)
                timed_out = deadline.cancelled_caught
        except RequestError as exc:
            log.warning("terminal/wait_for_exit failed: %s", exc)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                output = TerminalOutput("", False, None)
                try:
                    if self._scope.cancel_called or timed_out:
                        await self.client.kill_terminal(terminal_id)
                    output = await self.client.terminal_output(terminal_id)
                except Exception as exc:  # the client may be gone; what it said so far stands
                    log.warning("the editor's terminal failed: %s", exc)
            self.result = _result(output, status, timed_out)
            await _release(self.client, terminal_id)  # what is read from now on is the result's
            self._ended.set()

    async def output(self) -> str:
        if self.result is not None:
            return self.result.output
        try:
            now = await self.client.terminal_output(self.terminal_id or "")
        except RequestError as exc:
            raise ToolError(f"The editor's terminal failed: {exc.message}") from None
        return self.result.output if self.result is not None else now.output.replace("\r\n", "\n")

    async def new_output(self) -> str:
        now = await self.output()
        seen, self._seen = self._seen, now
        return _after(seen, now)


def _result(output: TerminalOutput, waited: ExitStatus, timed_out: bool) -> CommandResult:
    """The command's result from its terminal's output and the exit status its wait gave (an empty status
    in the output says nothing: the wait's answer stands)."""
    ended = output.exit_status
    status = ended if ended is not None and ended != ExitStatus() else waited
    return CommandResult(
        output=output.output.replace("\r\n", "\n"),
        exit_code=status.exit_code,
        signal=status.signal,
        truncated=output.truncated,
        timed_out=timed_out,
    )


def _after(seen: str, now: str) -> str:
    """What ``now`` (a terminal's output) has beyond ``seen`` (the same earlier): the editor may have dropped
    the start of it meanwhile, so the end of ``seen`` (200 characters) is looked for in ``now``; not found,
    all of ``now`` is new (with a marker)."""
    if now.startswith(seen):
        return now[len(seen) :]
    anchor = seen[-200:]
    found = now.rfind(anchor) if anchor else -1
    if found >= 0:
        return now[found + len(anchor) :]
    return f"[... earlier output not kept by the editor ...]\n{now}"


_CREATE_SECONDS = 30.0
"""How long ``terminal/create`` is waited for (even by a cancelled call: see :meth:`EditorTerminals._create`)."""


async def _release(client: SessionClient, terminal_id: str) -> None:
    """``terminal/release``, whatever happens (shielded, bounded): the agent must release what it creates."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
        try:
            await client.release_terminal(terminal_id)
        except Exception as exc:  # the client may be gone; nothing else to do
            log.warning("terminal/release failed: %s", exc)
