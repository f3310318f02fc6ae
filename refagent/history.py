"""Recording what a session shows, and replaying it for ``session/load``.

:class:`Recorder` sits between a session and its client: every update goes to the client at once and,
if it belongs to the visible history, to the session's record file. Message chunks are merged while a
message streams (one record per message rather than one per token) and written when the message ends,
the turn ends, or the buffer grows large; tool calls and plans are written as they happen.

:func:`replay` turns the recorded updates into what a client needs to redraw the thread: each message as
one chunk with its original ``messageId``, each tool call once in its final state (its updates folded
in), and the plans in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from refagent.store import SessionLog

VISIBLE = frozenset(
    {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_FLUSH_CHARS = 64 * 1024


class Recorder:
    """Sends updates to the client and records the visible ones in ``log`` (if any)."""

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]], log: SessionLog | None) -> None:
        self._send = send
        self.log = log
        self._pending: dict[str, Any] | None = None

    async def __call__(self, update: dict[str, Any]) -> None:
        await self._send(update)
        self.record(update)

    def record(self, update: dict[str, Any]) -> None:
        """Record without sending (the user's own prompt: the client already shows it)."""
        if self.log is None or update.get("sessionUpdate") not in VISIBLE:
            return
        if _mergeable(self._pending, update):
            assert self._pending is not None
            self._pending["content"]["text"] += update["content"]["text"]
            if len(self._pending["content"]["text"]) >= _FLUSH_CHARS:
                self.flush()
            return
        self.flush()
        if update["sessionUpdate"] in _CHUNKS and update.get("content", {}).get("type") == "text":
            self._pending = {**update, "content": dict(update["content"])}
        else:
            self.log.append({"kind": "update", "update": update})

    def flush(self) -> None:
        if self._pending is not None and self.log is not None:
            self.log.append({"kind": "update", "update": self._pending})
        self._pending = None


def _mergeable(pending: dict[str, Any] | None, update: dict[str, Any]) -> bool:
    return (
        pending is not None
        and update.get("sessionUpdate") == pending["sessionUpdate"]
        and update.get("messageId") is not None
        and update.get("messageId") == pending.get("messageId")
        and update.get("content", {}).get("type") == "text"
    )


def replay(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The updates to redraw a thread: messages merged per ``messageId``, tool calls in final state."""
    out: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for update in updates:
        kind = update.get("sessionUpdate")
        if kind in _CHUNKS:
            last = out[-1] if out else None
            if _mergeable(last, update):
                assert last is not None
                last["content"] = {**last["content"], "text": last["content"]["text"] + update["content"]["text"]}
            else:
                out.append(dict(update))
        elif kind == "tool_call":
            call = dict(update)
            calls[call["toolCallId"]] = call
            out.append(call)
        elif kind == "tool_call_update":
            target = calls.get(update.get("toolCallId", ""))
            if target is None:  # an update without its announcement: show what there is
                call = {**update, "sessionUpdate": "tool_call", "title": update.get("title") or "Tool call"}
                calls[call["toolCallId"]] = call
                out.append(call)
                continue
            for key, value in update.items():
                if key not in ("sessionUpdate", "toolCallId") and value is not None:
                    target[key] = value
        elif kind == "plan":
            out.append(dict(update))
    return out


class Conversation(list[dict[str, Any]]):
    """The model-facing conversation. Each message appended is recorded in ``log``; :meth:`replace`
    records the whole new conversation (compaction, undo)."""

    def __init__(self, messages: list[dict[str, Any]] | None = None, log: SessionLog | None = None) -> None:
        super().__init__(messages or [])
        self.log = log

    def append(self, message: dict[str, Any]) -> None:
        super().append(message)
        if self.log is not None:
            self.log.append({"kind": "message", "message": message})

    def replace(self, messages: list[dict[str, Any]]) -> None:
        self[:] = messages
        if self.log is not None:
            self.log.append({"kind": "history", "messages": messages})
