"""An in-memory editor: a fake ACP client wired to a real :class:`~refagent.server.agent.Agent` over anyio
memory streams, with no processes and no pipes.

The client side is an ordinary :class:`~refagent.acp.connection.Connection` too (the protocol is
symmetric), with :class:`FakeClient` as its handler. :class:`FakeClient` answers the agent's requests the
way an editor would: permission by a policy, ``fs/*`` from a dict of files (or an error), ``terminal/*``
by running nothing (tests that need real terminals pass their own handler). Every line either side
sends is recorded in a :class:`~refagent.testing.transcript.Transcript`.

Usage::

    async with connect(Settings(...), check=validate) as editor:
        await editor.initialize()
        session_id = await editor.new_session("/work/project")
        result = await editor.prompt(session_id, "hello")

A session is answered for before its workspace is built (:mod:`refagent.session.manager`):
:meth:`Editor.new_session` returns once it is set up and its announcements have reached the editor
(:meth:`Editor.settled`); a test that sends ``session/new`` itself and then looks at the agent's session
(``editor.agent.sessions[sid].workspace``) or at what it announced awaits :meth:`Editor.settled` first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from refagent.acp.connection import Connection
from refagent.acp.errors import MethodNotFound, RequestError
from refagent.server.agent import Agent, Settings
from refagent.server.handshake import Started
from refagent.testing.transcript import Check, Direction, Transcript

PermissionPolicy = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
ElicitationPolicy = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Answers an ``elicitation/create`` (its params) with ``{"action": ...}``, or raises RequestError."""


async def allow_once(params: dict[str, Any]) -> dict[str, Any]:
    """Select the first ``allow_once`` option (or the first option)."""
    options = params.get("options", [])
    chosen = next((o for o in options if o.get("kind") == "allow_once"), options[0] if options else None)
    if chosen is None:
        return {"outcome": {"outcome": "cancelled"}}
    return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}


def select(kind: str) -> PermissionPolicy:
    """A policy that always picks the option of ``kind`` (``allow_always``, ``reject_once``, ...)."""

    async def policy(params: dict[str, Any]) -> dict[str, Any]:
        for option in params.get("options", []):
            if option.get("kind") == kind:
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        raise AssertionError(f"no {kind} option offered: {params.get('options')}")

    return policy


