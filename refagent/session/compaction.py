"""Compaction: the older part of a conversation summarised by the model and replaced by the summary,
keeping the recent turns as they are (``/compact``, and automatically before a request would overflow
the model's context window). :class:`Compactor` does it for one session; the rest are its pure parts.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import anyio

from refagent.acp import updates
from refagent.errors import ModelError
from refagent.ids import new_id
from refagent.llm.protocol import ModelClient, ModelRequest, TextDelta, close_stream
from refagent.llm.wire_json import EncodedMessages, dumps
from refagent.persistence.conversation import Conversation
from refagent.session.speaker import Say, speaker

KEEP_TURNS = 2
"""User turns kept verbatim after the summary."""
AUTO_COMPACT_AT = 0.8
"""Fraction of the context window a request may fill before the agent compacts first."""
SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted into it):\n\n"
RETRY_AFTER = 0.1
"""After an automatic compaction changed nothing (the model failed, or summarised nothing), how much more of
the context window the conversation must fill before it is tried again: not before every request."""
AFTER_FAILURE = "It is tried again once the conversation has grown; /compact tries now, /model switches model."
"""Said after an automatic compaction that changed nothing: it is not tried before every request."""


class AutoCompaction:
    """What automatic compaction remembers for a session, from one turn (and one :class:`Compactor`) to
    the next: the size of the conversation when it last failed (None: it has not, since it last worked)."""

    __slots__ = ("encoded", "failed_at")

    def __init__(self) -> None:
        self.failed_at: int | None = None
        self.encoded = EncodedMessages(_as_it_is)
        """Each message's JSON, kept across requests: sizing a long conversation before each request
        encodes only what is new (:mod:`refagent.llm.wire_json`)."""

    def estimate(self, messages: list[dict[str, Any]], tools: list[Any]) -> int:
        """:func:`estimate_tokens` of ``messages`` and ``tools``, each message encoded once."""
        texts = self.encoded.encode(messages)
        return (sum(map(len, texts)) + len(texts) + _tools_size(tools)) // 4


def _as_it_is(message: dict[str, Any]) -> dict[str, Any]:
    return message


def estimate_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """A rough token count (about four characters a token) for deciding when to compact."""
    return (sum(len(dumps(m)) + 1 for m in messages) + _tools_size(tools)) // 4


def _tools_size(tools: list[Any] | None) -> int:
    return len(json.dumps([getattr(t, "parameters", {}) for t in tools], default=str)) if tools else 0


def split_point(history: list[dict[str, Any]], keep_turns: int = KEEP_TURNS) -> int:
    """Index where the kept recent part begins: at the ``keep_turns``-th last real user prompt."""
    starts = [i for i, m in enumerate(history) if m.get("role") == "user" and not _is_note(m)]
    if len(starts) <= keep_turns:
        return 0
    return starts[-keep_turns]


def _is_note(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and (content.startswith("<system-reminder>") or content.startswith(SUMMARY_PREFIX))


def transcript(messages: list[dict[str, Any]]) -> str:
    """The messages as plain text for the summariser (tool results shortened)."""
    lines: list[str] = []
    for message in messages:
        role = message.get("role", "?")
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "[image]")) for p in content if isinstance(p, dict))
        text = str(content or "")
        if role == "tool" and len(text) > 2000:
            text = text[:1000] + "\n[...]\n" + text[-500:]
        lines.append(f"[{role}] {text}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines.append(f"[{role} calls {function.get('name')}] {str(function.get('arguments'))[:1000]}")
    return "\n".join(lines)


async def summarise(
    model: ModelClient,
    older: list[dict[str, Any]],
    focus: str,
    on_text: Callable[[str], Awaitable[None]],
) -> str:
    """Ask ``model`` for a summary of ``older``, streaming it through ``on_text``. Raises
    :class:`~refagent.errors.ModelError` when the model fails (the conversation then stays as it was)."""
    instructions = resources.files("refagent.prompts").joinpath("compact.md").read_text(encoding="utf-8")
    if focus:
        instructions += f"\nFocus the summary on: {focus}\n"
    request = ModelRequest(
        messages=[
            {"role": "system", "content": instructions},
            {"role": "user", "content": "The conversation to summarise:\n\n" + transcript(older)},
        ]
    )
    parts: list[str] = []
    stream = model.stream(request)
    try:
        async for event in stream:
            if isinstance(event, TextDelta) and event.text:
                parts.append(event.text)
                await on_text(event.text)
    finally:
        await close_stream(stream)
    return "".join(parts).strip()


def compacted(summary: str, recent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The new conversation: the summary as the first user message, then the recent turns."""
    return [{"role": "user", "content": SUMMARY_PREFIX + summary}, *recent]


