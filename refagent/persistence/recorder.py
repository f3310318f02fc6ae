"""Recording what a session shows, and replaying it for ``session/load``.

:class:`Recorder` keeps a session's visible history: every update the session sends its client
(``Session.send_update``) that belongs to it goes to the session's files
(:mod:`refagent.persistence.records`) in the form a replay sends: each message as one chunk with its
``messageId`` (its chunks merged as it streams), each tool call once, where it began, in its final state,
and the plans in order (in the form the client took them: the whole v1 ``plan``, or ``plan_update`` and
``plan_removed``; a load sends them in the form the loading client takes,
:func:`refagent.persistence.replays.plans_for`). What is complete goes to the replay file;
what is not yet (a tool call running, and anything shown after it meanwhile) is held, its updates
recorded in the record file, until it is.

Message text is merged while a message streams and written when the message ends, the turn ends, the text
grows large, or it has waited :data:`FLUSH_SECONDS` (then the rest follows as more chunks of the same
message, which a client joins).

:func:`replay` folds updates the same way (the held updates of a session cut short by a crash);
:func:`load` reads a saved session, repairing its replay file after such a crash. The model-facing
conversation is :mod:`refagent.persistence.conversation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from refagent.persistence.reader import StoredSession
from refagent.persistence.records import replay_line
from refagent.persistence.store import SessionStore
from refagent.persistence.writer import SessionLog

VISIBLE = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "plan_update",
        "plan_removed",
        "compaction_update",
    }
)
"""The kinds of update that make up a session's visible history (what ``session/load`` replays). A
compaction is recorded once, as its final ``compaction_update`` (with its summary or error): its
``in_progress`` and its summary's chunks only matter while it runs."""
_COMPACTION_ENDED = frozenset({"completed", "failed", "cancelled"})
_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
_FLUSH_CHARS = 64 * 1024
_ENDED = frozenset({"completed", "failed"})
_SHOWN_CALLS = 4096
"""Ended tool calls whose ids the recorder remembers (a late update to one is shown as an update)."""
FLUSH_SECONDS = 0.5
"""The longest a streaming message's text waits in memory before it is written."""


