"""Replay files written anew: for a fork (the same history under a new session id), for a client that
does not show ``compaction_update`` (the compactions as the messages it would have seen), and for a client
that takes plans in the other form than the one recorded (:func:`plans_for`); and the title a
user gives a saved session that is not open, and its archived mark. The format is
:mod:`refagent.persistence.records`'s."""

from __future__ import annotations

import json
from typing import Any

from refagent.acp import jsonrpc, updates
from refagent.persistence.children import for_fork, read_children
from refagent.persistence.reader import PLAN, StoredSession
from refagent.persistence.recorder import replay
from refagent.persistence.store import SessionStore, now


def fork_files(
    store: SessionStore, stored: StoredSession, session_id: str, cwd: str, extra: list[str]
) -> StoredSession:
    """Write the files of ``session_id``, a fork of ``stored``: its visible history (each update framed
    anew with the new id), its conversation and its state; return them as a load reads them."""
    messages = stored.model_state().messages  # its /undo records stay with the session that made them
    log = store.create(session_id, cwd, extra)
    try:
        for line in stored.shown.splitlines():
            update = json.loads(line)["params"]["update"]  # the replay file holds only these (reader)
            log.show(update)
        for update in replay(stored.held):
            log.show(update)
        log.append({"kind": "history", "messages": messages})
        for record in for_fork(read_children(stored.source, stored.data), stored.session_id, session_id):
            log.append(record)  # its subagents' sessions, its own now
        title = f"{stored.title} (fork)" if stored.title else None
        stamp = now()
        log.append(_meta(stored, title, stamp, archived=False))  # a fork is a new session, in the list
    finally:
        log.close()
    store.touch(session_id, title=title, updated_at=stamp)
    forked = store.load(session_id)
    assert forked is not None  # just written
    return forked


def retitle(store: SessionStore, stored: StoredSession, title: str) -> None:
    """Give the saved session ``stored``, not open here, the ``title`` a user chose: a ``meta`` record with
    its state and the new title, and its index entry."""
    stamp = stored.updated_at or now()
    log = store.reopen(stored.session_id)
    try:
        log.append(_meta(stored, title, stamp))
    finally:
        log.close()
    store.touch(stored.session_id, title=title, updated_at=stamp)


def mark_archived(store: SessionStore, session_id: str, archived: bool) -> bool:
    """Mark the saved session ``session_id`` ``archived`` (``session/archive``) or not (``session/unarchive``):
    a ``meta`` record with its state and the mark, unless its last one says so already (an open session
    saves its own), and its index entry. Its ``updatedAt`` stays: archiving is not activity. False if no
    such session is saved."""
    stored = store.load(session_id)
    if stored is None:
        return False
    if stored.archived != archived:
        log = store.reopen(session_id)
        try:
            log.append(_meta(stored, stored.title, stored.updated_at or now(), archived=archived))
        finally:
            log.close()
    store.mark_archived(session_id, archived)
    return True


def _meta(stored: StoredSession, title: str | None, stamp: str, *, archived: bool | None = None) -> dict[str, Any]:
    """A whole ``meta`` record of ``stored``'s state, with ``title``, the time ``stamp`` and the archived mark
    (None: ``stored``'s)."""
    prompt = stored.system_prompt
    return {
        "kind": "meta",
        "title": title,
        "modeId": stored.mode_id,
        "profileId": stored.profile_id,
        "reasoningEffort": stored.reasoning_effort,
        "systemPrompt": {"mode": prompt[0], "text": prompt[1]} if prompt is not None else None,
        "updatedAt": stamp,
        "turns": stored.turns,
        "archived": stored.archived if archived is None else archived,
    }


COMPACTION = b'"sessionUpdate":"compaction_update"'


def compactions_as_messages(shown: bytes) -> bytes:
    """A replay file's lines for a client that does not show ``compaction_update`` (ACP: send it only to one
    that advertised ``session.compaction``): each compaction becomes the agent message a client without the
    capability saw when it happened (its summary, or why it failed)."""
    out: list[bytes] = []
    for line in shown.splitlines(keepends=True):
        if COMPACTION not in line:
            out.append(line)
            continue
        message = json.loads(line)
        update = message["params"]["update"]
        summary = "".join(b.get("text", "") for b in update.get("summary") or [] if isinstance(b, dict))
        if update.get("status") == "completed":
            text = f"Compacted the older conversation into a summary:\n\n{summary}\n"
        else:
            text = f"Compaction {update.get('status', 'ended')}: {update.get('error') or 'nothing was changed.'}\n"
        chunk = updates.agent_message_chunk(updates.text(text), update.get("compactionId"))
        message["params"]["update"] = chunk
        out.append(jsonrpc.encode(message))
    return b"".join(out)


def plans_for(shown: bytes, by_id: bool) -> bytes:
    """A replay file's lines with its plans in the form the loading client takes (a session records them in
    the form its client took then): by id for one that advertises ``plan`` (a whole v1 ``plan`` is the plan
    :data:`~refagent.acp.updates.DEFAULT_PLAN`), else the whole v1 ``plan`` after each change (the entries of
    the plans of that moment, one plan after the other, as :class:`refagent.tools.plans.Plans` sends it)."""
    out: list[bytes] = []
    plans: dict[str, list[Any]] = {}
    for line in shown.splitlines(keepends=True):
        if PLAN not in line:
            out.append(line)
            continue
        message = json.loads(line)
        update = message["params"]["update"]
        kind = update.get("sessionUpdate")
        if kind == "plan" and by_id:
            update = updates.plan_update(updates.DEFAULT_PLAN, update["entries"])
        elif kind in ("plan_update", "plan_removed") and not by_id:
            plan = update.get("plan") or {}
            plan_id = str(update.get("planId") if kind == "plan_removed" else plan.get("planId"))
            if kind == "plan_update" and plan.get("type") == "items" and plan.get("entries"):
                plans[plan_id] = plan["entries"]
            else:  # removed, emptied, or a form a v1 plan cannot show
                plans.pop(plan_id, None)
            update = updates.plan([entry for entries in plans.values() for entry in entries])
        else:
            out.append(line)
            continue
        message["params"]["update"] = update
        out.append(jsonrpc.encode(message))
    return b"".join(out)


def replay_for(shown: bytes, *, compactions: bool, plans_by_id: bool) -> bytes:
    """A replay file's lines as a client takes them: its compactions as messages unless it shows
    ``compaction_update`` (:func:`compactions_as_messages`), its plans in the form it takes (:func:`plans_for`)."""
    if not compactions and COMPACTION in shown:
        shown = compactions_as_messages(shown)
    return plans_for(shown, plans_by_id) if PLAN in shown else shown
