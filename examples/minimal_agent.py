"""The smallest complete ACP agent, to read line by line: built on ``refagent.acp``, with no model.

    .venv/bin/python examples/minimal_agent.py   # then point an ACP client at this command; Ctrl-D ends it

(``.venv`` is the checkout's environment, which ``make demo`` or ``make test`` makes: the example imports
``refagent.acp``, and that needs ``anyio``. Any Python that has refagent installed will do.)

Any client that starts an agent will do: an editor (``examples/editors/``, this command in place of refagent's,
with the venv's python by absolute path), or ``tests/js/sdk-client.mjs`` (the official TypeScript SDK).

Its "model" is fixed: whatever you prompt, it proposes to write the prompt's text into ``hello.txt`` in the
session's directory, shows the diff, asks your permission, and writes the file only if you allow. That is a whole
ACP turn: a streamed message, a tool call, a permission request, the call's outcome, a stop reason.

ACP is JSON-RPC 2.0, one object per line, on stdin and stdout (the log goes to stderr). ``Connection`` reads the
lines and calls ``handle_request`` (it returns the result or raises a ``RequestError``) or ``handle_notification``,
each in its own task; meanwhile a prompt sends its own requests to the client, and ``session/cancel`` ends it.

Read next: ``refagent/server/agent.py`` (the same dispatch, for real), ``refagent/session/`` (turns, tools,
permissions, cancellation) and ``refagent/server/stdio.py`` (a stricter stdio transport).
"""

from __future__ import annotations

import logging
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio

from refagent.acp import PROTOCOL_VERSION, updates
from refagent.acp import params as p
from refagent.acp.connection import Connection
from refagent.acp.errors import MethodNotFound, RequestError, ResourceNotFound
from refagent.acp.types import DiffContent, PermissionOption, StopReason

FILE = "hello.txt"
OPTIONS: list[PermissionOption] = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


class MinimalAgent:
    """The connection's handler: what to answer, and what to do meanwhile."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.sessions: dict[str, Path] = {}  # session id -> its working directory
        self.turns: dict[str, anyio.CancelScope] = {}  # session id -> its running prompt

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {"loadSession": False},  # text prompts only, no MCP: the defaults
                "agentInfo": {"name": "minimal-agent", "version": "1.0"},
                "authMethods": [],
            }
        if method == "session/new":
            session_id = f"sess_{uuid.uuid4().hex[:16]}"
            self.sessions[session_id] = Path(p.absolute_path(params, "cwd"))
            return {"sessionId": session_id}
        if method == "session/prompt":
            return {"stopReason": await self.prompt(params)}
        raise MethodNotFound(f"Method not found: {method}")  # -32601 (the handler must raise it itself)

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel" and (scope := self.turns.get(params.get("sessionId", ""))):
            scope.cancel()  # other notifications are ignored, as ACP says

    async def prompt(self, params: dict[str, Any]) -> StopReason:
        session_id = p.required(params, "sessionId", str)
        if session_id not in self.sessions:
            raise ResourceNotFound(f"Unknown session {session_id!r}")
        blocks = p.required(params, "prompt", list)
        text = " ".join(b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        with anyio.CancelScope() as self.turns[session_id]:  # session/cancel cancels this scope
            try:
                return await self.turn(session_id, text)
            finally:
                del self.turns[session_id]
        return "cancelled"  # reached only if the scope was cancelled; a pending request was withdrawn

    async def turn(self, session_id: str, text: str) -> StopReason:
        async def send(update: dict[str, Any]) -> None:
            await self.connection.notify("session/update", {"sessionId": session_id, "update": update})

        path, title = self.sessions[session_id] / FILE, f"Write {FILE}"
        call_id = f"call_{uuid.uuid4().hex[:8]}"  # unique within the session
        await send(updates.agent_message_chunk(updates.text(f"I will write your prompt into {FILE}.\n")))
        old = path.read_text(encoding="utf-8") if path.exists() else None  # None: a new file
        diff: DiffContent = {"type": "diff", "path": str(path), "oldText": old, "newText": text + "\n"}
        await send(updates.tool_call(call_id, title, "edit", locations=[{"path": str(path)}], content=[diff]))
        try:
            tool_call = {"toolCallId": call_id, "title": title}  # the client knows the rest from tool_call
            answer = await self.connection.request(
                "session/request_permission", {"sessionId": session_id, "toolCall": tool_call, "options": OPTIONS}
            )
        except RequestError as exc:  # the client answered with an error: count it as a "no"
            logging.warning("permission request failed: %s", exc.message)
            answer = {}
        if not isinstance(answer, dict):  # a buggy client's `null` (or worse) is no answer either: a "no"
            answer = {}
        outcome = p.optional(answer, "outcome", dict, {})
        if outcome.get("outcome") == "cancelled":  # the client cancelled the turn while we were asking
            return "cancelled"
        allowed = outcome.get("optionId") == "allow"
        if allowed:  # a real agent may write through the client instead (fs/write_text_file)
            path.write_text(diff["newText"], encoding="utf-8")
        await send(updates.tool_call_update(call_id, status="completed" if allowed else "failed"))
        done = f"Done: {FILE} is written." if allowed else f"OK, I left {FILE} alone."
        await send(updates.agent_message_chunk(updates.text(done)))
        return "end_turn"


async def serve_stdio() -> None:
    stdin, stdout = anyio.wrap_file(sys.stdin.buffer), anyio.wrap_file(sys.stdout.buffer)
    sys.stdout = sys.stderr  # stdout is the protocol's now: a stray print() goes to the log instead

    async def write(data: bytes) -> None:
        await stdout.write(data)
        await stdout.flush()

    connection = Connection(stdin, write)
    await connection.serve(MinimalAgent(connection))  # returns at EOF on stdin: the client is gone


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="minimal-agent: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it at once (a reader thread would hold it)
    anyio.run(serve_stdio)