class Recorder:
    """Records the visible ones of a session's updates in ``log`` (if any), as the session sends them.

    ``clock`` (seconds, monotonic) bounds how long streamed text waits in memory: a message still
    streaming after :data:`FLUSH_SECONDS` is written so far, so a crash loses at most that much of it.
    Call :meth:`settle` when a turn ends: what is held then goes to the replay file as it is.
    """

    def __init__(self, session_id: str, log: SessionLog | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.session_id = session_id
        self.log = log
        self._clock = clock
        self._pending: dict[str, Any] | None = None
        """The first chunk of the message being gathered; its text is ``_parts`` joined."""
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._held: list[dict[str, Any]] = []
        """What is shown but not in the replay file yet, in order: tool calls (folded as their updates
        come) and what was shown after the first of them that is still running."""
        self._running: dict[str, dict[str, Any]] = {}
        """The tool calls among ``_held`` that have not ended, by id."""
        self._ended: dict[str, None] = {}
        """The ids of tool calls that have ended (the latest :data:`_SHOWN_CALLS`)."""

    def record(self, update: dict[str, Any]) -> None:
        """Record ``update`` if it belongs to the visible history (the session has sent it, or, for the
        user's own prompt, the client already shows it)."""
        if self.log is None or update.get("sessionUpdate") not in VISIBLE or not _showable(update):
            return
        if update["sessionUpdate"] == "compaction_update" and update["status"] not in _COMPACTION_ENDED:
            return  # recorded when it ends, whole
        if _mergeable(self._pending, update):
            text: str = update["content"]["text"]
            self._parts.append(text)
            self._size += len(text)
            if self._size >= _FLUSH_CHARS or self._clock() - self._since >= FLUSH_SECONDS:
                self.flush()  # the rest of the message follows in chunks of its own; a client joins them
            return
        self.flush()
        kind = update["sessionUpdate"]
        if kind in _CHUNKS and _is_text(update):
            self._pending = update
            self._parts = [update["content"]["text"]]
            self._size = len(self._parts[0])
            self._since = self._clock()
        elif kind in ("tool_call", "tool_call_update"):
            self._record_call(kind, update["toolCallId"], update)  # a string (_showable)
        else:
            self._show(update)

    def flush(self) -> None:
        """Record the message being gathered so far."""
        if self._pending is not None:
            content = {**self._pending["content"], "text": "".join(self._parts)}
            message = {**self._pending, "content": content}
            self._pending = None
            self._parts = []
            self._size = 0
            self._show(message)

    def settle(self) -> None:
        """The end of a turn: everything shown goes to the replay file, running tool calls as they are now."""
        self.flush()
        for ident in list(self._running):
            self._end(ident)
        if self._held:
            self._release()

    def _record_call(self, kind: str, ident: str, update: dict[str, Any]) -> None:
        """A tool call's announcement or update: held, folded into the call, until the call ends."""
        call = self._running.get(ident) if kind == "tool_call_update" else None
        if call is None and kind == "tool_call_update" and ident in self._ended:
            self._show(update)  # a late word on a call already shown: the client folds it in
            return
        if call is None:  # a new call (an update without its announcement: show what there is)
            call = {**update, "sessionUpdate": "tool_call"}
            call.setdefault("title", "Tool call")
            if not self._held:
                self._hold()
            self._held.append(call)
            self._running[ident] = call
        else:
            _fold_into(call, update)
        self._hold_record(update)
        if call.get("status") in _ENDED:
            self._end(ident)
            self._release()

    def _show(self, update: dict[str, Any]) -> None:
        """A complete item: to the replay file, unless items before it are held."""
        assert self.log is not None
        if self._held:
            self._held.append(update)
            self._hold_record(update)
        else:
            self.log.show(update)

    def _hold(self) -> None:
        assert self.log is not None
        self.log.append({"kind": "hold", "replayed": self.log.replayed})

    def _hold_record(self, update: dict[str, Any]) -> None:
        assert self.log is not None
        self.log.append({"kind": "update", "update": update})

    def _end(self, ident: str) -> None:
        self._running.pop(ident, None)
        self._ended[ident] = None
        if len(self._ended) > _SHOWN_CALLS:
            del self._ended[next(iter(self._ended))]

    def _release(self) -> None:
        """Write the held items that are complete, in order, up to the first still running; when none are
        held any more, say so in the record file."""
        assert self.log is not None
        done = 0
        for item in self._held:
            if item.get("sessionUpdate") == "tool_call" and item.get("toolCallId") in self._running:
                break
            self.log.show(item)
            done += 1
        if done:
            del self._held[:done]
            if not self._held:
                self.log.append({"kind": "release"})


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
    if kind == "compaction_update":
        return isinstance(update.get("compactionId"), str) and isinstance(update.get("status"), str)
    if kind == "plan_update":
        return isinstance(update.get("plan"), dict)
    if kind == "plan_removed":
        return isinstance(update.get("planId"), str)
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
        elif kind in ("plan", "plan_update", "plan_removed", "compaction_update"):
            out.append(dict(update))
    return out


def join_chunks(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``updates`` with each run of one message's text chunks joined into one chunk, the rest as they are:
    what is kept of updates that :func:`replay` folds later, when the updates that end a tool call may be
    kept apart from those that began it."""
    out: list[dict[str, Any]] = []
    for update in updates:
        last = out[-1] if out else None
        if update.get("sessionUpdate") in _CHUNKS and _showable(update) and _mergeable(last, update):
            assert last is not None
            last["content"] = {**last["content"], "text": last["content"]["text"] + update["content"]["text"]}
        else:
            out.append(dict(update))
    return out


def load(store: SessionStore, session_id: str) -> StoredSession | None:
    """A saved session (:meth:`SessionStore.load`). If a crash left updates held, they are folded and the
    replay file repaired with them, before the session writes again: then ``shown`` is its whole visible
    history (``held`` keeps them if the repair could not be written)."""
    stored = store.load(session_id)
    if stored is not None and stored.replayed is not None:
        store.repair(stored, [replay_line(session_id, update) for update in replay(stored.held)])
    return stored


def _fold_into(call: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if key not in ("sessionUpdate", "toolCallId") and value is not None:
            call[key] = value
