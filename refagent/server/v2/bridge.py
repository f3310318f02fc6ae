"""ACP v2 on the wire, the v1 machinery behind it: :class:`V2Bridge` answers a v2 client's requests by
translating them for :class:`~refagent.server.agent.Agent`, and :class:`V2Peer` stands in for the client,
translating what the sessions send it (:mod:`refagent.server.v2.translate`).

The one change of flow is the prompt's. A v2 ``session/prompt`` is answered at once with the user message's
id; the turn runs in the agent's background task group, and the session says where it stands with
``state_update``: ``running`` when its foreground work starts, ``requires_action`` while a permission
question waits on the user, ``idle`` with the stop reason when the last prompt queued in it has ended (an
error that ended it, as the ``error`` stop reason). The user's message is echoed as ``user_message`` under
that id, and recorded under it, so a replay shows it so.

``session/resume`` with ``replayFrom: {type: "start"}`` is v1's ``session/load`` (the history replayed,
each message whole); without, v1's ``session/resume``. Either way the session is set up and says its
state before the response. ``auth/login`` and ``auth/logout`` are ``authenticate`` and ``logout``;
``session/fork``, ``session/set_title`` and ``providers/*`` are v1's. ``tool_call/cancel`` and
``terminal/cancel`` reach what v1 has no word for (:mod:`refagent.server.v2.items`). The client has no
file system or terminals in v2: the sessions use the sandbox's own.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from refagent.acp import params as p
from refagent.acp import updates
from refagent.acp.connection import Connection, Peer, Reply
from refagent.acp.errors import InvalidParams, MethodNotFound, RequestError, ResourceNotFound
from refagent.acp.requests import PromptParams
from refagent.ids import new_id
from refagent.server.v2 import translate
from refagent.server.v2.items import SessionItems

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from refagent.session.state import Session

log = logging.getLogger(__name__)

Params = dict[str, Any]


class V1Agent(Protocol):
    """What the bridge needs of :class:`refagent.server.agent.Agent`: its v1 methods, its client and store."""

    peer: Peer

    @property
    def store(self) -> object | None: ...

    @property
    def background_tasks(self) -> TaskGroup | None: ...

    @property
    def sessions(self) -> dict[str, Session]: ...

    async def handle_v1_request(self, method: str, params: Params) -> Any: ...
    async def handle_notification(self, method: str, params: Params) -> None: ...
    async def initialize(self, params: Params) -> Reply: ...
    async def authenticate(self, params: Params) -> Reply: ...
    async def logout(self, params: Params) -> Reply: ...
    async def new_session(self, params: Params) -> Reply: ...
    async def load_session(self, params: Params) -> Reply: ...
    async def resume_session(self, params: Params) -> Reply: ...
    async def fork_session(self, params: Params) -> Reply: ...
    async def set_title(self, params: Params) -> dict[str, Any]: ...
    async def archive_session(self, params: Params) -> dict[str, Any]: ...
    async def unarchive_session(self, params: Params) -> dict[str, Any]: ...
    async def session_status(self, params: Params) -> dict[str, Any]: ...
    async def auth_status(self, params: Params) -> dict[str, Any]: ...
    async def list_sessions(self, params: Params) -> dict[str, Any]: ...
    async def close_session(self, params: Params) -> dict[str, Any]: ...
    async def delete_session(self, params: Params) -> dict[str, Any]: ...
    async def set_config_option(self, params: Params) -> dict[str, Any]: ...
    async def prompt(self, params: Params) -> dict[str, Any]: ...


class V2Peer:
    """The client, as the v1 machinery calls it, spoken to in v2."""

    def __init__(self, connection: Peer, bridge: V2Bridge) -> None:
        self.connection = connection
        self.bridge = bridge

    async def notify(self, method: str, params: Params) -> None:
        if method == "session/update":
            session_id = params["sessionId"]
            if params["update"].get("sessionUpdate") in ("tool_call", "tool_call_update"):
                await self.bridge.tool_call_update(session_id, params["update"])
                return
            update = translate.update(session_id, params["update"], self.bridge.kinds(session_id))
            if update is not None:
                await self.connection.notify(method, {"sessionId": session_id, "update": update})
            return
        await self.connection.notify(method, params)

    async def request(self, method: str, params: Params) -> Any:
        """A question to the user (a permission, or a form: ``elicitation/create``, whose shape v1 and v2
        share) holds the session's turn: ``requires_action`` while it waits, ``running`` after (a
        subagent's session says its own state, in the ``subagent_update`` on its parent)."""
        session_id = params.get("sessionId")
        if method not in ("session/request_permission", "elicitation/create") or not isinstance(session_id, str):
            return await self.connection.request(method, params)
        if method == "session/request_permission":
            params = translate.permission_request(params)
        if session_id not in self.bridge.agent.sessions:  # a subagent's: its subagent_update says its state
            return await self.connection.request(method, params)
        await self.bridge.state(session_id, "requires_action")
        try:
            return await self.connection.request(method, params)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.bridge.state(session_id, "running")

    async def send_lines(self, data: bytes) -> None:
        """Lines the agent wrote itself (a history replay, all of one session): each update translated, and
        the messages sent whole (:func:`translate.replayed`)."""
        session_id = ""
        shown: list[dict[str, Any]] = []
        for line in data.splitlines():
            params = json.loads(line)["params"]  # a replay file holds session/update notifications only
            session_id = params["sessionId"]
            update = translate.update(session_id, params["update"], self.bridge.kinds(session_id))
            if update is not None:
                shown.append(update)
        await self.connection.send_lines(updates.lines(session_id, translate.replayed(shown)))


