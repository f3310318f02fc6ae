"""``session/prompt``: one prompt of a session, from its content blocks to its stop reason.

A prompt is either a slash command (:mod:`refagent.session.commands`: ``/undo``, ``/compact``, ``/mode``,
``/model``; ``/init`` is an ordinary turn with a prepared instruction) or a turn of the model
(:mod:`refagent.session.turn`). Either way it is the session's turn (:meth:`Session.run_turn`: its turn
lock, a cancel scope ``session/cancel`` reaches, its conversation read), and afterwards the session is
stamped and, after its first exchange, named. The answer is the ``session/prompt`` response: the stop
reason and, for a turn the model failed, the failure in ``_meta`` (:mod:`refagent.session.turn` has the
contract).

The session builds its own turn (:meth:`Session.new_turn`: its conversation, tools, usage, compaction...);
what is decided here is what the session does not hold: the model client (from the pool), the turn's
request budget, the system prompt (read afresh through the sandbox) and the saved sessions' index.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from refagent.acp import updates
from refagent.acp.errors import InvalidRequest, RequestError
from refagent.acp.text import cut, one_line
from refagent.acp.types import ContentBlock, StopReason
from refagent.config.limits import SubagentLimits
from refagent.ids import new_id
from refagent.llm.pool import ModelPool
from refagent.llm.retry import RetryPolicy
from refagent.persistence.store import SessionStore, now
from refagent.sandbox.local import Sandbox
from refagent.session.commands import Command, init_instruction, jobs_list, mcp_list, rewind, stop_jobs, undo
from refagent.session.commands import parse as parse_command
from refagent.session.content import user_message
from refagent.session.prompt_commands import expand
from refagent.session.speaker import Say, speaker
from refagent.session.state import Session
from refagent.session.steering import NOT_RUNNING
from refagent.session.subagents import with_subagents
from refagent.session.system_prompt import make_system_prompt
from refagent.session.turn import Turn, run_prompt
from refagent.session.usage import turn_usage

log = logging.getLogger(__name__)

TITLE_CHARS = 60
SHOWN_CHARS = 200
"""What the thread shows of a prompt command's prompt (its first characters, on one line)."""
MCP_READY_SECONDS = 10


