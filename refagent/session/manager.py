"""The sessions of one connection: ``session/new``, ``load``, ``resume``, ``list``, ``close``, ``delete``,
``set_mode`` and ``set_config_option``, and the way to a session's prompts (:mod:`refagent.session.prompting`).

Imported the first time a client asks for a session (or in the background once ``initialize`` is
answered), not at startup, so the editor is not kept waiting; and it imports little itself. What a session
answers with (its state, its record file, its modes and config options) is made before the response;
its workspace (tools, sandbox, editor backends, file watcher) and MCP servers are built after it, in the
response's after-work (:meth:`SessionManager._settle`), with the tool, sandbox and prompt modules imported
in a worker thread meanwhile. A prompt sent at once waits for that (:meth:`Session.ready`).

``session/new`` creates a session (and its record file); ``session/load`` replays a saved one's visible
history before answering, ``session/resume`` does not; ``session/list``, ``session/close`` and
``session/delete`` manage them. ``session/prompt`` runs a turn (or a slash command), one at a time per
session: a prompt sent during a turn waits for it, and ``session/cancel`` ends both.

The manager is given narrow services (:class:`SessionManager`'s arguments), not the agent: the connection to
the client, the settings, the store, a task group for the sessions' background tasks, and the model clients.
Its methods take each request's params typed (:mod:`refagent.acp.requests`), as the server read and checked
them: what is left to judge here is whether the session exists (``-32002``) and what the session says of
the values (an unknown mode, model or option is ``-32602``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from refagent.acp import updates
from refagent.acp.client import Client
from refagent.acp.connection import Peer, Reply
from refagent.acp.errors import InvalidParams, ResourceNotFound
from refagent.acp.text import one_line
from refagent.ids import new_id
from refagent.llm.pool import ModelPool, require_key
from refagent.persistence.reader import PLAN
from refagent.persistence.recorder import load as load_session
from refagent.persistence.recorder import replay
from refagent.persistence.replays import COMPACTION, fork_files, mark_archived, replay_for, retitle
from refagent.sandbox.holding import Holding
from refagent.session import opening
from refagent.session.options import new_session_result
from refagent.session.state import Session
from refagent.settings import Settings

if TYPE_CHECKING:  # annotations; the modules themselves load after the first session's response
    from refagent.acp.requests import (
        ListSessionsParams,
        NewSessionParams,
        OpenSessionParams,
        PromptParams,
        SessionParams,
        SetConfigOptionParams,
        SetModeParams,
        SetTitleParams,
    )
    from refagent.acp.types import ClientCapabilities
    from refagent.persistence.reader import StoredSession
    from refagent.persistence.store import SessionStore
    from refagent.persistence.writer import SessionLog
    from refagent.sandbox.local import Sandbox
    from refagent.session.prompting import Prompting

log = logging.getLogger(__name__)

CLOSE_WAIT_SECONDS = 5
MAX_TITLE_CHARS = 200
"""The longest title a user may give a session (``session/set_title``); a longer one is cut."""


class SessionManager:
    """Opens, finds, closes and deletes the sessions of one connection.

    ``peer``: the client; ``settings``: what sessions are made with (:meth:`reconfigure` replaces them);
    ``store``: where sessions are saved (None: not saved, and the methods that need it are not offered);
    ``background``: where the sessions' file watchers and MCP servers run (None: they do not);
    ``models``: the model clients; ``capabilities``: the client's, from ``initialize``.
    """

    def __init__(
        self,
        *,
        peer: Peer,
        settings: Settings,
        store: SessionStore | None,
        background: anyio.abc.TaskGroup | None,
        models: ModelPool,
        capabilities: ClientCapabilities,
    ) -> None:
        self.peer = peer
        self.settings = settings
        self.store = store
        self.background = background
        self.models = models
        self.capabilities = capabilities
        self.sessions: dict[str, Session] = {}
        self._prompts: Prompting | None = None
        self._in_order = anyio.Lock()  # fair (FIFO): session/new requests are answered in the order they came

    def reconfigure(self, settings: Settings) -> None:
        """The configuration was read again (``authenticate``): new sessions and prompts use ``settings``."""
        self.settings = settings
        self._prompts = None

    # -- opening ------------------------------------------------------------------------------

    async def new_session(self, params: NewSessionParams) -> Reply:
        """``session/new``: a session in ``cwd`` (and the client's additional directories). Several sent
        together are answered in the order they came, one right after the other."""
        require_key(self.settings.active_profile())
        async with self._in_order:
            holding = await anyio.to_thread.run_sync(self.settings.sandbox_holding)  # probed once, off the loop
            session, after = self.open_new(params, new_id("sess"), holding)
        return Reply(new_session_result(self.settings, session.id, session.holding), after=after)

    async def none_opening(self) -> None:
        """Wait until the ``session/new`` requests being answered now have been (the lock is fair: this
        waits behind them): work that would slow those answers waits for this (a session's workspace and
        announcements, the model client's import)."""
        async with self._in_order:
            pass

    def open_new(
        self, params: NewSessionParams, session_id: str, holding: Holding | None
    ) -> tuple[Session, Callable[[], Awaitable[None]]]:
        """A new session ``session_id`` as ``session/new`` asked for it (its key checked by the caller), and
        the work to do once its response is written (:meth:`_settle`). ``holding``: the settings'
        :meth:`~refagent.settings.Settings.sandbox_holding`, which the response's modes describe. The
        agent opens with this the sessions whose response start-up wrote before the loop started
        (:mod:`refagent.server.boot`)."""
        cwd, servers, extra = params.cwd, params.mcp_servers, list(params.additional_directories)
        # Its index entry is written after the response (_settle): the index is rewritten whole.
        store_log = self.store.create(session_id, cwd, extra, listed=False) if self.store is not None else None
        session, sandbox = self._open(session_id, cwd, extra, holding, store_log, None)
        session.use_client_prompt(params.system_prompt)
        log.info("session %s in %s", session.id, cwd)
        return session, functools.partial(self._settle, session, servers, sandbox)

    async def load_session(self, params: OpenSessionParams) -> Reply:
        """``session/load``: replay the visible history, then answer; the conversation goes on."""
        session, stored, after = await self._restore(params)
        shown = stored.shown
        if COMPACTION in shown or PLAN in shown:  # recorded in the form the client of the moment took them
            taken = functools.partial(
                replay_for, compactions=session.compaction_updates, plans_by_id=session.client.takes_plans
            )
            shown = await anyio.to_thread.run_sync(taken, shown)
        await session.client.send_recorded(shown)  # the replay file, as it is (refagent.persistence.records)
        for update in replay(stored.held):  # if it could not be repaired after a crash (sent, not recorded)
            await session.client.send_update(update)
        from refagent.session.subagent_view import replay_children  # here: loaded with the turn's modules

        await replay_children(session.client, stored)  # their own sessions, to a client that shows them
        return Reply(self._state(session), after=after)

    async def resume_session(self, params: OpenSessionParams) -> Reply:
        """``session/resume``: like load, without the replay."""
        session, _, after = await self._restore(params)
        return Reply(self._state(session), after=after)

    async def fork_session(self, params: OpenSessionParams) -> Reply:
        """``session/fork`` (unstable): a new session that starts with a copy of ``sessionId``'s history (what
        the user saw, the model's conversation, the mode and the model) and goes on independently of it; each
        loads with its own history. ``/undo`` in the fork starts with its own turns. A session in the middle
        of a turn is copied as its files stand (a tool call still running is then shown as it was)."""
        source_id, cwd, servers = params.session_id, params.cwd, params.mcp_servers
        extra = list(params.additional_directories)
        require_key(self.settings.active_profile())
        store = self.store
        assert store is not None  # offered only with a store
        stored = await anyio.to_thread.run_sync(load_session, store, source_id)
        if stored is None:
            raise ResourceNotFound(f"Session not found: {source_id[:100]}")
        session_id = new_id("sess")
        forked = await anyio.to_thread.run_sync(fork_files, store, stored, session_id, cwd, extra)
        holding = await anyio.to_thread.run_sync(self.settings.sandbox_holding)
        session, sandbox = self._open(session_id, cwd, extra, holding, store.reopen(session_id), forked)
        session.use_client_prompt(params.system_prompt)  # the fork's own, if the client sent one
        log.info("session %s forked from %s in %s", session_id, source_id, cwd)
        after = functools.partial(self._settle, session, servers, sandbox)
        return Reply(self._state(session, with_id=True), after=after)

    async def _restore(self, params: OpenSessionParams) -> tuple[Session, StoredSession, Callable[[], Awaitable[None]]]:
        """The session named in ``params``, opened from disk with the client's cwd and roots, and the work
        to do after its response (:meth:`_settle`); its conversation is read from its records when first
        needed (:meth:`Session.read_conversation`)."""
        session_id, cwd, servers = params.session_id, params.cwd, params.mcp_servers
        extra = list(params.additional_directories)  # the client's list is the one in force
        require_key(self.settings.active_profile())
        live = self.sessions.get(session_id)
        if live is not None:  # reopened: the saved state is the truth, and nothing runs twice
            await self._close_and_wait(live)
        store = self.store
        assert store is not None  # the methods that restore are offered only with a store
        stored = await anyio.to_thread.run_sync(load_session, store, session_id)
        holding = await anyio.to_thread.run_sync(self.settings.sandbox_holding)
        if stored is None:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        session, sandbox = self._open(session_id, cwd, extra, holding, store.reopen(session_id), stored)
        session.use_client_prompt(params.system_prompt)  # sent again: it replaces the saved one
        log.info("session %s reopened in %s", session_id, cwd)
        return session, stored, functools.partial(self._settle, session, servers, sandbox)

    def _open(
        self,
        session_id: str,
        cwd: str,
        extra: list[str],
        holding: Holding | None,
        store_log: SessionLog | None,
        stored: StoredSession | None,
    ) -> tuple[Session, Sandbox | None]:
        """A session with what its response needs, and no workspace yet (:meth:`_settle` builds it).

        ``holding``: how far its sandbox will hold commands, which its modes describe; None when only the
        sandbox can say (a ``make_sandbox`` of the settings' own): then the sandbox is made now, and
        returned for the workspace."""
        sandbox = None
        if holding is None:
            sandbox = self.settings.sandbox_for(cwd, extra)
            holding = sandbox.holding
        session = Session(
            session_id=session_id,
            cwd=cwd,
            additional_directories=extra,
            client=Client(self.peer, self.capabilities).session(session_id),
            profiles=self.settings.profiles,
            profile_id=self.settings.active_profile().id,
            log=store_log,
            holding=holding,
        )
        if stored is not None:
            session.restore(stored)
        self.sessions[session.id] = session
        return session, sandbox

    def _state(self, session: Session, *, with_id: bool = False) -> dict[str, Any]:
        state = session.state()
        return {"sessionId": session.id, **state} if with_id else state

    async def _settle(self, session: Session, servers: Sequence[Any], sandbox: Sandbox | None) -> None:
        """The work after the response that opened ``session`` (its :class:`Reply`'s ``after``, which runs
        once the response is written): build its workspace, then announce it (:meth:`_announce`), once no
        ``session/new`` is being answered (those sent with this one are answered first, and not slowed).
        Prompts wait for both (:meth:`Session.ready`), so that what they send follows the announcements.

        A workspace that cannot be built is logged, said in the thread, and fails the session's prompts
        with the reason; the agent goes on serving. A session closed meanwhile gets neither."""
        settings = self.settings
        problem: str | None = None
        unread = ""
        try:
            await self.none_opening()  # session/new requests sent with this one are answered first, unslowed
            if self.store is not None:
                self.store.list_created(session.id)  # a new session's index entry (closed or not)
            try:
                # The modules of the workspace and of prompting (tens of milliseconds), off the event loop.
                cwd = session.cwd
                servers, unread = await anyio.to_thread.run_sync(opening.session_servers, cwd, servers, settings)
                session.prompt_commands = await anyio.to_thread.run_sync(opening.prompt_commands, cwd, settings)
                if not session.closed:
                    self._build(session, settings, servers, sandbox)
            except Exception as exc:
                log.exception("could not build the workspace of session %s", session.id)
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if session.closed:  # before it was built (the build does not wait): nothing to build, or to say
                if sandbox is not None:
                    sandbox.close()  # made for the response, never used
                return
            await self._announce(session, settings, problem)
            if unread:
                await opening.project_servers_said(session, unread)
        finally:
            session.settled(problem)

    def _build(self, session: Session, settings: Settings, servers: Sequence[Any], sandbox: Sandbox | None) -> None:
        """Give ``session`` its workspace (:func:`refagent.session.workspace.build`: the tools, the sandbox,
        the editor's or the local backends), its MCP servers (started by :meth:`_announce`) and its file
        watcher (started now)."""
        # here: the workspace's modules (the tools, the sandbox's backends) load after the first session/new
        # answer, off the loop (opening.import_workspace): tests/server/test_session_new_imports.py holds it
        from refagent.session.workspace import build as build_workspace

        builtin = list(settings.tools())
        hub = None
        if servers:
            from refagent.mcp import McpHub  # here: as the workspace's, and only for a session with servers

            hub = McpHub(
                servers,
                session.cwd,
                on_problem=functools.partial(opening.mcp_problem, session),
                reserved_names=[t.name for t in builtin],
            )
        if sandbox is None:
            sandbox = settings.sandbox_for(session.cwd, session.additional_directories)
        workspace = build_workspace(
            client=session.client,
            cwd=session.cwd,
            additional=session.additional_directories,
            sandbox=sandbox,
            tools=builtin if hub is None else lambda: [*builtin, *hub.tools()],
            mode=lambda: session.mode_id,
            send_update=session.send_update,
            cancel_turn=session.cancel,
            before_change=session.before_change,
            show_update=session.client.send_update,
        )
        if self.background is not None and workspace.jobs is not None:
            self.background.start_soon(workspace.jobs.serve)
        watcher = sandbox.watcher if self.background is not None else None
        session.attach(workspace, mcp=hub, changed_files=watcher.drain if watcher is not None else None)
        if watcher is not None and self.background is not None:
            self.background.start_soon(opening.run_watcher, watcher, session.background)

    async def _announce(self, session: Session, settings: Settings, problem: str | None = None) -> None:
        """What a client learns about a session after its response: the slash commands, its title, and what
        of the configuration could not be used (custom tools left out), or that the session could not be
        set up (``problem``). MCP servers start connecting now, so that what they report follows the
        response too."""
        from refagent.session.commands import available_commands  # here: as the workspace's (after the answer)

        if session.mcp is not None and self.background is not None:
            self.background.start_soon(opening.run_mcp, session.mcp, session.mcp_scope)
        await session.send_update(updates.available_commands(available_commands(session)))
        if session.title:
            await session.send_update(updates.session_info(title=session.title))
        # About this run of the agent, not the thread: never recorded. As notices when the client shows them;
        # else as one message (a broken configuration is then told by the built-in model at the first prompt).
        news: list[tuple[str, str, str, str | None]] = []  # severity, title, detail; the line said otherwise
        if settings.broken is not None:
            news.append(("error", "The configuration is broken", settings.broken, None))
        for line in settings.problems() if settings.problems is not None else []:
            news.append(("warning", "A custom tool was left out", line, line))
        if session.workspace is not None and session.workspace.sandbox.confinement is not None:
            gaps = ", ".join(session.holding.missing("workspace"))
            if gaps:
                said = f"Sandbox: commands are not fully confined on this machine ({gaps})."
                news.append(("warning", "Commands are not fully confined on this machine", gaps, said))
        if problem is not None:
            said = f"This session could not be set up ({problem}): its prompts will fail. Open a new one."
            news.append(("error", "This session could not be set up", f"{problem}. Open a new session.", said))
        if session.notices:
            for severity, title, detail, _ in news:
                await session.client.send_update(updates.notice(severity, title, detail))
            return
        lines = [said for *_, said in news if said is not None]
        if lines:
            text = "".join(f"{line}\n" for line in lines)
            await session.client.send_update(updates.agent_message_chunk(updates.text(text), new_id("msg")))

    # -- the other session methods --------------------------------------------------------------

    async def list_sessions(self, params: ListSessionsParams) -> dict[str, Any]:
        """``session/list``: the saved sessions (of ``cwd``, if given), newest first, a page at a time; the
        archived ones only if ``archived`` asks for them, and each saying whether it is."""
        if self.store is None:
            return {"sessions": []}
        sessions, next_cursor = self.store.list(params.cwd, params.cursor, archived=params.archived)
        result: dict[str, Any] = {"sessions": sessions}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def close_session(self, params: SessionParams) -> dict[str, Any]:
        """``session/close``: cancel its turn (as ``session/cancel`` would), then free what it holds."""
        await self._close_and_wait(self._session(params.session_id))
        return {}

    async def delete_session(self, params: SessionParams) -> dict[str, Any]:
        """``session/delete``: close it if open and remove it from disk; unknown ids succeed silently."""
        session_id = params.session_id
        session = self.sessions.get(session_id)
        if session is not None:
            await self._close_and_wait(session)
        if self.store is not None:
            self.store.delete(session_id)
        return {}

    async def archive_session(self, params: SessionParams) -> dict[str, Any]:
        """``session/archive`` (unstable): out of ``session/list`` unless asked for, its id and history kept;
        closed first if open (as ``session/close``). ``-32002`` for a session not saved here."""
        if (session := self.sessions.get(params.session_id)) is not None:
            await self._close_and_wait(session)
        await self._mark_archived(params.session_id, True)
        return {}

    async def unarchive_session(self, params: SessionParams) -> dict[str, Any]:
        """``session/unarchive`` (unstable): back in ``session/list``; nothing loaded or resumed (one loaded
        while archived stays open, saved unarchived from now on). ``-32002`` for a session not saved here."""
        if (session := self.sessions.get(params.session_id)) is not None and session.log is not None:
            session.archived = False
            session.save_state()
        await self._mark_archived(params.session_id, False)
        return {}

    async def _mark_archived(self, session_id: str, archived: bool) -> None:
        assert self.store is not None  # offered only with a store
        if not await anyio.to_thread.run_sync(mark_archived, self.store, session_id, archived):
            raise ResourceNotFound(f"Session not found: {session_id[:100]}", {"sessionId": session_id[:100]})

    async def session_status(self, params: SessionParams) -> dict[str, Any]:
        """``session/status`` (unstable), changing nothing: ``open`` for a session open here, what it does in
        ``_meta.refagent.turn`` (:attr:`Session.activity`: the schema's status says only whether it is in
        memory); ``saved`` for one that can be loaded; ``-32002`` (its id in ``data``) for neither."""
        session_id = params.session_id
        if (session := self.sessions.get(session_id)) is not None:
            return {"status": "open", "_meta": {"refagent": {"turn": session.activity}}}
        if self.store is not None and await anyio.to_thread.run_sync(self.store.exists, session_id):
            return {"status": "saved"}
        raise ResourceNotFound(f"Session not found: {session_id[:100]}", {"sessionId": session_id[:100]})

    async def set_title(self, params: SetTitleParams) -> dict[str, Any]:
        """``session/set_title`` (unstable): the title a user chose, on one line and at most
        :data:`MAX_TITLE_CHARS`, for an open session or a saved one (``-32002`` for neither; ``-32602`` for a
        title empty once normalised). Answered with the title stored, after it is; an open session also
        says it in a ``session_info_update``. The agent never replaces it with a title of its own (it names
        only a session that has none)."""
        title = one_line(params.title)
        if not title:
            raise InvalidParams("Invalid params: the title is empty")
        if len(title) > MAX_TITLE_CHARS:
            title = title[: MAX_TITLE_CHARS - 1].rstrip() + "…"
        session = self.sessions.get(params.session_id)
        store = self.store
        assert store is not None  # offered only with a store
        if session is not None:
            await session.wait_settled()  # its announcements first
            session.title = title
            session.save_state()
            await anyio.to_thread.run_sync(functools.partial(store.touch, session.id, title=title))
            await session.send_update(updates.session_info(title=title))
            return {"title": title}
        stored = await anyio.to_thread.run_sync(load_session, store, params.session_id)
        if stored is None:
            raise ResourceNotFound(f"Session not found: {params.session_id[:100]}")
        await anyio.to_thread.run_sync(retitle, store, stored, title)
        return {"title": title}

    async def set_mode(self, params: SetModeParams) -> dict[str, Any]:
        """``session/set_mode`` (its updates follow the session's announcements)."""
        session = self._session(params.session_id)
        await session.wait_settled()
        await session.set_mode(params.mode_id)
        return {}

    async def set_config_option(self, params: SetConfigOptionParams) -> dict[str, Any]:
        """``session/set_config_option``: the complete option list after the change."""
        session = self._session(params.session_id)
        await session.wait_settled()  # what it says follows the session's announcements
        return {"configOptions": await session.set_config_option(params.config_id, params.value)}

    async def prompt(self, params: PromptParams) -> dict[str, Any]:
        """``session/prompt``: :meth:`refagent.session.prompting.Prompting.prompt` (the stop reason, and a
        turn's failure in ``_meta``)."""
        session = self._session(params.session_id)
        return await self._prompting().prompt(session, params.prompt, message_id=params.message_id)

    async def steer(self, params: PromptParams) -> dict[str, Any]:
        """``_session/steering``: :meth:`refagent.session.prompting.Prompting.steer` (the steer's outcome)."""
        session = self._session(params.session_id)
        return await self._prompting().steer(session, params.prompt)

    def _prompting(self) -> Prompting:
        """What answers prompts with the settings as they are now: made once, and again after they change."""
        if self._prompts is None:
            # here: prompting loads with the workspace, after the first session/new answer (loaded by now)
            from refagent.config.limits import SubagentLimits
            from refagent.session.prompting import Prompting

            limits = self.settings.subagents or SubagentLimits()
            self._prompts = Prompting(self.models, self.settings.max_requests, self.store, self.settings.retry, limits)
        return self._prompts

    def cancel(self, params: SessionParams) -> None:
        """``session/cancel`` (a notification): for an unknown or idle session, nothing to do."""
        session = self.sessions.get(params.session_id)
        if session is not None:
            session.cancel()

    def _session(self, session_id: str) -> Session:
        """The open session ``session_id``; ``-32002`` if there is none."""
        session = self.sessions.get(session_id)
        if session is None:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        return session

    async def _close_and_wait(self, session: Session) -> None:
        """Close ``session`` and wait until its turn has ended and written its last records."""
        session.close()
        self.sessions.pop(session.id, None)
        with anyio.move_on_after(CLOSE_WAIT_SECONDS):
            async with session.turn_lock:
                pass
            if session.jobs is not None:  # killed by close(): wait until they are gone
                await session.jobs.ended()
        if session.workspace is not None:  # its commands have ended: their temporary files can go
            session.workspace.sandbox.close()  # by descriptor, even if one outlived the wait