class V2Bridge:
    """Serves a client that negotiated v2 through ``agent`` (which it gives a :class:`V2Peer`)."""

    def __init__(self, agent: V1Agent) -> None:
        self.agent = agent
        self.connection = agent.peer
        if isinstance(self.connection, Connection):
            self.connection.batches = True  # v2 has JSON-RPC batches (v1 none)
        agent.peer = V2Peer(agent.peer, self)
        self._items: dict[str, SessionItems] = {}
        self._running: dict[str, int] = {}
        """Prompts accepted and not ended, per session (a prompt sent during a turn waits for it)."""
        self._states: dict[str, str] = {}
        """The state each session last reported."""

    def items(self, session_id: str) -> SessionItems:
        """What is kept of the session's live items (:mod:`refagent.server.v2.items`)."""
        return self._items.setdefault(session_id, SessionItems())

    def kinds(self, session_id: str) -> dict[str, str]:
        """The kinds of the session's tool calls so far, by id (for the diffs of deletions)."""
        return self.items(session_id).kinds

    async def state(self, session_id: str, state: str | None = None, **fields: Any) -> None:
        """Report the session's ``state`` (None: the one it last reported, again: its background work
        changed), with its background work: every state update lists it, ``[]`` when there is none."""
        state = state or self._states.get(session_id, "idle")
        self._states[session_id] = state
        background = self.items(session_id).background()
        update = {"sessionUpdate": "state_update", "state": state, **fields, "background": background}
        await self.notify(session_id, update)

    async def notify(self, session_id: str, update: dict[str, Any]) -> None:
        await self.connection.notify("session/update", {"sessionId": session_id, "update": update})

    async def tool_call_update(self, session_id: str, v1: dict[str, Any]) -> None:
        """Send a v1 ``tool_call`` or ``tool_call_update`` as v2's, with what v2 adds (module docstring of
        :mod:`refagent.server.v2.items`): whether the call may be cancelled alone, and the background
        command it started as a terminal."""
        session = self.agent.sessions.get(session_id)
        workspace = session.workspace if session is not None else None

        async def send(update: dict[str, Any]) -> None:
            await self.notify(session_id, update)

        await self.items(session_id).show_call(v1, workspace, send, lambda: self.state(session_id))

    # -- requests ------------------------------------------------------------------------------------

    async def handle_request(self, method: str, params: Params) -> Any:
        handler = _REQUESTS.get(method)
        if handler is None and (method.startswith("_") or method in _SAME):
            return await self.agent.handle_v1_request(method, params)
        if handler is None:
            raise MethodNotFound(f"Method not found: {method[:100]}")
        return await handler(self, params)

    async def handle_notification(self, method: str, params: Params) -> None:
        await self.agent.handle_notification(method, params)

    async def initialize(self, params: Params) -> Reply:
        p.required(params, "protocolVersion", int)
        info = p.optional(params, "info", dict, {})
        capabilities = p.optional(params, "capabilities", dict, {})
        v1 = {
            "protocolVersion": 1,
            "clientCapabilities": translate.client_capabilities(capabilities),
            "clientInfo": info,
        }
        reply = await self.agent.initialize(v1)
        return Reply(translate.initialize_result(reply.result, has_store=self.agent.store is not None), reply.after)

    async def login(self, params: Params) -> Reply:
        reply = await self.agent.authenticate({"methodId": p.required(params, "methodId", str)})
        return Reply({}, reply.after)

    async def logout(self, params: Params) -> Reply:
        reply = await self.agent.logout({})
        return Reply({}, reply.after)

    async def new_session(self, params: Params) -> Reply:
        reply = await self.agent.new_session(self._opening(params))
        return Reply(translate.session_result(reply.result, with_id=True), reply.after)

    async def resume_session(self, params: Params) -> Reply:
        if self.agent.store is None:
            raise ResourceNotFound(f"Session not found: {str(params.get('sessionId'))[:100]}")
        replay = p.optional(params, "replayFrom", dict, None)
        if replay is not None and replay.get("type") != "start":
            raise InvalidParams(f"Invalid params: replayFrom {str(replay.get('type'))[:40]!r} (known: start)")
        v1 = self._opening(params)
        v1["sessionId"] = p.required(params, "sessionId", str)
        reply = await (self.agent.load_session(v1) if replay is not None else self.agent.resume_session(v1))
        session_id = v1["sessionId"]
        await self._settle(session_id, reply)
        for ended in self.items(session_id).reopened():
            await self.notify(session_id, ended)
        await self.state(session_id, "running" if self._running.get(session_id) else "idle")
        return Reply(translate.session_result(reply.result, with_id=False), _nothing)

    async def _settle(self, session_id: str, reply: Reply) -> None:
        """Before a resume is answered: the session set up and announced (its commands, its title), so that
        nothing of it follows the response but what happens in it (the draft: replay, then the current
        state, then the response). The rest of the after-work (warming the model client up) goes on
        after the response, in the agent's background tasks."""
        session = self.agent.sessions.get(session_id)
        tasks = self.agent.background_tasks
        if session is None or tasks is None:
            await reply.after()
            return
        after = reply.after

        async def rest() -> None:
            await after()

        tasks.start_soon(rest)
        await session.wait_settled()

    async def fork_session(self, params: Params) -> Reply:
        """``session/fork`` (unstable): v1's, its answer in v2's terms."""
        if self.agent.store is None:
            raise MethodNotFound("Method not found: session/fork")
        v1 = self._opening(params)
        v1["sessionId"] = p.required(params, "sessionId", str)
        reply = await self.agent.fork_session(v1)
        return Reply(translate.session_result(reply.result, with_id=True), reply.after)

    async def archive_session(self, params: Params) -> dict[str, Any]:
        """``session/archive`` (unstable): v1's, whose params and result are v2's."""
        if self.agent.store is None:
            raise MethodNotFound("Method not found: session/archive")
        return await self.agent.archive_session(params)

    async def unarchive_session(self, params: Params) -> dict[str, Any]:
        """``session/unarchive`` (unstable): v1's, whose params and result are v2's."""
        if self.agent.store is None:
            raise MethodNotFound("Method not found: session/unarchive")
        return await self.agent.unarchive_session(params)

    async def session_status(self, params: Params) -> dict[str, Any]:
        """``session/status`` (unstable): v1's, and for a session open here the foreground state v2 adds (the
        same snapshot as its last ``state_update``, with its background work); no side effect."""
        result = await self.agent.session_status(params)
        session_id = p.required(params, "sessionId", str)
        if result.get("status") == "open":
            state = self._states.get(session_id, "idle")
            result["state"] = {"state": state, "background": self.items(session_id).background()}
        return result

    async def auth_status(self, params: Params) -> dict[str, Any]:
        """``auth/status`` (unstable): v1's, whose params and result are v2's."""
        return await self.agent.auth_status(params)

    async def set_title(self, params: Params) -> dict[str, Any]:
        """``session/set_title`` (unstable): v1's, whose params and result are v2's."""
        if self.agent.store is None:
            raise MethodNotFound("Method not found: session/set_title")
        return await self.agent.set_title(params)

    def _opening(self, params: Params) -> Params:
        kept = ("cwd", "additionalDirectories", "systemPrompt", "_meta")
        v1 = {key: value for key, value in params.items() if key in kept}
        v1["mcpServers"] = translate.mcp_servers(p.optional(params, "mcpServers", list, []))
        return v1

    async def list_sessions(self, params: Params) -> Any:
        if self.agent.store is None:  # baseline in v2: with nothing saved, there is nothing to list
            return {"sessions": []}
        return await self.agent.list_sessions(params)

    async def close_session(self, params: Params) -> Any:
        return await self.agent.close_session(params)

    async def delete_session(self, params: Params) -> Any:
        if self.agent.store is None:
            raise MethodNotFound("Method not found: session/delete")
        return await self.agent.delete_session(params)

    async def set_config_option(self, params: Params) -> dict[str, Any]:
        kind = p.required(params, "type", str)
        if kind != "id":
            raise InvalidParams(f"Invalid params: this agent's options take values of type id, not {kind[:40]!r}")
        v1 = {
            "sessionId": p.required(params, "sessionId", str),
            "configId": p.required(params, "configId", str),
            "value": p.required(params, "value", str),
        }
        result = await self.agent.set_config_option(v1)
        return {"configOptions": translate.config_options(result["configOptions"])}

    async def cancel_tool_call(self, params: Params) -> dict[str, Any]:
        """``tool_call/cancel``: that call alone is cancelled (the turn goes on, and the model reads that the
        user cancelled it); its last update, ``cancelled``, confirms it. -32602 for a call that is not
        executing (unknown, ended, or a background command's: its terminal is what may be cancelled)."""
        session = self._session(params)
        call_id = p.required(params, "toolCallId", str)
        workspace = session.workspace
        if workspace is None or call_id not in workspace.runner.calls:
            raise InvalidParams(f"Invalid params: no tool call {call_id[:100]!r} is running to be cancelled")
        self.items(session.id).cancelled.add(call_id)
        workspace.runner.calls.cancel(call_id)
        return {}

    async def cancel_terminal(self, params: Params) -> dict[str, Any]:
        """``terminal/cancel``: the background command is stopped (and everything it started), as ``/stop``
        does; the ``terminal_update`` with its exit status confirms it. -32602 for a terminal that is not
        running."""
        session = self._session(params)
        terminal_id = p.required(params, "terminalId", str)
        terminal = self.items(session.id).terminals.get(terminal_id)
        jobs = session.jobs
        if terminal is None or terminal.exited or not terminal.entry.running or jobs is None:
            raise InvalidParams(f"Invalid params: no terminal {terminal_id[:100]!r} is running to be cancelled")
        tasks = self.agent.background_tasks
        if tasks is None:
            await jobs.stop(terminal.entry, "user")
        else:
            tasks.start_soon(jobs.stop, terminal.entry, "user")
        return {}

    def _session(self, params: Params) -> Session:
        session_id = p.required(params, "sessionId", str)
        session = self.agent.sessions.get(session_id)
        if session is None:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        return session

    async def prompt(self, params: Params) -> Reply:
        """Accept the prompt (its message id at once), then run it in the background (module docstring)."""
        session_id = p.required(params, "sessionId", str)
        blocks = p.required(params, "prompt", list)
        if not blocks:
            raise InvalidParams("Invalid params: prompt is empty")
        if session_id not in self.agent.sessions:
            raise ResourceNotFound(f"Session not found: {session_id[:100]}")
        message_id = params.get("messageId") if isinstance(params.get("messageId"), str) else new_id("user")
        v1 = {"sessionId": session_id, "prompt": blocks, "messageId": message_id}

        PromptParams.parse(v1)  # a prompt that cannot be taken is refused (-32602), not accepted then failed

        async def run() -> None:
            self._running[session_id] = self._running.get(session_id, 0) + 1
            ended: dict[str, Any] = {"stopReason": "cancelled"}
            try:
                if self._running[session_id] == 1:
                    await self.state(session_id, "running")
                echo = {"sessionUpdate": "user_message", "messageId": message_id, "content": blocks}
                await self.connection.notify("session/update", {"sessionId": session_id, "update": echo})
                result = await self.agent.prompt(v1)
                ended = {"stopReason": result["stopReason"]}
            except RequestError as exc:
                ended = {"stopReason": "error", "error": {"code": exc.code, "message": exc.message}}
            except Exception as exc:  # a bug must not leave the client waiting for idle
                log.exception("a v2 prompt failed")
                ended = {"stopReason": "error", "error": {"code": -32603, "message": f"Internal error: {exc}"}}
            finally:
                self._running[session_id] -= 1
                if not self._running[session_id]:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                        await self.state(session_id, "idle", **ended)

        async def start() -> None:
            tasks = self.agent.background_tasks
            if tasks is None:
                await run()
            else:
                tasks.start_soon(run)

        return Reply({"messageId": message_id}, start)


