"""Reading a Responses API stream: :class:`ResponsesAssembler` turns its events (decoded JSON, each an
object with a ``type``) into :mod:`refagent.llm.protocol` events, the part of the Responses adapter
(:mod:`refagent.llm.responses_client`) that neither sends nor retries anything.

The contract:

- text (``response.output_text.delta``) is yielded as it arrives, as :class:`~refagent.llm.protocol.TextDelta`;
  so is a refusal (``response.refusal.delta``), which ends the response ``Finished("refusal")``;
- reasoning summaries (``response.reasoning_summary_text.delta``), and the reasoning text itself
  (``response.reasoning_text.delta``) where a model sends it, are yielded as
  :class:`~refagent.llm.protocol.ReasoningDelta`;
- each summary part (a paragraph, usually under a bold title), each content part and each reasoning text is
  separated from the one before by a blank line: the API sends them as parts, the user reads one text;
- everything comes out as valid Unicode: a surrogate pair split across two deltas is joined, a lone
  surrogate becomes U+FFFD (:mod:`refagent.acp.text`);
- a function call is announced by ``response.output_item.added`` (its ``call_id`` and ``name``), its
  arguments come in ``response.function_call_arguments.delta`` pieces; the whole arguments of
  ``.done`` and of ``response.output_item.done`` win over the pieces. Calls are yielded complete by
  :meth:`ResponsesAssembler.finish`, in output order;
- reasoning items (``response.output_item.done`` of type ``reasoning``) that carry ``encrypted_content``
  are kept as the API gave them but for ``status``, and yielded by :meth:`~ResponsesAssembler.finish` as one
  :class:`~refagent.llm.protocol.KeptReasoning` for ``openai-responses``, for the next request of the tool
  loop. An item without encrypted content is not kept: requests go with ``store: false``, so its ``id`` names
  nothing the API kept, and the API would refuse it;
- ``response.completed`` gives the :class:`~refagent.llm.protocol.Usage` (``input_tokens``,
  ``output_tokens``, cached ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``);
  ``response.incomplete`` too, and ends the response ``length`` (``max_output_tokens``, or a reason
  refagent does not know: the response was cut short) or ``refusal`` (``content_filter``);
- ``response.failed`` and an ``error`` event raise :class:`ResponseFailed`, retryable when its code says
  the failure was the server's (:func:`retryable_code`); so does a stream that ends before the response is
  completed or incomplete (a connection that closed cleanly in the middle is a cut, not an answer);
- at the end (:meth:`~ResponsesAssembler.finish`): what the joiners held, the kept reasoning, the tool
  calls, the usage, and exactly one :class:`~refagent.llm.protocol.Finished` (``tool_calls`` when there are
  calls, else ``stop``, unless cut short or refused);
- an event whose fields have types that cannot be read raises
  :class:`~refagent.llm.openai_stream.Malformed` (a ``ValueError``), which the adapter reports as "is it an
  OpenAI-compatible endpoint?". Events of other types (the API adds some) are ignored.

Pure: no I/O, no ``openai`` import.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from refagent.acp.text import StreamJoiner, clean_text
from refagent.llm.openai_stream import Malformed
from refagent.llm.profiles import RESPONSES_CLIENT
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
from refagent.llm.retry import RETRYABLE_STATUS

__all__ = ["RETRYABLE_CODES", "ResponseFailed", "ResponsesAssembler", "retryable_code"]

RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded"})
"""The codes (and error types) of a failed response that another attempt may not meet."""


class ResponseFailed(Exception):
    """The response failed in the stream (``response.failed``, an ``error`` event, or a stream that ended
    before the response did): ``retryable`` when the failure was the server's."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


def retryable_code(*codes: object) -> bool:
    """Whether any of ``codes`` (an error's ``code`` or ``type``: a word, or an HTTP status) says the
    failure was the server's: worth another attempt."""
    for code in codes:
        if isinstance(code, str) and code in RETRYABLE_CODES:
            return True
        try:
            status = int(str(code))
        except ValueError:
            continue
        if status in RETRYABLE_STATUS or status >= 500:
            return True
    return False


class _Parts:
    """Text that arrives in parts, cleaned as it comes (:class:`~refagent.acp.text.StreamJoiner`), with a
    blank line between two parts."""

    def __init__(self) -> None:
        self._joiner = StreamJoiner()
        self._part: Hashable = None
        self._started = False

    def feed(self, part: Hashable, delta: str) -> str:
        if part != self._part:
            self._part = part
            if self._started:
                delta = "\n\n" + delta
        text = self._joiner.feed(delta)
        self._started = self._started or bool(text)
        return text

    def flush(self) -> str:
        return self._joiner.flush()


@dataclass(slots=True)
class _Call:
    output_index: int
    call_id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    whole: str | None = None
    """The whole arguments, once ``.done`` or the finished item said them."""


