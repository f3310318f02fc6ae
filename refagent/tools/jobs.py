"""A session's background commands (``run_command`` with ``background: true``): :class:`BackgroundJobs`
starts them, keeps them by id (``job-1``, ``job-2``, ...) for ``command_output`` and ``stop_command``, and
shows each as the tool call that started it.

That call stays ``in_progress`` after the model has its answer (the job's id), for as long as the command
runs: in an editor terminal the call embeds the terminal, which the user watches live; a local process's
output is streamed into the call's content (its last :data:`SHOWN_CHARS` characters, at most every
:data:`SHOW_EVERY` seconds, to the client only: the record keeps the end, not every frame). When the
command ends the call ends ``completed`` (exit code 0) or ``failed``, recorded (a ``session/load`` replays
it so), and the model hears of it before its next request (:meth:`BackgroundJobs.news`), unless it already
knows (it stopped the command, or read its output after the end).

A background command never holds a turn: the turn ends while it runs. It ends when it exits, when its time
limit passes, when the model (``stop_command``) or the user (``/stop``) stops it, and when its session
closes or the agent exits (:meth:`BackgroundJobs.serve` is cancelled: every job still running is killed;
the launcher kills a local one even if the agent itself is killed). ``session/cancel`` does not stop it:
the user who wants that says ``/stop``. At most :data:`MAX_RUNNING` run at once in a session.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc

from refagent.acp import updates
from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.sandbox.seams import CommandResult, Job, Level, Terminals
from refagent.tools.args import shown
from refagent.tools.text import fenced, text_content

log = logging.getLogger(__name__)

MAX_RUNNING = 8
"""Background commands running at once in one session."""
SHOW_EVERY = 1.0
"""Seconds between two updates of a local background command's output in its tool call."""
SHOWN_CHARS = 8_000
"""What a running local command's tool call shows of its output: the end."""
MAX_ENDED = 64
"""Ended jobs remembered (for ``command_output``); older ones are forgotten first."""

Stopper = Literal["model", "user", "session"]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Entry:
    """One background command of the session."""

    id: str
    command: str
    level: Level
    call_id: str
    job: Job
    started: float = field(default_factory=time.monotonic)
    cwd: str = ""
    """The directory it runs in (absolute)."""
    stopped_by: Stopper | None = None
    told: bool = False
    """The model knows it has ended (it stopped it, read it after its end, or was told)."""
    shown_end: bool = False
    """Its tool call has been ended (updated or recorded)."""

    @property
    def running(self) -> bool:
        return self.job.result is None

    def state(self) -> str:
        """How it stands, in words for the model and the user."""
        result = self.job.result
        if result is None:
            return f"running for {_duration(time.monotonic() - self.started)}"
        return ended_words(result, self.stopped_by)


