"""Recording what a session shows, and replaying it for ``session/load``.

:class:`Recorder` sits between a session and its client: every update goes to the client at once and,
if it belongs to the visible history, to the session's record file. Message chunks are merged while a
message streams (one record per message rather than one per token) and written when the message ends,
the turn ends, the buffer grows large, or it has waited :data:`FLUSH_SECONDS`; tool calls and plans are
written as they happen, except that the update that ends a tool call is written as the call's whole
state (its updates folded into its announcement), so that a replay need not fold them.

:func:`replay` turns the recorded updates into what a client needs to redraw the thread: each message as
one chunk with its original ``messageId``, each tool call once in its final state (its updates folded
in), and the plans in order. :func:`replay_records` does the same on the records of a file as
:mod:`refagent.store` reads them, parsing only what it must: what it returns is mostly the updates'
JSON as written, to be sent as it is.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from refagent.store import SessionLog, UpdateRecord

VISIBLE = frozenset(
    {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
)
_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_FLUSH_CHARS = 64 * 1024
_ENDED = frozenset({"completed", "failed"})
_OPEN_CALLS = 1024
"""Tool calls whose state the recorder keeps at most (calls never ended, by a cancelled turn, pile up)."""
_WHOLE_HEAD = b'{"sessionUpdate":"tool_call_update",'
_CALL_HEAD = b'{"sessionUpdate":"tool_call",'
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
        self._calls: dict[str, dict[str, Any]] = {}
        """The tool calls announced and not ended yet, their updates folded in."""

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
        elif update["sessionUpdate"] == "tool_call_update" and _call_id(update) in self._calls:
            call = self._calls[update["toolCallId"]]
            _fold_into(call, update)
            if update.get("status") in _ENDED:  # its whole state, which is what a replay shows
                del self._calls[update["toolCallId"]]
                whole = {"sessionUpdate": "tool_call_update"}
                whole.update((key, value) for key, value in call.items() if key != "sessionUpdate")
                self._write(whole, whole=True)
            else:
                self._write(update)
        else:
            if update["sessionUpdate"] == "tool_call" and _call_id(update) is not None:
                self._calls.pop(update["toolCallId"], None)
                self._calls[update["toolCallId"]] = dict(update)
                if len(self._calls) > _OPEN_CALLS:  # the oldest: its later updates are replayed by folding
                    del self._calls[next(iter(self._calls))]
            self._write(update)

    def flush(self) -> None:
        if self._pending is not None and self.log is not None:
            content = {**self._pending["content"], "text": "".join(self._parts)}
            self._write({**self._pending, "content": content})
        self._pending = None
        self._parts = []
        self._size = 0

    def _write(self, update: dict[str, Any], whole: bool = False) -> None:
        if self.log is None:
            return
        kind = update.get("sessionUpdate")
        ident = update.get("toolCallId") if kind in ("tool_call", "tool_call_update") else update.get("messageId")
        if _showable(update) and (ident is None or isinstance(ident, str)):
            self.log.append_update(update, key=ident, whole=whole)
        else:  # kept as it was, in the older form (replay skips what it cannot show)
            self.log.append({"kind": "update", "update": update})


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
            _fold_into(target, update)
        elif kind == "plan":
            out.append(dict(update))
    return out


def _call_id(update: dict[str, Any]) -> str | None:
    ident = update.get("toolCallId")
    return ident if isinstance(ident, str) else None


def _fold_into(call: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if key not in ("sessionUpdate", "toolCallId") and value is not None:
            call[key] = value


def replay_records(records: list[UpdateRecord]) -> list[bytes | memoryview | dict[str, Any]]:
    """:func:`replay` on the records of a file: the same updates, in the same order, each either its
    JSON as recorded (bytes or a view of them: ASCII, one line, a valid update, to be sent as it is) or
    a dict.

    Only what needs it is parsed: the parts of a message written in several records (joined), and tool
    calls whose whole state was not recorded last (a file from an older agent, a turn cut short).
    """
    out: list[UpdateRecord | dict[str, Any] | list[UpdateRecord]] = []
    calls: dict[bytes | None, list[UpdateRecord]] = {}
    for record in records:
        kind = record.kind
        if record.raw is None and not _showable(record.parsed):
            continue
        if kind in _CHUNKS:
            last = out[-1] if out else None
            if last is None or isinstance(last, list) or _kind_of(last) != kind or not _maybe_joined(last, record):
                out.append(record)
                continue
            previous = last if isinstance(last, dict) else last.update()
            update = record.update()
            if previous is None or update is None:  # corrupt on disk (a parse failed)
                out[-1:] = [dict(r) for r in (previous, update) if r is not None]
            elif _mergeable(previous, update):
                previous = previous if isinstance(last, dict) else dict(previous)
                previous["content"] = {
                    **previous["content"],
                    "text": previous["content"]["text"] + update["content"]["text"],
                }
                out[-1] = previous
            else:
                out[-1:] = [dict(previous), dict(update)]
        elif kind == "tool_call" or (kind == "tool_call_update" and record.key not in calls):
            calls[record.key] = slot = [record]
            out.append(slot)
        elif kind == "tool_call_update":
            calls[record.key].append(record)
        elif kind == "plan":
            out.append(record)
    shown: list[bytes | memoryview | dict[str, Any]] = []
    for item in out:
        if isinstance(item, list):
            call = _call(item)
            if call is not None:
                shown.append(call)
        elif isinstance(item, dict):
            shown.append(item)
        elif item.raw is not None:
            shown.append(item.raw)
        elif item.parsed is not None:
            shown.append(dict(item.parsed))
    return shown


def _kind_of(item: UpdateRecord | dict[str, Any]) -> Any:
    return item.get("sessionUpdate") if isinstance(item, dict) else item.kind


def _maybe_joined(last: UpdateRecord | dict[str, Any], record: UpdateRecord) -> bool:
    """Whether two chunks of one kind may be parts of one message (then they are parsed to see)."""
    if isinstance(last, dict) or last.raw is None or record.raw is None:
        return True
    return last.key is not None and last.key == record.key


def _call(slot: list[UpdateRecord]) -> bytes | dict[str, Any] | None:
    """A tool call's final state: its last record when that is its whole state, else its records folded."""
    last = slot[-1]
    whole = len(slot) > 1 and slot[0].kind == "tool_call" and last.whole and last.raw is not None
    if whole and last.raw is not None and last.raw[: len(_WHOLE_HEAD)] == _WHOLE_HEAD:
        return _CALL_HEAD + last.raw[len(_WHOLE_HEAD) :]
    call: dict[str, Any] | None = None
    for record in slot:
        update = record.update()
        if update is None or not _showable(update):
            continue
        if call is None:
            if update.get("sessionUpdate") == "tool_call":
                call = dict(update)
            else:  # an update without its announcement: show what there is
                call = {**update, "sessionUpdate": "tool_call", "title": update.get("title") or "Tool call"}
        else:
            _fold_into(call, update)
    return call


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

    def restore(self, messages: list[dict[str, Any]]) -> None:
        """Become ``messages``, read from the record file (so not recorded again)."""
        super().__setitem__(slice(None), messages)

    def replace(self, messages: list[dict[str, Any]]) -> None:
        self[:] = messages
        if self.log is not None:
            self.log.append({"kind": "history", "messages": messages})
