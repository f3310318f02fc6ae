"""The subagents a session's record file keeps, for a ``session/load`` by a client that shows subagents.

A subagent shown to such a client (:mod:`refagent.session.subagent_view`) is a session of its own, which
the session's replay file (one session's notifications, :mod:`refagent.persistence.records`) cannot hold.
Its session goes to the record file in ``child`` records, as it goes: one when it is announced, one when
each of its model's answers and tool calls has ended, and the last when it ends, so that a crash loses at
most the step it was in::

    {"kind": "child", "sessionId": CHILD, "parent": PARENT, "announce": SUBAGENT_UPDATE, "updates": [...]}

``parent``: the session it was announced on (the session, or, for a subagent's own, that subagent);
``announce``: its ``subagent_update`` as it then stood (title, description, state); ``updates``: what its
session showed since the record before, each message's chunks joined
(:func:`refagent.persistence.recorder.join_chunks`). A load joins a child's records (the parent of the
first, the announcement of the last) and folds its updates as a replay folds a session's
(:func:`refagent.persistence.recorder.replay`), after the message that gave it its task. It sends, after
the session's own history, each child's announcement on its parent, the parent's copy of that message
(made from the child's, which names it), and then the child's updates, a child before the subagents it
started. A child whose last record is not idle was cut off (the agent crashed or was killed while it
worked): it is announced idle, failed, with what it showed until then. A fork copies the records under
new ids (:func:`for_fork`): its subagents are sessions of its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from refagent.ids import new_id
from refagent.persistence.recorder import replay

log = logging.getLogger(__name__)

KIND = "child"
_PREFIX = b'{"kind":"child",'
CUT_OFF = {
    "state": "idle",
    "stopReason": "error",
    "error": {"code": -32603, "message": "cut off: the agent stopped while this subagent worked"},
}
"""The state a child whose last record is not idle is replayed in."""


def child_record(
    child_id: str, parent_id: str, announce: dict[str, Any], updates: list[dict[str, Any]]
) -> dict[str, Any]:
    """A ``child`` record of the subagent ``child_id`` announced on ``parent_id`` (``kind`` first, as the
    reader looks for it): its announcement as it stands, and ``updates``, what it showed since its last."""
    return {"kind": KIND, "sessionId": child_id, "parent": parent_id, "announce": announce, "updates": updates}


def read_children(source: str, data: bytes | None = None) -> list[dict[str, Any]]:
    """The ``child`` records of the record file at ``source`` (or its bytes ``data``), in order; a line
    that is not one, or not whole, is skipped. Reads the whole file: call it off the event loop."""
    if data is None:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            log.warning("cannot read the subagents of %s: %s", source, exc)
            return []
    found = []
    for line in data.splitlines():
        if not line.startswith(_PREFIX):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if _whole(record):
            found.append(record)
    return found


def replayed(records: list[dict[str, Any]], session_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """What a load sends for ``records`` (:func:`read_children`) of the session ``session_id``: each
    ``(sessionId, update)`` in order, every child announced on its parent before its own updates and after
    its parent's."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    for record in joined(records):
        by_parent.setdefault(record["parent"], []).append(record)
    waiting, seen = [session_id], {session_id}
    while waiting:
        parent = waiting.pop(0)
        for record in by_parent.get(parent, []):
            child = record["sessionId"]
            if child in seen:  # a record file that makes a child its own ancestor: once
                continue
            seen.add(child)
            yield parent, {**record["announce"], "sessionUpdate": "subagent_update", "sessionId": child}
            sent = _sent_copy(record["updates"][0], parent, child) if record["updates"] else None
            if sent is not None:  # the instructions, as the parent showed them when it sent them
                yield parent, sent
            for update in record["updates"]:
                yield child, update
            waiting.append(child)


def joined(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each child's ``records`` made one, in the order the children were first recorded: the parent of its
    first, the announcement of its last (:data:`CUT_OFF` when that one is not idle), and its updates in
    order, folded after the first (the message that gave it its task)."""
    children: dict[str, dict[str, Any]] = {}
    for record in records:
        child = children.get(record["sessionId"])
        if child is None:
            children[record["sessionId"]] = {**record, "updates": list(record["updates"])}
        else:
            child["announce"] = record["announce"]
            child["updates"].extend(record["updates"])
    for child in children.values():
        child["updates"] = child["updates"][:1] + replay(child["updates"][1:])
        state = child["announce"].get("state")
        if not isinstance(state, dict) or state.get("state") != "idle":
            child["announce"] = {**child["announce"], "state": CUT_OFF}
    return list(children.values())


def for_fork(records: list[dict[str, Any]], session_id: str, fork_id: str) -> list[dict[str, Any]]:
    """``records`` of the session ``session_id`` as its fork ``fork_id`` keeps them: each subagent under a
    new id (a client that shows both sessions must not take one's subagents for the other's), and every
    place that names one of those sessions (a parent, a ``session_message``'s sender or recipient) naming
    its new id."""
    renamed = {session_id: fork_id} | {record["sessionId"]: new_id("sess") for record in records}

    def rename(value: Any) -> Any:
        if isinstance(value, str):
            return renamed.get(value, value)
        if isinstance(value, list):
            return [rename(item) for item in value]
        if isinstance(value, dict):
            return {key: rename(item) for key, item in value.items()}
        return value

    return [rename(record) for record in records]


def _sent_copy(first: dict[str, Any], parent: str, child: str) -> dict[str, Any] | None:
    """The parent's copy of the message that gave the child its task, made from the child's (``first``, the
    child's first update: received, it names the sent copy's id): what the parent showed as it sent it."""
    if first.get("sessionUpdate") != "session_message" or not isinstance(first.get("senderMessageId"), str):
        return None
    return {
        "sessionUpdate": "session_message",
        "messageId": first["senderMessageId"],
        "senderSessionId": parent,
        "recipientSessionId": child,
        "recipientMessageId": first.get("messageId"),
        "content": first.get("content", []),
    }


def _whole(record: Any) -> bool:
    """Whether ``record`` is a ``child`` record with every field of the right type."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("sessionId"), str)
        and isinstance(record.get("parent"), str)
        and isinstance(record.get("announce"), dict)
        and isinstance(record.get("updates"), list)
        and all(isinstance(update, dict) for update in record["updates"])
    )
