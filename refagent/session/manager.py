"""Sessions and their prompt turns: the ``session/*`` methods of :class:`refagent.server.agent.Agent`.

Imported the first time a client asks for a session, not at startup: everything a session needs (the
turn, tools, sandbox, store, slash commands) loads after the ``initialize`` response is out, so the editor
is not kept waiting.

``session/new`` creates a session (and its record file); ``session/load`` replays a saved one's visible
history before answering, ``session/resume`` does not; ``session/list``, ``session/close`` and
``session/delete`` manage them. ``session/prompt`` runs a turn (or a slash command), one at a time per
session: a prompt sent during a turn waits for it, and ``session/cancel`` ends both.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from refagent.acp import params as p
from refagent.acp import updates
from refagent.acp.connection import Reply
from refagent.acp.errors import InvalidParams, RequestError, ResourceNotFound
from refagent.acp.types import ConfigOption, StopReason
from refagent.ids import new_id
from refagent.llm.protocol import Usage
from refagent.mcp import McpHub
from refagent.persistence.conversation import Conversation
from refagent.persistence.recorder import Recorder, replay
from refagent.persistence.recorder import load as load_session
from refagent.persistence.records import SessionLog, StoredSession
from refagent.persistence.store import now
from refagent.sandbox.confinement import machine_support
from refagent.sandbox.seams import Watcher
from refagent.session.commands import Command, available_commands, init_instruction, undo
from refagent.session.commands import parse as parse_command
from refagent.session.compaction import AUTO_COMPACT_AT, compacted, estimate_tokens, split_point, summarise
from refagent.session.content import user_message
from refagent.session.state import MODE_IDS, Session
from refagent.session.system_prompt import make_system_prompt
from refagent.session.turn import Turn, run_prompt, user_text
from refagent.session.workspace import build as build_workspace
from refagent.tools.base import BaseTool

if TYPE_CHECKING:
    from refagent.server.agent import Agent

log = logging.getLogger(__name__)

TITLE_CHARS = 60
MCP_READY_SECONDS = 10
CLOSE_WAIT_SECONDS = 5


class Sessions:
    """The sessions of one connection."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.sessions: dict[str, Session] = {}

    def cancel(self, session_id: object) -> None:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None:  # cancel for an unknown or idle session: nothing to do
            session.cancel()

    async def new_session(self, params: dict[str, Any]) -> Reply:
        cwd = p.absolute_path(params, "cwd")
        servers = p.required(params, "mcpServers", list)
        extra = p.absolute_paths(params, "additionalDirectories")
        self.agent.require_key(self.agent.default_profile())
        session_id = new_id("sess")
        await anyio.to_thread.run_sync(machine_support)  # probed once, off the event loop
        store_log = self.agent.store.create(session_id, cwd, extra) if self.agent.store is not None else None
        session = self._open(session_id, cwd, extra, servers, store_log, None)
        log.info("session %s in %s", session.id, cwd)
        return Reply(self._state(session, with_id=True), after=functools.partial(self._announce, session))

    async def load_session(self, params: dict[str, Any]) -> Reply:
        """``session/load``: replay the visible history, then answer; the conversation goes on."""
        session, stored = await self._restore(params, require_servers=True)
        await self.agent.peer.send_lines(stored.shown)  # the replay file, as it is (refagent.persistence.records)
        for update in replay(stored.held):  # if it could not be repaired after a crash
            await self._send_update(session.id, update)
        return Reply(self._state(session), after=functools.partial(self._announce, session))

    async def resume_session(self, params: dict[str, Any]) -> Reply:
        """``session/resume``: like load, without the replay."""
        session, _ = await self._restore(params, require_servers=False)
        return Reply(self._state(session), after=functools.partial(self._announce, session))

    async def list_sessions(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        if cwd is not None:
            cwd = p.absolute_path(params, "cwd")
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParams("Invalid params: 'cursor' must be a string")
        if self.agent.store is None:
            return {"sessions": []}
        sessions, next_cursor = self.agent.store.list(cwd, cursor)
        result: dict[str, Any] = {"sessions": sessions}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def close_session(self, params: dict[str, Any]) -> dict[str, Any]:
        """``session/close``: cancel its turn (as ``session/cancel`` would), then free what it holds."""
        session = self._session(params)
        await self._close_and_wait(session)
        return {}

    async def delete_session(self, params: dict[str, Any]) -> dict[str, Any]:
        """``session/delete``: close it if open and remove it from disk; unknown ids succeed silently."""
        session_id = p.required(params, "sessionId", str)
        session = self.sessions.get(session_id)
        if session is not None:
            await self._close_and_wait(session)
        if self.agent.store is not None:
            self.agent.store.delete(session_id)
        return {}

    async def _mcp_problem(self, session: Session, server: str, problem: str) -> None:
        """An MCP server failed: the user hears it in the thread, the log keeps it."""
        log.warning("MCP server %s: %s", server, problem)
        text = f"MCP server {server}: {problem}\n"
        await session.update(updates.agent_message_chunk(updates.text(text), new_id("msg")))

    def _close(self, session: Session) -> None:
        session.close()
        self.sessions.pop(session.id, None)

    async def _restore(self, params: dict[str, Any], *, require_servers: bool) -> tuple[Session, StoredSession]:
        """The session named in ``params``, opened from disk with the client's cwd and roots; its
        conversation is read from its records when first needed (:meth:`_read_conversation`)."""
        session_id = p.required(params, "sessionId", str)
        cwd = p.absolute_path(params, "cwd")
        if require_servers:
            servers = p.required(params, "mcpServers", list)
        else:
            servers = p.optional(params, "mcpServers", list, [])
        extra = p.absolute_paths(params, "additionalDirectories")  # the client's list is the one in force
        self.agent.require_key(self.agent.default_profile())
        live = self.sessions.get(session_id)
        if live is not None:  # reopened: the saved state is the truth, and nothing runs twice
            await self._close_and_wait(live)
        store = self.agent.store
        assert store is not None  # the methods that restore are offered only with a store
        stored = await anyio.to_thread.run_sync(load_session, store, session_id)
        await anyio.to_thread.run_sync(machine_support)
        if stored is None:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        session = self._open(session_id, cwd, extra, servers, store.reopen(session_id), stored)
        session.saved = stored
        log.info("session %s reopened in %s", session_id, cwd)
        return session, stored

    async def _read_conversation(self, session: Session) -> None:
        """Give a loaded session its model-facing conversation and ``/undo`` records, parsed from its records
        (the bulk of a long session's file: in a worker thread) when a prompt or command first needs them,
        under the session's turn lock. Not when it is loaded: a session opened to be looked at, or the
        replay a client waits for, does not pay for it."""
        saved = session.saved
        if saved is None:
            return
        try:
            messages, changes = await anyio.to_thread.run_sync(saved.model_state)
        except Exception:  # not expected (bad records are skipped); the session goes on without them
            log.exception("could not read the conversation of session %s", session.id)
            messages, changes = [], []
        session.history.restore(messages)
        session.changes = list(changes)
        session.saved = None

    async def _close_and_wait(self, session: Session) -> None:
        """Close ``session`` and wait until its turn has ended and written its last records."""
        self._close(session)
        with anyio.move_on_after(CLOSE_WAIT_SECONDS):
            async with session.turn_lock:
                pass
        if session.workspace is not None:  # its commands have ended: their temporary files can go
            session.workspace.sandbox.close()

    def _state(self, session: Session, *, with_id: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = {"modes": session.modes(), "configOptions": session.config_options()}
        return {"sessionId": session.id, **state} if with_id else state

    async def _announce(self, session: Session) -> None:
        """What a client learns about a session after its response: the slash commands, its title, and what
        of the configuration could not be used (custom tools left out). MCP servers start connecting now,
        so that what they report follows the response too."""
        if session.mcp is not None and self.agent.background is not None:
            self.agent.background.start_soon(_run_mcp, session.mcp, session.mcp_scope)
        await session.update(updates.available_commands(available_commands(session)))
        if session.title:
            await session.update(updates.session_info(title=session.title))
        problems = list(self.agent.settings.problems()) if self.agent.settings.problems is not None else []
        if session.workspace is not None and session.workspace.sandbox.confinement is not None:
            missing = session.support.missing("workspace")
            if missing:
                problems.append(f"Sandbox: commands are not fully confined on this machine ({', '.join(missing)}).")
        if problems:  # not recorded with the session: it is about this run of the agent, not the thread
            text = "".join(f"{problem}\n" for problem in problems)
            await self._send_update(session.id, updates.agent_message_chunk(updates.text(text), new_id("msg")))

    def _open(
        self,
        session_id: str,
        cwd: str,
        extra: list[str],
        servers: list[Any],
        store_log: SessionLog | None,
        stored: StoredSession | None,
    ) -> Session:
        recorder = Recorder(functools.partial(self._send_update, session_id), store_log)
        profile_ids = {pr.id for pr in self.agent.settings.profiles}
        session = Session(
            id=session_id,
            cwd=cwd,
            additional_directories=extra,
            mcp_servers=servers,
            client_capabilities=self.agent.client_capabilities,
            profiles=self.agent.settings.profiles,
            profile_id=self.agent.default_profile().id,
            send=recorder,
            history=Conversation([], store_log),  # a loaded one's is read by _read_conversation
            log=store_log,
        )
        session.recorder = recorder
        if stored is not None:
            session.title = stored.title
            session.updated_at = stored.updated_at
            session.turns = stored.turns
            if stored.mode_id in MODE_IDS:
                session.mode_id = stored.mode_id
            if stored.profile_id in profile_ids:
                session.profile_id = stored.profile_id
        builtin = list(self.agent.settings.tools())
        tools: Sequence[BaseTool] | Callable[[], Sequence[BaseTool]] = builtin
        if servers:
            session.mcp = McpHub(
                servers,
                cwd,
                on_problem=functools.partial(self._mcp_problem, session),
                reserved_names=[t.name for t in builtin],
            )
            hub = session.mcp
            tools = lambda: [*builtin, *hub.tools()]  # noqa: E731
        sandbox = self.agent.settings.make_sandbox(cwd, extra)
        workspace = build_workspace(
            session_id=session_id,
            cwd=cwd,
            additional=extra,
            capabilities=self.agent.client_capabilities,
            peer=self.agent.peer,
            sandbox=sandbox,
            tools=tools,
            permissions=session.permissions,
            mode=lambda: session.mode_id,
            send_update=session.update,
            cancel_turn=session.cancel,
            on_applied=session.record_change,
        )
        session.tools = workspace.runner
        session.workspace = workspace
        if sandbox.confinement is not None:
            session.support = sandbox.confinement.support
        if sandbox.watcher is not None and self.agent.background is not None:
            self.agent.background.start_soon(_watch, sandbox.watcher, session.background)
            session.changed_files = sandbox.watcher.drain
        self.sessions[session.id] = session
        return session

    def _session(self, params: dict[str, Any]) -> Session:
        session_id = p.required(params, "sessionId", str)
        session = self.sessions.get(session_id)
        if session is None:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        return session

    async def _send_update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.agent.peer.notify("session/update", {"sessionId": session_id, "update": update})

    async def set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        await session.set_mode(p.required(params, "modeId", str))
        return {}

    async def set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        config_id = p.required(params, "configId", str)
        if "value" not in params:
            raise InvalidParams("Invalid params: missing required field 'value'")
        return {"configOptions": await self._set_option(session, config_id, params["value"])}

    async def _set_option(self, session: Session, config_id: str, value: object) -> list[ConfigOption]:
        """Set a config option; switching to a model whose key is missing is ``-32000``."""
        if config_id == "model":
            chosen = next((pr for pr in session.profiles if pr.id == value), None)
            if chosen is not None:
                self.agent.require_key(chosen)
        return await session.set_config_option(config_id, value)

    # -- the prompt turn -------------------------------------------------------------------

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        blocks = p.required(params, "prompt", list)
        command = parse_command(blocks)
        if command is not None and command.name != "init":
            return {"stopReason": await self._run_command(session, command, blocks)}
        typed = blocks  # what the user wrote: recorded, and the source of the title
        if command is not None:  # /init: an ordinary turn with a prepared instruction, plus the user's words
            instruction = init_instruction(session.cwd)
            if command.argument:
                instruction += f"\n\nThe user adds: {command.argument}"
            blocks = [{"type": "text", "text": instruction}, *blocks[1:]]
        message = await user_message(blocks, images=session.profile.images, read_text=self._reader(session))
        if session.mcp is not None:
            # The first prompt may come while servers still start; a slow one is not waited for long.
            with anyio.move_on_after(MCP_READY_SECONDS):
                await session.mcp.wait_ready()
        turn = Turn(
            model=self.agent.model(session.profile),
            history=session.history,
            send=session.update,
            system_prompt=await make_system_prompt(session.cwd, session.roots),
            tools=session.tools,
            max_requests=self.agent.settings.max_requests,
            on_usage=functools.partial(self._report_usage, session),
            changed_files=session.changed_files,
            before_request=functools.partial(self._compact_if_full, session),
        )
        stop: StopReason = "cancelled"  # unless the turn gets to answer otherwise
        scope = session.open_turn()
        try:
            with scope:
                async with session.turn_lock:  # a prompt sent during a turn waits for it
                    await self._read_conversation(session)
                    session.turns += 1
                    session.save_state()
                    self._record_prompt(session, typed)
                    stop = await run_prompt(turn, message)
        finally:
            session.close_turn(scope)
            session.settle()
        await self._after_turn(session, typed)
        return {"stopReason": stop}

    def _record_prompt(self, session: Session, blocks: list[Any]) -> None:
        """The user's prompt joins the visible history (the client shows it itself, so it is not sent)."""
        if session.recorder is None:
            return
        message_id = new_id("user")
        for block in blocks:
            if isinstance(block, dict):
                session.recorder.record(updates.user_message_chunk(block, message_id))
        session.recorder.flush()

    async def _after_turn(self, session: Session, blocks: list[Any], *, name_it: bool = True) -> None:
        """Keep the saved session current; give it a title after its first exchange."""
        stamp = session.updated_at = now()
        named = False
        if session.title is None and name_it:
            text = " ".join(user_text(blocks).split())
            if text:
                session.title = text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"
                named = True
        session.save_state()
        if named:
            with anyio.CancelScope(shield=True):
                await session.update(updates.session_info(title=session.title, updated_at=stamp))
        if self.agent.store is not None:
            self.agent.store.touch(session.id, title=session.title, updated_at=stamp)

    async def _run_command(self, session: Session, command: Command, blocks: list[Any]) -> StopReason:
        """Run a slash command other than /init; its answer is an agent message."""
        say = _speaker(session)
        scope = session.open_turn()
        try:
            with scope:
                async with session.turn_lock:
                    await self._read_conversation(session)
                    self._record_prompt(session, blocks)
                    if command.name == "undo":
                        await say(await undo(session))
                    elif command.name == "compact":
                        await self._compact(session, command.argument, say, automatic=False)
                    elif command.name in ("mode", "model"):
                        await self._switch(session, command, say)
                    return "end_turn"
            return "cancelled"
        finally:
            session.close_turn(scope)
            session.settle()
            with anyio.CancelScope(shield=True):
                await self._after_turn(session, blocks, name_it=False)  # "/undo" is no title

    async def _switch(self, session: Session, command: Command, say: Callable[[str], Awaitable[None]]) -> None:
        config_id = command.name
        try:
            options = await self._set_option(session, config_id, command.argument)
        except RequestError as exc:
            await say(f"{exc.message.removeprefix('Invalid params: ')}")
            return
        await session.update(updates.config_options(options))
        await say(f"The {config_id} is now {command.argument}.")

    async def _compact(
        self, session: Session, focus: str, say: Callable[[str], Awaitable[None]], *, automatic: bool
    ) -> None:
        history = session.history
        cut = split_point(history)
        if cut == 0:
            if not automatic:
                await say("Nothing to compact yet: the conversation is short.")
            return
        older, recent = list(history[:cut]), list(history[cut:])
        before = estimate_tokens(list(history))
        await say(
            ("The conversation is near the model's context window, so " if automatic else "")
            + f"compacting {len(older)} older messages into a summary:\n\n"
        )
        summary = await summarise(self.agent.model(session.profile), older, focus, say)
        if not summary:
            await say("\n\nThe model returned an empty summary; nothing was changed.")
            return
        history.replace(compacted(summary, recent))
        after = estimate_tokens(list(history))
        await say(f"\n\nCompacted: about {before:,} tokens down to {after:,}.\n")
        await session.update(updates.usage(after, session.profile.context_window))

    async def _compact_if_full(self, session: Session, messages: list[dict[str, Any]], tools: list[Any]) -> None:
        """Before a model request: compact first if it would fill most of the context window."""
        window = session.profile.context_window
        if estimate_tokens(messages, tools) < window * AUTO_COMPACT_AT:
            return
        await self._compact(session, "", _speaker(session), automatic=True)

    async def _report_usage(self, session: Session, usage: Usage) -> None:
        """``usage_update``: tokens in context after this response, the window, and the session's cost."""
        profile = session.profile
        cost: tuple[float, str] | None = None
        if profile.input_price is not None or profile.output_price is not None:
            session.cost += usage.prompt_tokens * (profile.input_price or 0.0)
            session.cost += usage.completion_tokens * (profile.output_price or 0.0)
            cost = (round(session.cost, 6), profile.currency)
        used = usage.prompt_tokens + usage.completion_tokens
        await session.update(updates.usage(used, profile.context_window, cost))

    def _reader(self, session: Session) -> Callable[[str], Awaitable[str]]:
        """How ``resource_link``s are read: through the session's text files (the editor's buffers when it
        offers them; else the disk, regular files only and size-capped, so a link to a FIFO or
        ``/dev/zero`` cannot hang or exhaust the agent)."""
        files = session.workspace.context.files
        by_editor = bool(session.client_capabilities.get("fs", {}).get("readTextFile"))

        async def read(path: str) -> str:
            real = path if by_editor else await anyio.to_thread.run_sync(os.path.realpath, path)
            text: str = await files.read_text(real)
            return text

        return read


def _speaker(session: Session) -> Callable[[str], Awaitable[None]]:
    """``say(text)``: text for the user, as chunks of one new agent message."""
    message_id = new_id("msg")

    async def say(text: str) -> None:
        await session.update(updates.agent_message_chunk(updates.text(text), message_id))

    return say


async def _run_mcp(hub: McpHub, scope: anyio.CancelScope) -> None:
    """A session's MCP servers, connected until the session closes or the agent exits."""
    with scope:
        try:
            await hub.run()
        except Exception:
            log.exception("the MCP servers stopped")


async def _watch(watcher: Watcher, scope: anyio.CancelScope) -> None:
    """Run a session's file watcher until the session closes. A watcher that fails costs the notes about
    changed files, nothing else."""
    with scope:
        try:
            await watcher.run()
        except Exception:
            log.exception("the file watcher stopped")
