"""The editor's terminals (ACP "Terminals"): :class:`EditorTerminals` runs a command in a terminal of the
client's, which the user watches live in the tool call.

``terminal/create`` -> embed in the tool call -> ``terminal/wait_for_exit`` raced against the time limit ->
``terminal/kill`` on timeout -> ``terminal/output`` -> ``terminal/release``, which always happens: on
success, error, timeout and cancellation. With the sandbox's confinement the editor runs our launcher
(:mod:`refagent.confine.launcher`), which confines the command as a local one is confined and then execs
``/bin/sh -c``: the editor's terminal holds no more power than ours.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable

import anyio

from refagent.acp.client import ExitStatus, SessionClient
from refagent.acp.errors import RequestError
from refagent.acp.text import has_surrogates
from refagent.confine.confinement import UNCONFINED, Confinement
from refagent.confine.process import ResourceLimits, is_secret_name
from refagent.errors import ToolError
from refagent.seams import CommandResult, Level

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

    def not_confined(self, level: Level) -> list[str]:
        return (self.confinement or UNCONFINED).missing(level)

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
        )
        return argv[0], argv[1:]

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: Callable[[str], Awaitable[None]] | None = None,
        *,
        sandbox: Level = "workspace",
    ) -> CommandResult:
        if has_surrogates(command) or has_surrogates(cwd):
            # The wire would send U+FFFD for it: the editor would run another command than this one.
            raise ToolError(
                "The command or its working directory holds a byte of a file name that is not UTF-8 (such as "
                "\\udcff), which the editor's terminal cannot be sent: ACP carries Unicode text only. Match "
                "that name with a shell pattern instead (? for the byte)."
            )
        executable, args = self._command(command, sandbox, time_limit)
        try:
            terminal_id = await self.client.create_terminal(executable, args, cwd, self.output_byte_limit)
        except RequestError as exc:
            raise ToolError(f"The editor could not start a terminal: {exc.message}") from None
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
            output = await self.client.terminal_output(terminal_id)
            ended = output.exit_status  # an empty status says nothing: the wait's answer stands
            status = ended if ended is not None and ended != ExitStatus() else exit_status
            return CommandResult(
                output=output.output.replace("\r\n", "\n"),
                exit_code=status.exit_code,
                signal=status.signal,
                truncated=output.truncated,
                timed_out=timed_out,
            )
        except RequestError as exc:
            raise ToolError(f"The editor's terminal failed: {exc.message}") from None
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                try:
                    await self.client.release_terminal(terminal_id)
                except Exception as exc:  # the client may be gone; nothing else to do
                    log.warning("terminal/release failed: %s", exc)
