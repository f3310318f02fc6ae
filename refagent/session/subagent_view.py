"""How the editor sees a subagent (:mod:`refagent.session.subagents`) while it works, and after.

An editor that advertises ``clientCapabilities.subagents`` (unstable) sees a child session: announced
on the parent session with a ``subagent_update`` (its id, the task as title, the instructions as
description, ``state: running``) before anything of its own, the instructions as a ``session_message`` in
both sessions (sent by the parent, received by the child), then the child's own updates under its
``sessionId`` (its messages and tool calls, as a session's), ``state: requires_action`` while a question of
its waits on the user, and ``state: idle`` with its stop reason when it ends.

Every editor, the others included, sees the parent's ``task`` tool call: while the child works (for an
editor without the capability) its content lists the child's tool calls as they go and its latest words;
whenever a question of the child's waits on the user it says so; at the end, the list and the answer.
That last content is what the session's history keeps of the child, and what ``session/load`` replays;
for a client that shows subagents, the child's session is kept in the session's record file as it goes
(:meth:`ChildView.checkpoint`) and replayed after the session's history (:func:`replay_children`). A
child's call that such an editor was asked about (its permission request names the call) is then updated
on the parent session too, until it ends, as a call of the session's own would be.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast, get_args

import anyio

from refagent.acp import updates
from refagent.acp.client import SessionClient
from refagent.acp.text import cut, one_line
from refagent.acp.types import ToolCallContent, ToolKind
from refagent.ids import new_id
from refagent.persistence.children import child_record, read_children, replayed
from refagent.persistence.reader import StoredSession
from refagent.persistence.recorder import VISIBLE, join_chunks

Send = Callable[[dict[str, Any]], Awaitable[None]]

INTERNAL_ERROR = -32603
MARKS = {"completed": "✓", "failed": "✗"}
"""How a child's tool call that ended shows in the list (one still running shows ``…``)."""
WORDS_CHARS = 2000
"""What the parent's call shows of the child's latest words while it works."""
DESCRIPTION_CHARS = 500
LISTED_CALLS = 40
"""The child's latest calls the parent's call lists (the earlier ones are counted)."""