class BackgroundJobs:
    """The background commands of one session. ``send`` shows and records an update (the session's
    ``send_update``); ``show`` only shows it (the client's), for the frames of a running command's output.

    :meth:`serve` must run (in a task of the agent's) for commands to start; until then, and after
    :meth:`close`, :meth:`start` refuses."""

    def __init__(self, send: Send, show: Send) -> None:
        self._send = send
        self._show = show
        self._entries: dict[str, Entry] = {}
        self._count = 0
        self._tasks: anyio.abc.TaskGroup | None = None
        self._scope = anyio.CancelScope()

    async def serve(self) -> None:
        """Watch the jobs until :meth:`close` or cancellation; then kill every job still running."""
        with self._scope:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                try:
                    await anyio.sleep_forever()
                finally:
                    self._tasks = None

    def close(self) -> list[dict[str, Any]]:
        """The session is closing: stop accepting jobs and kill the running ones (:meth:`serve` ends). The
        ``tool_call_update`` that ends each running one's call ("stopped: the session was closed"), for the
        caller to record before its record file closes (the client has closed the session: it is not sent)."""
        self._scope.cancel()
        self._tasks = None
        ended: list[dict[str, Any]] = []
        for entry in self._entries.values():
            if entry.running and not entry.shown_end:
                entry.stopped_by = "session"
                entry.shown_end = True
                text = "Stopped: the session was closed."
                ended.append(
                    updates.tool_call_update(
                        entry.call_id,
                        status="failed",
                        content=[text_content(text)],
                    )
                )
        return ended

    async def ended(self) -> None:
        """Wait until every job has ended (after :meth:`close`: killed, and their processes reaped), so that
        what they wrote can be removed without one of them writing on meanwhile."""
        for entry in list(self._entries.values()):
            await entry.job.wait()

    def get_or_none(self, job_id: str) -> Entry | None:
        return self._entries.get(job_id.strip())

    def get(self, job_id: str) -> Entry:
        """The job ``job_id``; ToolError naming the known ones if there is none."""
        entry = self.get_or_none(job_id)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            raise ToolError(f"There is no background command {shown(job_id, 40)!r}. Known: {known}.")
        return entry

    def entries(self) -> list[Entry]:
        """All jobs remembered, oldest first."""
        return list(self._entries.values())

    async def start(
        self,
        terminals: Terminals,
        command: str,
        cwd: str,
        *,
        level: Level,
        time_limit: float | None,
        call_id: str,
    ) -> Entry:
        """Start ``command`` in the background and follow it in the tool call ``call_id``."""
        tasks = self._tasks
        if tasks is None:
            raise ToolError("Background commands cannot be started in this session; run it without `background`.")
        running = [entry.id for entry in self._entries.values() if entry.running]
        if len(running) >= MAX_RUNNING:
            raise ToolError(
                f"{MAX_RUNNING} background commands are running already ({', '.join(running)}): stop one with "
                "stop_command first."
            )
        job = await terminals.start(command, cwd, tasks, sandbox=level, time_limit=time_limit)
        self._count += 1
        entry = Entry(f"job-{self._count}", command, level, call_id, job, cwd=cwd)
        self._entries[entry.id] = entry
        self._forget_old()
        tasks.start_soon(self._follow, entry)
        return entry

    async def stop(self, entry: Entry, by: Stopper) -> CommandResult:
        """Stop ``entry`` (nothing if it has ended) and wait for its end; ``by`` says who asked."""
        if entry.running:
            entry.stopped_by = by
            if by == "model":
                entry.told = True
            await entry.job.stop()
        return await entry.job.wait()

    def news(self) -> list[str]:
        """Lines for the model about the jobs that ended since it last heard, each once."""
        lines = []
        for entry in self._entries.values():
            if not entry.running and not entry.told:
                entry.told = True
                lines.append(f"{entry.id} (`{shown(entry.command, 200)}`): {entry.state()}.")
        return lines

    async def _follow(self, entry: Entry) -> None:
        """Show ``entry``'s output while it runs (a local process's; an editor terminal shows itself), then
        end its tool call."""
        job = entry.job
        if job.terminal_id is None:
            shown = ""
            while job.result is None:
                with anyio.move_on_after(SHOW_EVERY):
                    await job.wait()
                if job.result is not None:
                    break
                now = await job.output()
                if now != shown:
                    shown = now
                    frame: list[ToolCallContent] = [text_content(_tail(now))]
                    try:
                        await self._show(updates.tool_call_update(entry.call_id, content=frame))
                    except Exception as exc:  # the client may be gone: the command runs on
                        log.debug("could not show a background command's output: %s", exc)
        result = await job.wait()
        if entry.shown_end:
            return
        entry.shown_end = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            try:
                await self._send(ended_update(entry, result))
            except Exception as exc:
                log.debug("could not show a background command's end: %s", exc)

    def _forget_old(self) -> None:
        ended = [entry.id for entry in self._entries.values() if not entry.running]
        for job_id in ended[: max(0, len(ended) - MAX_ENDED)]:
            del self._entries[job_id]


def ended_words(result: CommandResult, stopped_by: Stopper | None) -> str:
    """How a job ended, in words."""
    if stopped_by == "model":
        return "stopped with stop_command"
    if stopped_by == "user":
        return "stopped by the user"
    if stopped_by == "session":
        return "stopped: the session was closed"
    if result.timed_out:
        return "killed: its time limit passed"
    if result.signal:
        return f"killed by signal {result.signal}"
    if result.exit_code is None:
        return "ended, exit status unknown"
    return f"exited with code {result.exit_code}"


def ended_update(entry: Entry, result: CommandResult) -> dict[str, Any]:
    """The ``tool_call_update`` that ends a background command's call."""
    words = ended_words(result, entry.stopped_by)
    status = f"{entry.id}: {words[0].upper()}{words[1:]}."
    content: list[ToolCallContent]
    if entry.job.terminal_id is not None:
        content = [
            {"type": "terminal", "terminalId": entry.job.terminal_id},
            text_content(status),
        ]
    else:
        output = result.output.rstrip("\n")
        content = [text_content(f"{fenced(_tail(output))}\n\n{status}")]
    # A command someone stopped ended as asked; one out of time, or exiting non-zero by itself, failed.
    failed = result.timed_out or (entry.stopped_by is None and result.exit_code != 0)
    raw = {
        "job": entry.id,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "stopped_by": entry.stopped_by,
    }
    return updates.tool_call_update(
        entry.call_id, status="failed" if failed else "completed", content=content, raw_output=raw
    )


def _tail(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"[... {len(text) - SHOWN_CHARS} characters before ...]\n{text[-SHOWN_CHARS:]}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