async def _nothing() -> None:
    """The after-work of a response that has none."""


_REQUESTS = {
    "initialize": V2Bridge.initialize,
    "auth/login": V2Bridge.login,
    "auth/logout": V2Bridge.logout,
    "session/new": V2Bridge.new_session,
    "session/resume": V2Bridge.resume_session,
    "session/fork": V2Bridge.fork_session,  # unstable
    "session/set_title": V2Bridge.set_title,  # unstable
    "session/archive": V2Bridge.archive_session,  # unstable
    "session/unarchive": V2Bridge.unarchive_session,  # unstable
    "session/status": V2Bridge.session_status,  # unstable
    "auth/status": V2Bridge.auth_status,  # unstable
    "session/list": V2Bridge.list_sessions,
    "session/close": V2Bridge.close_session,
    "session/delete": V2Bridge.delete_session,
    "session/set_config_option": V2Bridge.set_config_option,
    "session/prompt": V2Bridge.prompt,
    "tool_call/cancel": V2Bridge.cancel_tool_call,
    "terminal/cancel": V2Bridge.cancel_terminal,
}
"""Every v2 request method the agent answers by translating it (the rest: -32601, but for :data:`_SAME`
and extensions; docs/acp-v2.md lists which and why)."""

_SAME = frozenset({"providers/list", "providers/set", "providers/disable"})
"""Methods (unstable) whose params and results are the same in v1 and v2: v1's answer them. (So are
extensions, ``_session/steering``.)"""