class ChildView:
    """What the editor is shown of one subagent: ``send_parent`` sends on the parent session (and records),
    ``child`` is the child session's client when the editor shows subagents (None: it does not).
    ``call_id``: the parent's ``task`` call."""

    def __init__(
        self,
        *,
        title: str,
        prompt: str,
        call_id: str,
        child_id: str,
        send_parent: Send,
        child: SessionClient | None,
        record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``record``: where the child's session is saved when it ends (the session's record file), if
        anywhere (:mod:`refagent.persistence.children`)."""
        self.title = title
        self.prompt = prompt
        self.call_id = call_id
        self.child_id = child_id
        self.send_parent = send_parent
        self.child = child
        self.calls: dict[str, tuple[str, str]] = {}
        """The child's tool calls by id: (title, status), in the order they began."""
        self.words: dict[str, list[str]] = {}
        """The child's messages by id, their text as it arrived (the last is its latest)."""
        self.waiting_on: list[str] = []
        """The questions of the child's that wait on the user now."""
        self.record = record
        self.parent_id = ""
        self.announced: dict[str, Any] = {}
        """The child's ``subagent_update`` as it stands (its fields but the kind and the id)."""
        self.transcript: list[dict[str, Any]] = []
        """What the child's session showed (an editor that shows subagents), for its record."""
        self._kept = 0
        """How much of :attr:`transcript` its records hold."""
        self.asked: dict[str, dict[str, Any]] = {}
        """The child's tool calls the editor was asked about on the parent session (an editor that does
        not show subagents), by id: the title and kind they were asked with."""

    async def opened(self, parent_id: str) -> None:
        """The child begins: announced (to an editor that shows subagents) with its instructions, sent by
        the parent session ``parent_id``."""
        self.parent_id = parent_id
        if self.child is None:
            return
        description = cut(self.prompt, DESCRIPTION_CHARS)
        await self.send_parent(self._state("running", title=self.title, description=description))
        sent, received = new_id("msg"), new_id("msg")
        content = [updates.text(self.prompt)]
        await self.send_parent(
            {
                "sessionUpdate": "session_message",
                "messageId": sent,
                "senderSessionId": parent_id,
                "recipientSessionId": self.child_id,
                "recipientMessageId": received,
                "content": content,
            }
        )
        await self._to_child(
            {
                "sessionUpdate": "session_message",
                "messageId": received,
                "senderSessionId": parent_id,
                "recipientSessionId": self.child_id,
                "senderMessageId": sent,
                "content": content,
            }
        )
        self.checkpoint()  # a crash from now on leaves it announced, with its task

    async def show(self, update: dict[str, Any]) -> None:
        """One update of the child's own: to its session (an editor that shows subagents), and into the
        parent's call when a tool call of the child's begins or ends (an editor that does not)."""
        if self.child is not None:
            await self._to_child(update)
        kind = update.get("sessionUpdate")
        if kind == "tool_call_update" and update["toolCallId"] in self.asked:
            # The editor met this call in a question on the parent session: it hears how it goes there too.
            await self.send_parent({**update, **self.asked[update["toolCallId"]]})
        if kind == "agent_message_chunk" and update["content"].get("type") == "text":
            self.words.setdefault(str(update.get("messageId")), []).append(update["content"]["text"])
        elif kind in ("tool_call", "tool_call_update"):
            ident = str(update["toolCallId"])
            title, status = self.calls.get(ident, ("Tool call", "pending"))
            before = status
            self.calls[ident] = (str(update.get("title", title)), str(update.get("status", status)))
            if self.child is None and (kind == "tool_call" or self.calls[ident][1] != before):
                await self.send_parent(updates.tool_call_update(self.call_id, content=self.content()))
            if self.calls[ident][1] in MARKS and before not in MARKS:
                self.checkpoint()  # a step of its work done: kept

    async def asking(self, tool_call_id: str, title: str, kind: str | None = None) -> None:
        """A question about the child's call ``tool_call_id`` goes to the editor on the parent session (an
        editor that does not show subagents): the call is announced there first (a question about a call
        the editor has never seen may be dropped, or shown detached), and from now on its updates go there
        too, with the ``title`` (and ``kind``) it was asked with, so the editor sees it end."""
        if self.child is not None or tool_call_id in self.asked:
            return
        self.asked[tool_call_id] = {"title": title} if kind is None else {"title": title, "kind": kind}
        await self.send_parent(updates.tool_call(tool_call_id, title, _kind(kind)))

    @asynccontextmanager
    async def waiting(self, question: str) -> AsyncIterator[None]:
        """While the child's ``question`` waits on the user: the parent's call (and, to an editor that shows
        subagents, the child's state) says so."""
        self.waiting_on.append(question)
        await self.send_parent(updates.tool_call_update(self.call_id, content=self.content()))
        if self.child is not None:
            await self.send_parent(self._state("requires_action"))
        try:
            yield
        finally:
            self.waiting_on.remove(question)
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.send_parent(updates.tool_call_update(self.call_id, content=self.content()))
                if self.child is not None and not self.waiting_on:
                    await self.send_parent(self._state("running"))

    async def closed(self, stop: str, reason: str = "") -> None:
        """The child has ended with ``stop`` (a stop reason, or ``error`` with its ``reason``): to an editor
        that shows subagents, its state is idle (shielded: it is said when the parent was cancelled too)."""
        if self.child is None:
            return
        idle: dict[str, Any] = {"stopReason": stop}
        if stop == "error":  # the failure as a JSON-RPC error object (internal error: the agent's own)
            idle["error"] = {"code": INTERNAL_ERROR, "message": reason}
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await self.send_parent(self._state("idle", **idle))
        self.checkpoint(ended=True)

    def checkpoint(self, *, ended: bool = False) -> None:
        """Keep what the child's session showed since its last record (if it showed anything, or it has
        ``ended``) in a record of its own, for an editor that shows subagents
        (:mod:`refagent.persistence.children`): called when it is announced, when each of its model's
        answers and tool calls has ended, and when it ends."""
        if self.record is None or self.child is None or (len(self.transcript) == self._kept and not ended):
            return
        shown, self._kept = self.transcript[self._kept :], len(self.transcript)
        self.record(child_record(self.child_id, self.parent_id, dict(self.announced), join_chunks(shown)))

    def content(self, answer: str | None = None) -> list[ToolCallContent]:
        """The parent's call content: the child's tool calls so far, a question waiting on the user, and its
        ``answer`` (else, while an editor without subagents watches, its latest words)."""
        calls = list(self.calls.values())
        lines = [f"({len(calls) - LISTED_CALLS} earlier calls)"] if len(calls) > LISTED_CALLS else []
        lines += [f"{MARKS.get(status, '…')} {cut(one_line(title), 200)}" for title, status in calls[-LISTED_CALLS:]]
        lines += [f"Waiting for your answer: {one_line(question)}" for question in self.waiting_on]
        shown: list[ToolCallContent] = []
        if lines:
            shown.append({"type": "content", "content": updates.text("\n".join(lines))})
        words = answer if answer is not None else self._latest_words() if self.child is None else ""
        if words:
            shown.append({"type": "content", "content": updates.text(words)})
        return shown

    def _latest_words(self) -> str:
        if not self.words:
            return ""
        return cut("".join(list(self.words.values())[-1]), WORDS_CHARS)

    async def _to_child(self, update: dict[str, Any]) -> None:
        """Send ``update`` on the child's session (kept for its record)."""
        assert self.child is not None
        await self.child.send_update(update)
        if self.record is not None and (update["sessionUpdate"] in VISIBLE or not self.transcript):
            self.transcript.append(update)

    def _state(self, state: str, **fields: Any) -> dict[str, Any]:
        """A ``subagent_update`` of the child in ``state``: for ``idle``, ``fields`` are the snapshot's (its
        stop reason); else the update's own (title, description). Kept as the child's announcement."""
        update = {"state": {"state": state, **fields}} if state == "idle" else {**fields, "state": {"state": state}}
        self.announced.update(update)
        return {"sessionUpdate": "subagent_update", "sessionId": self.child_id, **update}


def shows_subagents(client: SessionClient) -> bool:
    """Whether the client advertised ``subagents`` (an object; omitted or null: it did not)."""
    return isinstance(client.capabilities.get("subagents"), dict)


async def replay_children(client: SessionClient, stored: StoredSession) -> None:
    """After ``session/load`` has replayed the session's own history: to a client that shows subagents,
    its subagents' sessions as its record file keeps them (:mod:`refagent.persistence.children`)."""
    if not shows_subagents(client):
        return
    records = await anyio.to_thread.run_sync(read_children, stored.source, stored.data)
    # Sent as a history is, a session's run of updates at a time: a client that takes whole messages in a
    # replay (ACP v2) gets them so.
    for session_id, group in itertools.groupby(replayed(records, client.session_id), key=lambda pair: pair[0]):
        await client.send_recorded(updates.lines(session_id, (update for _, update in group)))


def _kind(kind: str | None) -> ToolKind:
    """A child's call's kind as the schema names kinds (``other`` for one it does not)."""
    return cast("ToolKind", kind) if kind in get_args(ToolKind) else "other"