@dataclass
class FakeClient:
    """The editor's side of the connection: answers requests, collects notifications."""

    permission: PermissionPolicy = allow_once
    files: dict[str, str] = field(default_factory=dict)
    """The editor's buffers, for ``fs/*`` (when advertised)."""
    save: bool = False
    """Also save written buffers to disk, as editors such as Zed do."""
    fs_error: RequestError | None = None
    """If set, every ``fs/*`` request fails with it (like acpx refusing writes)."""
    extra: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = field(default_factory=dict)
    """More request handlers by method (e.g. ``terminal/*``)."""
    permission_requests: list[dict[str, Any]] = field(default_factory=list)
    elicitation: ElicitationPolicy | None = None
    """Answers ``elicitation/create`` (advertise ``elicitation: {form: {}}`` for the agent to send it);
    None: the method is not found."""
    elicitation_requests: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method in self.extra:
            return await self.extra[method](params)
        if method == "session/request_permission":
            self.permission_requests.append(params)
            return await self.permission(params)
        if method == "elicitation/create" and self.elicitation is not None:
            self.elicitation_requests.append(params)
            return await self.elicitation(params)
        if method.startswith("fs/") and self.fs_error is not None:
            raise self.fs_error
        if method == "fs/read_text_file":
            path = params["path"]
            if path not in self.files:
                raise RequestError(f"File not found: {path}", code=-32002)
            lines = self.files[path].splitlines(keepends=True)
            start = max(1, params.get("line") or 1) - 1
            limit = params.get("limit")
            chosen = lines[start : start + limit] if limit else lines[start:]
            return {"content": "".join(chosen)}
        if method == "fs/write_text_file":
            self.files[params["path"]] = params["content"]
            if self.save:
                await anyio.Path(params["path"]).write_text(params["content"], encoding="utf-8")
            return None  # like Toad: null instead of {}
        raise MethodNotFound(f"Method not found: {method}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append({"method": method, "params": params})


class Editor:
    """Drives the agent like an editor would. Methods return results or raise :class:`RequestError`."""

    def __init__(
        self,
        connection: Connection,
        client: FakeClient,
        transcript: Transcript,
        agent: Agent,
        agent_connection: Connection | None = None,
    ) -> None:
        self.connection = connection
        self.client = client
        self.transcript = transcript
        self.agent = agent
        self.agent_connection = agent_connection
        """The agent's side of the connection (None: not known, and :meth:`settled` does not flush it)."""

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        return await self.connection.request(method, params)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.connection.notify(method, params)

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"protocolVersion": 1, "clientInfo": {"name": "fake-editor", "version": "0"}}
        if capabilities is not None:
            params["clientCapabilities"] = capabilities
        result: dict[str, Any] = await self.request("initialize", params)
        return result

    async def new_session(self, cwd: str, **extra: Any) -> str:
        """``session/new``; returns its id once the session is set up (:meth:`settled`)."""
        result = await self.request("session/new", {"cwd": cwd, "mcpServers": [], **extra})
        session_id: str = result["sessionId"]
        await self.settled(session_id)
        return session_id

    async def settled(self, session_id: str) -> None:
        """Wait until the agent has done the work after the response that opened ``session_id`` (its
        workspace built: :meth:`refagent.session.state.Session.ready`) and what it sent meanwhile (the
        available commands, the announcements) has been written to the editor, so the transcript has it.
        A workspace that could not be built is not an error here (the session's prompts fail with it)."""
        session = self.agent.sessions.get(session_id)
        if session is not None:
            with suppress(RequestError):  # a workspace that could not be built: its prompts say so
                await session.ready()
        if self.agent_connection is not None:
            await self.agent_connection.flush()

    async def prompt(self, session_id: str, *blocks: str | dict[str, Any]) -> dict[str, Any]:
        prompt = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
        result: dict[str, Any] = await self.request("session/prompt", {"sessionId": session_id, "prompt": prompt})
        return result

    async def cancel(self, session_id: str) -> None:
        await self.notify("session/cancel", {"sessionId": session_id})

    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return self.transcript.updates(session_id)

    def text(self, session_id: str | None = None, kind: str = "agent_message_chunk") -> str:
        """All text the agent streamed as ``kind`` chunks."""
        return "".join(u["content"].get("text", "") for u in self.updates(session_id) if u["sessionUpdate"] == kind)


def _tap(
    transcript: Transcript, sender: Direction, send: MemoryObjectSendStream[bytes]
) -> Callable[[bytes], Awaitable[None]]:
    async def write(data: bytes) -> None:
        for line in data.splitlines():
            transcript.record(sender, line)
            await send.send(line)

    return write


async def _lines(receive: MemoryObjectReceiveStream[bytes]) -> AsyncIterator[bytes]:
    async with receive:
        async for line in receive:
            yield line


@asynccontextmanager
async def connect(
    settings: Settings | None = None,
    *,
    client: FakeClient | None = None,
    check: Check | None = None,
    started: Started | None = None,
) -> AsyncIterator[Editor]:
    """Start an agent and a fake editor connected in memory; both stop when the block exits. ``started``:
    what start-up answered before the loop (:func:`refagent.server.boot.answer_early`), which the agent
    takes over as it does in a process."""
    transcript = Transcript(check=check)
    client = client or FakeClient()
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](1024)
    to_client_send, to_client_receive = anyio.create_memory_object_stream[bytes](1024)
    agent_connection = Connection(_lines(to_agent_receive), _tap(transcript, "agent", to_client_send))
    client_connection = Connection(_lines(to_client_receive), _tap(transcript, "client", to_agent_send))
    async with Agent(agent_connection, settings, started) as agent, anyio.create_task_group() as tg:
        tg.start_soon(agent_connection.serve, agent)
        tg.start_soon(client_connection.serve, client)
        try:
            yield Editor(client_connection, client, transcript, agent, agent_connection)
        finally:
            tg.cancel_scope.cancel()