class ResponsesAssembler:
    """Turns Responses API events into protocol events; what is only known at the end comes from
    :meth:`finish`. Events are plain dicts (not the ``openai`` package's models: see
    :class:`~refagent.llm.openai_stream.Assembler`); anything may be missing or ``null``."""

    def __init__(self) -> None:
        self.calls: dict[str, _Call] = {}
        """The function calls so far, by item id (or output index, for an item that came without one)."""
        self.kept: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.ended: FinishReason | None = None
        """``None`` until the response completed or was cut short; then the reason it gives."""
        self.refused = False
        self._text = _Parts()
        self._reasoning = _Parts()

    def feed(self, event: Any) -> Iterator[ModelEvent]:
        try:
            yield from self._feed(event)
        except (AttributeError, TypeError, ValueError) as exc:  # a field of an unexpected type
            raise Malformed(f"an event refagent cannot read ({exc}): {json.dumps(event)[:300]}") from exc

    def _feed(self, event: Any) -> Iterator[ModelEvent]:
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            self.refused = self.refused or kind == "response.refusal.delta"
            if text := self._text.feed(_part(event, "content_index"), _delta(event)):
                yield TextDelta(text)
        elif kind == "response.reasoning_summary_text.delta":
            if text := self._reasoning.feed(("summary", *_part(event, "summary_index")), _delta(event)):
                yield ReasoningDelta(text)
        elif kind == "response.reasoning_text.delta":
            if text := self._reasoning.feed(("text", *_part(event, "content_index")), _delta(event)):
                yield ReasoningDelta(text)
        elif kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                self._call(event, item)
        elif kind == "response.function_call_arguments.delta":
            self._call(event, {}).pieces.append(_delta(event))
        elif kind == "response.function_call_arguments.done":
            arguments = event.get("arguments")
            if isinstance(arguments, str):
                self._call(event, {}).whole = arguments
        elif kind == "response.output_item.done":
            self._item_done(event)
        elif kind in ("response.completed", "response.incomplete"):
            self._ended(kind, event.get("response") or {})
        elif kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            said = f"the response failed: {_said(error)}"
            raise ResponseFailed(said, retryable=retryable_code(error.get("code")))
        elif kind == "error":
            nested = event.get("error")  # the error's fields, at the top or (some servers) in "error"
            error = nested if isinstance(nested, dict) else event
            said = f"an error event in the stream: {_said(error)}"
            raise ResponseFailed(said, retryable=retryable_code(error.get("code"), error.get("type")))

    def _call(self, event: dict[str, Any], item: dict[str, Any]) -> _Call:
        """The call ``event`` is about (made when first heard of), updated with ``item``'s fields."""
        index = event.get("output_index")
        index = index if isinstance(index, int) else len(self.calls)
        key = str(event.get("item_id") or item.get("id") or f"#{index}")
        call = self.calls.setdefault(key, _Call(index))
        if isinstance(item.get("call_id"), str) and item["call_id"]:
            call.call_id = item["call_id"]
        if isinstance(item.get("name"), str) and item["name"]:
            call.name = item["name"]
        if isinstance(item.get("arguments"), str) and item["arguments"]:
            call.whole = item["arguments"]
        return call

    def _item_done(self, event: dict[str, Any]) -> None:
        item = event.get("item") or {}
        if item.get("type") == "function_call":
            self._call(event, item)
        elif item.get("type") == "reasoning" and item.get("encrypted_content"):
            self.kept.append({key: value for key, value in item.items() if key != "status"})

    def _ended(self, kind: str, response: dict[str, Any]) -> None:
        usage = response.get("usage")
        if usage:
            self.usage = _usage(usage)
        if kind == "response.completed":
            self.ended = "stop"
            return
        reason = (response.get("incomplete_details") or {}).get("reason")
        self.ended = "refusal" if reason == "content_filter" else "length"

    def finish(self) -> Iterator[ModelEvent]:
        if self.ended is None:
            raise ResponseFailed("the stream ended before the response was complete", retryable=True)
        # A high surrogate that ended the stream never got its other half.
        if reasoning := self._reasoning.flush():
            yield ReasoningDelta(reasoning)
        if text := self._text.flush():
            yield TextDelta(text)
        if self.kept:
            yield KeptReasoning(RESPONSES_CLIENT, tuple(self.kept))
        calls = [  # joined first, then cleaned: a pair split across two pieces of arguments is one character
            ToolCallRequest(
                clean_text(c.call_id) or f"call_{c.output_index}",
                clean_text(c.name),
                clean_text(c.whole if c.whole is not None else "".join(c.pieces)),
            )
            for c in sorted(self.calls.values(), key=lambda c: c.output_index)
        ]
        yield from calls
        if self.usage is not None:
            yield self.usage
        yield Finished(self._reason(bool(calls)))

    def _reason(self, called: bool) -> FinishReason:
        if self.refused or self.ended == "refusal":
            return "refusal"
        if self.ended == "length":
            return "length"
        return "tool_calls" if called else "stop"


def _delta(event: dict[str, Any]) -> str:
    delta = event.get("delta")
    if delta is None:
        return ""
    if not isinstance(delta, str):
        raise TypeError(f"delta is {type(delta).__name__}, not a string")
    return delta


def _part(event: dict[str, Any], index: str) -> tuple[object, object, object]:
    """Which part ``event`` is a piece of: its item, and its part's index in that item."""
    return (event.get("item_id"), event.get("output_index"), event.get(index))


def _said(error: dict[str, Any]) -> str:
    """What an error object says, and its code."""
    message = error.get("message")
    said = message if isinstance(message, str) and message else "no message"
    code = error.get("code")
    return f"{said} ({code})" if code else said


def _usage(usage: dict[str, Any]) -> Usage:
    inputs = usage.get("input_tokens_details") or {}
    outputs = usage.get("output_tokens_details") or {}
    return Usage(
        int(usage.get("input_tokens") or 0),
        int(usage.get("output_tokens") or 0),
        cached_tokens=int(inputs.get("cached_tokens") or 0),
        reasoning_tokens=int(outputs.get("reasoning_tokens") or 0),
    )
