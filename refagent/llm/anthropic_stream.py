"""Reading a Messages API stream: :class:`Assembler` turns Anthropic's server-sent events (their ``data``,
decoded JSON with a ``type``) into :mod:`refagent.llm.protocol` events, the part of the Anthropic adapter
(:mod:`refagent.llm.anthropic_client`) that neither sends nor retries anything.

The contract, event by event:

- ``message_start``: the usage so far (``input_tokens``, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``, ``output_tokens``);
- ``content_block_start``: a block at its ``index``: ``text``, ``thinking``, ``redacted_thinking`` (whole
  at its start: its ``data``) or ``tool_use`` (its ``id`` and ``name``); blocks of other types (a server
  tool's) are read and left out;
- ``content_block_delta``: ``text_delta`` is yielded as :class:`~refagent.llm.protocol.TextDelta`,
  ``thinking_delta`` as :class:`~refagent.llm.protocol.ReasoningDelta` (two thinking blocks apart by a blank
  line), ``signature_delta`` is the thinking block's signature, ``input_json_delta`` a piece of the tool
  call's arguments; other deltas (citations) are left out;
- ``message_delta``: the ``stop_reason``, and the usage's cumulative counts (``output_tokens``, and any
  input count it repeats, which overwrites the start's);
- ``message_stop`` ends the message (:attr:`Assembler.complete`); ``ping`` and event types Anthropic may add
  later are ignored;
- ``error`` raises :class:`StreamError`, retryable when its type is ``overloaded_error`` or ``api_error``.

Text and reasoning come out as valid Unicode (a surrogate pair split across two deltas is joined, a lone
half becomes U+FFFD: :mod:`refagent.acp.text`). :meth:`Assembler.finish` yields, after the stream: the
:class:`~refagent.llm.protocol.KeptReasoning` of API ``anthropic`` (every thinking block, ``{"type":
"thinking", "thinking", "signature"}``, and redacted thinking block, ``{"type": "redacted_thinking",
"data"}``, in their order: the API wants them back unchanged in the next request of a tool loop; the
thinking as it came, for the signature covers it), then the tool calls (their arguments the joined JSON
pieces, ``"{}"`` for a call that had none), then the :class:`~refagent.llm.protocol.Usage`
(``prompt_tokens`` counts every input token: the uncached ones, those read from the cache and those written
to it), then exactly one :class:`~refagent.llm.protocol.Finished`: ``end_turn``, ``stop_sequence`` and
``pause_turn`` are ``stop`` (``tool_calls`` when the response called tools), ``tool_use`` is ``tool_calls``,
``max_tokens`` and ``model_context_window_exceeded`` are ``length``, ``refusal`` is ``refusal``.

An event of the wrong shape (not an object, no ``type``, a delta for a block never started, a field of an
unexpected type) raises :class:`Malformed` (a ``ValueError``), which the adapter reports as "is it
Anthropic's Messages API?".

Pure: no I/O, no HTTP library.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from refagent.acp.text import StreamJoiner, clean_text
from refagent.llm.profiles import ANTHROPIC_CLIENT
from refagent.llm.protocol import (
    Finished,
    FinishReason,
    KeptReasoning,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    Usage,
)

__all__ = ["RETRYABLE_ERRORS", "Assembler", "Malformed", "StreamError"]

RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error"})
"""The types of an ``error`` event worth another attempt (Anthropic's servers were busy or failed)."""

_STOP_REASONS: dict[str, FinishReason] = {
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
"""The stop reasons that are not a plain stop (``end_turn``, ``stop_sequence``, ``pause_turn``, unknown ones)."""


class Malformed(ValueError):
    """An event refagent cannot read as the Messages API's."""


class StreamError(Exception):
    """An ``error`` event: what Anthropic said went wrong in the middle of the stream."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}" if kind else message)
        self.kind = kind
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_ERRORS


@dataclass(slots=True)
class _Block:
    type: str
    parts: list[str] = field(default_factory=list)
    """The thinking's pieces, or the tool call's pieces of JSON."""
    signature: str = ""
    data: str = ""
    """A redacted thinking block's encrypted thinking."""
    id: str = ""
    name: str = ""
    input: Any = None
    """A tool_use block's ``input`` at its start (``{}`` when its arguments stream as pieces)."""


class Assembler:
    """Turns events (decoded JSON) into model events; what is only known at the end comes from :meth:`finish`."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.started = False
        """Whether ``message_start`` came."""
        self.complete = False
        """Whether the message ended (``message_stop``): a stream that ends before it was cut."""
        self.stop_reason: str | None = None
        self._usage: dict[str, Any] = {}
        self._text = StreamJoiner()
        self._reasoning = StreamJoiner()
        self._thought = False
        """Whether a thinking block gave reasoning already (the next one is set apart by a blank line)."""

    def feed(self, event: Any) -> Iterator[ModelEvent]:
        try:
            yield from self._feed(event)
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            if isinstance(exc, Malformed):
                raise
            raise Malformed(f"an event refagent cannot read ({exc!r}): {json.dumps(event)[:300]}") from exc

    def _feed(self, event: Any) -> Iterator[ModelEvent]:
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise Malformed(f"an event without a type: {json.dumps(event)[:300]}")
        kind = event["type"]
        if kind == "error":
            error = event.get("error")
            error = error if isinstance(error, dict) else {}
            raise StreamError(str(error.get("type") or ""), str(error.get("message") or json.dumps(event)[:300]))
        if kind == "message_start":
            self.started = True
            self._add_usage(event["message"].get("usage"))
        elif kind == "content_block_start":
            yield from self._start(int(event["index"]), event["content_block"])
        elif kind == "content_block_delta":
            yield from self._delta(self._block(event), event["delta"])
        elif kind == "content_block_stop":
            yield from self._stop(self._block(event))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if delta.get("stop_reason") is not None:
                self.stop_reason = str(delta["stop_reason"])
            self._add_usage(event.get("usage"))
        elif kind == "message_stop":
            self.complete = True
        # "ping", and event types added later: nothing to do (Anthropic's versioning policy says to ignore them)

    def _block(self, event: dict[str, Any]) -> _Block:
        block = self.blocks.get(int(event["index"]))
        if block is None:
            raise Malformed(f"a {event['type']} for a block that never started: {json.dumps(event)[:300]}")
        return block

    def _start(self, index: int, start: dict[str, Any]) -> Iterator[ModelEvent]:
        block = self.blocks[index] = _Block(str(start["type"]))
        if block.type == "text":
            yield from self._delta(block, {"type": "text_delta", "text": start.get("text") or ""})
        elif block.type == "thinking":
            if self._thought and (separator := self._reasoning.feed("\n\n")):
                yield ReasoningDelta(separator)
            yield from self._delta(block, {"type": "thinking_delta", "thinking": start.get("thinking") or ""})
            block.signature = str(start.get("signature") or "")
        elif block.type == "redacted_thinking":
            block.data = str(start["data"])
        elif block.type == "tool_use":
            block.id, block.name, block.input = str(start["id"]), str(start["name"]), start.get("input")

    def _delta(self, block: _Block, delta: dict[str, Any]) -> Iterator[ModelEvent]:
        kind = delta["type"]
        if kind == "text_delta" and block.type == "text":
            if text := self._text.feed(_string(delta["text"])):
                yield TextDelta(text)
        elif kind == "thinking_delta" and block.type == "thinking":
            piece = _string(delta["thinking"])
            block.parts.append(piece)
            if reasoning := self._reasoning.feed(piece):
                self._thought = True
                yield ReasoningDelta(reasoning)
        elif kind == "signature_delta" and block.type == "thinking":
            block.signature = _string(delta["signature"])
        elif kind == "input_json_delta" and block.type == "tool_use":
            block.parts.append(_string(delta["partial_json"]))

    def _stop(self, block: _Block) -> Iterator[ModelEvent]:
        # A surrogate pair never spans two blocks: what a block's joiner holds at its end is a lone half.
        if block.type == "text" and (text := self._text.flush()):
            yield TextDelta(text)
        elif block.type == "thinking" and (reasoning := self._reasoning.flush()):
            yield ReasoningDelta(reasoning)

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({key: value for key, value in usage.items() if value is not None})

    def finish(self) -> Iterator[ModelEvent]:
        """What the stream told in all: kept reasoning, tool calls, usage, and one ``Finished``."""
        if reasoning := self._reasoning.flush():
            yield ReasoningDelta(reasoning)
        if text := self._text.flush():
            yield TextDelta(text)
        blocks = [block for _, block in sorted(self.blocks.items())]
        kept = [item for block in blocks if (item := _kept(block)) is not None]
        if kept:
            yield KeptReasoning(ANTHROPIC_CLIENT, tuple(kept))
        calls = [  # joined first, then cleaned: a pair split across two pieces of arguments is one character
            ToolCallRequest(clean_text(b.id), clean_text(b.name), clean_text(_arguments(b)))
            for b in blocks
            if b.type == "tool_use"
        ]
        yield from calls
        if self._usage:
            yield self._usage_event()
        yield Finished(self._reason(bool(calls)))

    def _usage_event(self) -> Usage:
        def count(key: str) -> int:
            return int(self._usage.get(key) or 0)

        read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
        details = self._usage.get("output_tokens_details")
        thinking = int(details.get("thinking_tokens") or 0) if isinstance(details, dict) else 0
        return Usage(
            prompt_tokens=count("input_tokens") + read + written,
            completion_tokens=count("output_tokens"),
            cached_tokens=read,
            cache_write_tokens=written,
            reasoning_tokens=thinking,
        )

    def _reason(self, called: bool) -> FinishReason:
        reason = _STOP_REASONS.get(self.stop_reason or "")
        if reason is not None:
            return reason
        return "tool_calls" if called else "stop"


def _kept(block: _Block) -> dict[str, Any] | None:
    """The block as the next request sends it back, if it is reasoning the API wants back.

    A thinking block without its signature (the stream never gave one) is left out: the API refuses one
    sent back unsigned, and it has nothing to verify it by."""
    if block.type == "thinking" and block.signature:
        return {"type": "thinking", "thinking": "".join(block.parts), "signature": block.signature}
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return None


def _arguments(block: _Block) -> str:
    if block.parts:
        return "".join(block.parts) or "{}"
    # No pieces: the input the block started with (the API's streams start with {} and send the pieces).
    return json.dumps(block.input) if isinstance(block.input, dict) else "{}"


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise Malformed(f"a string was expected, not {json.dumps(value)[:100]}")
    return value