@dataclass(frozen=True)
class Prompting:
    """What a prompt needs beyond its session: the model clients, the request budget of a turn, and the
    store whose index keeps each session's title and time (None: sessions are not saved)."""

    models: ModelPool
    max_requests: int
    store: SessionStore | None
    retry: RetryPolicy | None = None
    """How long a model may be silent (the turn tells the user of a wait by it); ``None``: the default."""
    subagents: SubagentLimits = field(default_factory=SubagentLimits)
    """What the ``task`` tool's subagents may do (:mod:`refagent.session.subagents`)."""

    async def prompt(
        self, session: Session, blocks: Sequence[ContentBlock], *, message_id: str | None = None
    ) -> dict[str, Any]:
        """Answer one ``session/prompt`` of ``session``: run its command or its turn. The response: its stop
        reason, ``cancelled`` if ``session/cancel`` (or ``session/close``) ended it, and ``_meta`` with the
        failure if the model failed the turn.

        A prompt sent right after ``session/new`` first waits for the session's workspace, built after that
        response (:meth:`Session.ready`); one that could not be built fails the prompt with the reason."""
        workspace = await session.ready()
        if workspace is None or session.closed:
            return {"stopReason": "cancelled"}  # session/close came first
        command = parse_command(blocks, session.prompt_commands)
        own = next((c for c in session.prompt_commands if command is not None and c.name == command.name), None)
        if command is not None and command.name != "init" and own is None:
            return {"stopReason": await self._run_command(session, command, blocks)}
        typed = blocks  # what the user wrote: recorded, and the source of the title
        shown = ""  # what the user reads of a prompt command's prompt
        if command is not None and own is not None:  # the user's own: an ordinary turn with its prompt
            blocks = ({"type": "text", "text": expand(own, command.argument)}, *blocks[1:])
            shown = f"/{own.name} ({own.source}): {cut(one_line(own.text), SHOWN_CHARS)}\n"
        elif command is not None:  # /init: an ordinary turn with a prepared instruction, plus the user's words
            instruction = init_instruction(session.cwd)
            if command.argument:
                instruction += f"\n\nThe user adds: {command.argument}"
            blocks = ({"type": "text", "text": instruction}, *blocks[1:])
        sandbox = workspace.sandbox

        async def run() -> tuple[StopReason, Turn]:
            # Built here, in the turn: a `/model` or a mode change queued before this prompt has run by now,
            # so the turn takes the model, effort and prompt the session has at its start.
            message = await user_message(blocks, images=session.profile.images, read_text=_reader(session))
            model = self.models.get(session.profile)
            turn = session.new_turn(model, self.max_requests, await _system_prompt(session, sandbox), self.retry)
            with_subagents(session, turn, self.subagents)
            session.begin_turn(typed, message_id or new_id("user"))
            if (plans := workspace.context.plans) is not None:
                await plans.retire_done()  # a new task: the plans finished before it are done with
            if shown:  # never hidden from the user: which file, and how its prompt begins
                await speaker(session.send_update)(shown)
            session.steers.open()
            try:
                return await run_prompt(turn, message), turn
            finally:
                session.steers.close()  # what the turn did not take has failed, and is answered so

        ran = await session.run_turn(run)  # a prompt sent during a turn waits for it
        await self._after(session, typed)
        if ran is None:
            return {"stopReason": "cancelled"}
        stop, turn = ran
        answer: dict[str, Any] = {"stopReason": stop}
        if (used := turn_usage(turn.used)) is not None:
            answer["usage"] = used
        if turn.failure is not None and stop == "end_turn":
            answer["_meta"] = turn.failure.meta()
        return answer

    async def steer(self, session: Session, blocks: Sequence[ContentBlock]) -> dict[str, Any]:
        """Answer one ``_session/steering`` of ``session`` (:mod:`refagent.session.steering`): queue the
        message for the running turn and answer with its outcome once known (``injected`` or ``failed``), or
        at once ``promptRequired`` with no turn running. ``-32600`` for a slash command; the blocks are
        judged as a prompt's (``-32602``)."""
        if not session.steers.running:
            return dict(NOT_RUNNING)
        if parse_command(blocks, session.prompt_commands) is not None:
            raise InvalidRequest("A slash command cannot steer a turn: send it with session/prompt when the turn ends")
        message = await user_message(blocks, images=session.profile.images, read_text=_reader(session))
        steer = session.steers.add(blocks, message)
        if steer is None:  # the turn ended while the message was read
            return dict(NOT_RUNNING)
        outcome = await steer.wait()
        return {"outcome": outcome} if outcome == "injected" else {"outcome": outcome, "reason": "turnEnded"}

    async def _run_command(self, session: Session, command: Command, blocks: Sequence[ContentBlock]) -> StopReason:
        """Run a slash command other than /init; its answer is an agent message."""
        say = speaker(session.send_update)

        async def run() -> StopReason:
            session.record_prompt(blocks, new_id("user"))
            if command.name == "undo":
                await say(await undo(session))
            elif command.name == "rewind":
                await say(await rewind(session, command.argument))
            elif command.name == "jobs":
                await say(jobs_list(session))
            elif command.name == "mcp":
                await say(mcp_list(session))
            elif command.name == "stop":
                await say(await stop_jobs(session, command.argument))
            elif command.name == "compact":
                compactor = session.compactor(self.models.get(session.profile))
                await compactor.compact(command.argument, say, automatic=False)
            elif command.name in ("mode", "model"):
                await _switch(session, command, say)
            return "end_turn"

        try:
            return await session.run_turn(run) or "cancelled"
        finally:
            with anyio.CancelScope(shield=True):
                await self._after(session, blocks, name_it=False)  # "/undo" is no title

    async def _after(self, session: Session, blocks: Sequence[ContentBlock], *, name_it: bool = True) -> None:
        """Keep the saved session current; give it a title after its first exchange."""
        stamp = now()
        title = _title(blocks) if name_it else None
        if session.touch(stamp, title):
            with anyio.CancelScope(shield=True):
                await session.send_update(updates.session_info(title=session.title, updated_at=stamp))
        if self.store is not None:
            self.store.touch(session.id, title=session.title, updated_at=stamp)


async def _system_prompt(session: Session, sandbox: Sandbox) -> str:
    """The system prompt of a turn of ``session``, ``AGENTS.md`` read afresh through its ``sandbox``; its MCP
    servers are waited for a while at the first prompt (their tools are the turn's too)."""
    if session.mcp is not None:
        # The first prompt may come while servers still start; a slow one is not waited for long.
        with anyio.move_on_after(MCP_READY_SECONDS):
            await session.mcp.wait_ready()
    return await make_system_prompt(
        session.cwd, session.roots, policy=sandbox.policy, disk=sandbox.disk, client=session.client_prompt
    )


def _title(blocks: Sequence[ContentBlock]) -> str | None:
    """A session's title from its first prompt: the text on one line, at most :data:`TITLE_CHARS`."""
    text = " ".join(user_text(blocks).split())
    if not text:
        return None
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


async def _switch(session: Session, command: Command, say: Say) -> None:
    """``/mode X`` and ``/model X``: as ``session/set_config_option`` would, said in the thread."""
    config_id = command.name
    try:
        options = await session.set_config_option(config_id, command.argument)
    except RequestError as exc:
        await say(f"{exc.message.removeprefix('Invalid params: ')}")
        return
    await session.send_update(updates.config_options(options))
    await say(f"The {config_id} is now {command.argument}.")


def _reader(session: Session) -> Callable[[str], Awaitable[str]]:
    """How ``resource_link``s are read: through the session's text files (the editor's buffers when it
    offers them; else the disk, regular files only and size-capped, so a link to a FIFO or
    ``/dev/zero`` cannot hang or exhaust the agent)."""
    assert session.workspace is not None  # every session the manager opens has one
    files, policy = session.workspace.context.files, session.workspace.context.policy
    by_editor = bool(session.client_capabilities.get("fs", {}).get("readTextFile"))

    async def read(path: str) -> str:
        # The sandbox's policy resolves the links on the way (its disk's, not necessarily the host's).
        real = path if by_editor else policy.resolve(path).path
        text: str = await files.read_text(real)
        return text

    return read


def user_text(blocks: Sequence[ContentBlock]) -> str:
    """The plain text of a prompt, for logs and titles."""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
