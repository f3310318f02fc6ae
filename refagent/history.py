"""Recording what a session shows, and replaying it for ``session/load``.

:class:`Recorder` sits between a session and its client: every update goes to the client at once and,
if it belongs to the visible history, to the session's record file. Message chunks are merged while a
message streams (one record per message rather than one per token) and written when the message ends,
the turn ends, the buffer grows large, or it has waited :data:`FLUSH_SECONDS`; tool calls and plans are
written as they happen.

:func:`replay` turns the recorded updates into what a client needs to redraw the thread: each message as
one chunk with its original ``messageId``, each tool call once in its final state (its updates folded
in), and the plans in order.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from refagent.store import SessionLog

VISIBLE = frozenset(
    {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_FLUSH_CHARS = 64 * 1024
FLUSH_SECONDS = 0.5
"""The longest a streaming message's text waits in memory before it is written."""


class Recorder:
    """Sends updates to the client and records the visible ones in ``log`` (if any).

    ``clock`` (seconds, monotonic) bounds how long streamed text waits in memory: a message still
    streaming after :data:`FLUSH_SECONDS` is written so far, so a crash loses at most that much of it.
    """

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        log: SessionLog | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.log = log
        self._clock = clock
        self._pending: dict[str, Any] | None = None
        """The first chunk of the message being gathered; its text is ``_parts`` joined."""
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0

    async def __call__(self, update: dict[str, Any]) -> None:
        await self._send(update)
        self.record(update)

    def record(self, update: dict[str, Any]) -> None:
        """Record without sending (the user's own prompt: the client already shows it)."""
        if self.log is None or update.get("sessionUpdate") not in VISIBLE:
            return
        if _mergeable(self._pending, update):
            text: str = update["content"]["text"]
            self._parts.append(text)
            self._size += len(text)
            if self._size >= _FLUSH_CHARS or self._clock() - self._since >= FLUSH_SECONDS:
                self.flush()  # the rest of the message goes in records of its own; replay joins them
            return
        self.flush()
        if update["sessionUpdate"] in _CHUNKS and _is_text(update):
            self._pending = update
            self._parts = [update["content"]["text"]]
            self._size = len(self._parts[0])
            self._since = self._clock()
        else:
            self.log.append({"kind": "update", "update": update})

    def flush(self) -> None:
        if self._pending is not None and self.log is not None:
            content = {**self._pending["content"], "text": "".join(self._parts)}
            self.log.append({"kind": "update", "update": {**self._pending, "content": content}})
        self._pending = None
        self._parts = []
        self._size = 0


def _mergeable(pending: dict[str, Any] | None, update: dict[str, Any]) -> bool:
    """Text that continues ``pending``'s message. The blocks of one message share its id, but only text
    joins text: a link or an image between two texts stays a block of its own."""
    return (
        pending is not None
        and update.get("sessionUpdate") == pending.get("sessionUpdate")
        and update.get("messageId") is not None
        and update.get("messageId") == pending.get("messageId")
        and _is_text(update)
        and _is_text(pending)
    )


def _is_text(update: dict[str, Any]) -> bool:
    content = update.get("content")
    return isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str)


def _showable(update: Any) -> bool:
    """Whether a recorded update can be replayed (records are read from disk: any of them can be odd)."""
    if not isinstance(update, dict):
        return False
    kind = update.get("sessionUpdate")
    if kind in _CHUNKS:
        content = update.get("content")
        return (
            isinstance(content, dict)
            and isinstance(content.get("type"), str)
            and (content["type"] != "text" or isinstance(content.get("text"), str))
        )
    if kind in ("tool_call", "tool_call_update"):
        return isinstance(update.get("toolCallId"), str)
    return kind == "plan" and isinstance(update.get("entries"), list)


def replay(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The updates to redraw a thread: messages merged per ``messageId``, tool calls in final state."""
    out: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for update in updates:
        if not _showable(update):
            continue
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
            target = calls.get(update["toolCallId"])
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