class Compactor:
    """Compacts one session's conversation with ``model``, telling the user through ``send`` what it does.

    ``window`` is the model's context window in tokens (a callable: the session may switch models). With
    ``updates`` (the client advertised ``session.compaction``) a compaction is shown as
    ``compaction_update`` and ``compaction_summary_chunk`` updates, recorded with the session and replayed
    at their place; without, as an agent message that streams the summary."""

    def __init__(
        self,
        model: ModelClient,
        history: Conversation,
        send_update: Callable[[dict[str, Any]], Awaitable[None]],
        window: Callable[[], int],
        *,
        updates: bool = False,
        auto: AutoCompaction | None = None,
    ) -> None:
        self.model = model
        self.history = history
        self.send_update = send_update
        self.window = window
        self.updates = updates
        self.auto = auto if auto is not None else AutoCompaction()
        """Where automatic compaction last failed: the session's, shared by its turns' compactors."""

    async def compact_if_full(self, messages: list[dict[str, Any]], tools: list[Any]) -> None:
        """Before a model request of ``messages`` and ``tools``: compact first if it would fill most
        (:data:`AUTO_COMPACT_AT`) of the context window, unless it failed at about this size already
        (:data:`RETRY_AFTER`): then the request goes as it is, and the user, told at the failure, is not
        told again."""
        size, window = self.auto.estimate(messages, tools), self.window()
        if size < window * AUTO_COMPACT_AT:
            return
        failed_at = self.auto.failed_at
        if failed_at is not None and size < failed_at + window * RETRY_AFTER:
            return
        if not await self.compact("", speaker(self.send_update), automatic=True):  # a success clears it
            self.auto.failed_at = size

    async def compact(self, focus: str, say: Say, *, automatic: bool) -> bool:
        """Summarise the older messages (with ``focus``, if given) and keep the recent turns; ``say`` tells
        the user what happens (a short conversation has nothing to compact). A model failure or an empty
        summary changes nothing. Whether the conversation was compacted."""
        history = self.history
        cut = split_point(list(history))
        if cut == 0:
            if not automatic:
                await say("Nothing to compact yet: the conversation is short.")
            return False
        older, recent = list(history[:cut]), list(history[cut:])
        before = estimate_tokens(list(history))
        if self.updates:
            summary = await self._summarise_as_updates(older, focus, automatic=automatic)
        else:
            summary = await self._summarise_as_message(older, focus, say, automatic=automatic)
        if not summary:
            return False
        self.auto.failed_at = None
        history.replace(compacted(summary, recent))
        after = estimate_tokens(list(history))
        if not self.updates:
            await say(f"\n\nCompacted: about {before:,} tokens down to {after:,}.\n")
        await self.send_update(updates.usage(after, self.window()))
        return True

    async def _summarise_as_message(self, older: list[dict[str, Any]], focus: str, say: Say, *, automatic: bool) -> str:
        await say(
            ("The conversation is near the model's context window, so " if automatic else "")
            + f"compacting {len(older)} older messages into a summary:\n\n"
        )
        try:
            summary = await summarise(self.model, older, focus, say)
        except ModelError as exc:  # the user hears why; the conversation stays as it was
            await say("\n\n" + _failed(f"The model could not summarise: {exc}", automatic))
            return ""
        if not summary:
            await say("\n\n" + _failed("The model returned an empty summary; nothing was changed.", automatic))
        return summary

    async def _summarise_as_updates(self, older: list[dict[str, Any]], focus: str, *, automatic: bool) -> str:
        compaction_id = new_id("compact")

        async def chunk(text: str) -> None:
            await self.send_update(updates.compaction_summary_chunk(compaction_id, updates.text(text)))

        await self.send_update(updates.compaction(compaction_id, "in_progress"))
        try:
            summary = await summarise(self.model, older, focus, chunk)
        except ModelError as exc:
            await self.send_update(
                updates.compaction(
                    compaction_id, "failed", error=_failed(f"The model could not summarise: {exc}", automatic)
                )
            )
            return ""
        except BaseException:  # cancelled (or worse): the thread must not show it running forever
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.send_update(updates.compaction(compaction_id, "cancelled"))
            raise
        if not summary:
            await self.send_update(
                updates.compaction(
                    compaction_id,
                    "failed",
                    error=_failed("The model returned an empty summary; nothing was changed.", automatic),
                )
            )
            return ""
        await self.send_update(updates.compaction(compaction_id, "completed", summary=[updates.text(summary)]))
        return summary


def _failed(reason: str, automatic: bool) -> str:
    """What is said of a compaction that changed nothing: ``reason``, and for an automatic one, when it is
    tried again (:data:`AFTER_FAILURE`)."""
    if not automatic:
        return reason
    return f"{reason.rstrip('.')}. {AFTER_FAILURE}"
