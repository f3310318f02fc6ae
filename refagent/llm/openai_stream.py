"""Reading a Chat Completions stream: :class:`Assembler` turns its chunks (decoded JSON) into
:mod:`refagent.llm.protocol` events, the part of the OpenAI-compatible adapter
(:mod:`refagent.llm.openai_client`) that neither sends nor retries anything.

The contract, provider quirks included:

- text is yielded as it arrives; reasoning comes from ``reasoning_content`` or ``reasoning``, whichever the
  provider sends (extra fields on the delta);
- text, reasoning and tool calls come out as valid Unicode: a surrogate pair split across two chunks (each
  half a ``\\ud83d``-style escape of its own) is joined, a lone surrogate becomes U+FFFD
  (:mod:`refagent.acp.text`);
- tool-call deltas are assembled by index (by id, or the last call, when a provider omits the index); a name
  (or id) repeated in every chunk is not concatenated; the id may come only on the first chunk; arguments
  that are not JSON are passed through raw; complete calls are yielded by :meth:`Assembler.finish`, after
  the stream ends, then the :class:`~refagent.llm.protocol.Usage`, then exactly one ``Finished``;
- what the server wants back with the assistant message is kept: one
  :class:`~refagent.llm.protocol.KeptReasoning` (under the API name the adapter gives, its endpoint's),
  yielded just before the tool calls, whose items are OpenRouter's ``reasoning_details`` (Claude's signed
  thinking, OpenAI's and Gemini's encrypted reasoning), each ``{"reasoning_detail": ...}``, gathered by
  their ``index``, each detail's ``text``, ``summary`` or ``data`` joined across chunks and its other
  fields as last sent (the shape a response that is not streamed has); a tool call's ``extra_content``
  (Gemini's thought signature, on Google's OpenAI-compatible endpoint), ``{"tool_call_id": ...,
  "extra_content": ...}``; and the reasoning that came as ``reasoning_content`` (DeepSeek's thinking,
  which it requires back in the tool loop; also vLLM's, llama.cpp's, Kimi's), ``{"reasoning_content":
  ...}``;
- content may come as a list of chunks (Mistral's): ``text`` ones are text, ``thinking`` ones (Magistral,
  or a reasoning effort) reasoning;
- usage may come in the last chunk (with empty ``choices``) or on every chunk: the last one seen wins; its
  cached input tokens are OpenAI's ``prompt_tokens_details.cached_tokens`` (DeepSeek's
  ``prompt_cache_hit_tokens``), those written to the cache OpenRouter's
  ``prompt_tokens_details.cache_write_tokens``, its reasoning tokens
  ``completion_tokens_details.reasoning_tokens``;
- ``length`` -> ``Finished("length")``; ``content_filter`` or a ``refusal`` delta -> ``Finished("refusal")``
  (the refusal text is yielded as text); ``stop`` with tool calls (some local servers) -> ``tool_calls``;
  a stream with no choices at all -> ``Finished("stop")``;
- a chunk whose fields have types that cannot be read raises :class:`Malformed` (a ``ValueError``), which
  the adapter reports as "is it an OpenAI-compatible endpoint?".

Pure: no I/O, no ``openai`` import, no clock but the one that names a tool call sent without an id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from refagent.acp.text import StreamJoiner, clean_text
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

__all__ = ["KEPT_API", "Assembler", "Malformed"]

KEPT_API = "openai-chat"
"""The :attr:`~refagent.llm.protocol.KeptReasoning.api` of what a Chat Completions server wants back, unless
the adapter names it (by its endpoint: another server never takes it)."""
_JOINED = ("text", "summary", "data")
"""The fields of a reasoning detail that arrive in pieces."""


class Malformed(ValueError):
    """A chunk refagent cannot read (a field of an unexpected type)."""


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] | None = None
    """Its ``extra_content`` (a server's own, such as Gemini's thought signature), wanted back with it."""


class Assembler:
    """Turns chunks (decoded JSON) into events; what is only known at the end comes from :meth:`finish`.

    Chunks are plain dicts, not the ``openai`` package's pydantic models: building those costs ~200 us a
    chunk, 4x the rest of the path (``benchmarks/stream.py``), and provider extras such as
    ``reasoning_content`` are plain keys here. Anything may be missing or ``null``: providers vary.
    """

    def __init__(self, kept_api: str = KEPT_API) -> None:
        self.kept_api = kept_api
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.refused = False
        self.usage: Usage | None = None
        self._text = StreamJoiner()
        self._reasoning = StreamJoiner()
        self._reasoning_content: list[str] = []
        """The reasoning that came as ``reasoning_content``, to keep."""
        self.details: dict[int, dict[str, Any]] = {}
        """OpenRouter's reasoning details so far, by index, but their pieces (:attr:`_pieces`)."""
        self._pieces: dict[tuple[int, str], list[str]] = {}

    def feed(self, chunk: Any) -> Iterator[ModelEvent]:
        try:
            yield from self._feed(chunk)
        except (AttributeError, TypeError, ValueError) as exc:  # a field of an unexpected type
            raise Malformed(f"a chunk refagent cannot read ({exc}): {json.dumps(chunk)[:300]}") from exc

    def _feed(self, chunk: Any) -> Iterator[ModelEvent]:
        if not isinstance(chunk, dict):
            return
        usage = chunk.get("usage")
        if usage:
            self.usage = _usage(usage)
        for choice in chunk.get("choices") or ():
            if choice.get("index"):  # n > 1 is never requested; ignore stray choices
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if not delta:
                continue
            own = delta.get("reasoning_content")
            reasoning = own or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str) and (reasoning := self._reasoning.feed(reasoning)):
                if own:  # the server's own field: it may want it back (DeepSeek's thinking, in the tool loop)
                    self._reasoning_content.append(reasoning)
                yield ReasoningDelta(reasoning)
            content = delta.get("content")
            if content and isinstance(content, str) and (content := self._text.feed(content)):
                yield TextDelta(content)
            elif isinstance(content, list):  # Mistral's chunks: text, and thinking (Magistral, a reasoning effort)
                yield from self._chunks(content)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                self.refused = True
                if refusal := self._text.feed(refusal):
                    yield TextDelta(refusal)
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            for detail in delta.get("reasoning_details") or ():
                self._add_detail(detail)

    def _chunks(self, content: list[Any]) -> Iterator[ModelEvent]:
        for part in content:
            if not isinstance(part, dict):
                continue
            if (
                part.get("type") == "text"
                and isinstance(text := part.get("text"), str)
                and (text := self._text.feed(text))
            ):
                yield TextDelta(text)
            elif part.get("type") == "thinking" and isinstance(thinking := part.get("thinking"), list):
                for piece in thinking:
                    said = piece.get("text") if isinstance(piece, dict) else None
                    if isinstance(said, str) and (said := self._reasoning.feed(said)):
                        yield ReasoningDelta(said)

    def _add_detail(self, detail: Any) -> None:
        if not isinstance(detail, dict):  # not a detail: nothing the model could want back
            return
        index = detail.get("index")
        if not isinstance(index, int):  # none said: a detail of its own
            index = max(self.details, default=-1) + 1
        gathered = self.details.setdefault(index, {})
        for key, value in detail.items():
            if key in _JOINED and isinstance(value, str):
                self._pieces.setdefault((index, key), []).append(value)  # joined once, at the end
            elif key not in gathered or (value is not None and value != ""):
                gathered[key] = value

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        call_id = delta.get("id")
        if not isinstance(index, int):  # some providers omit it: match by id, else continue the last call
            known = [i for i, c in self.calls.items() if call_id and c.id == call_id]
            index = known[0] if known else (max(self.calls) if self.calls and not call_id else len(self.calls))
        call = self.calls.setdefault(index, _PartialCall())
        if call_id and not call.id:
            call.id = str(call_id)
        extra = delta.get("extra_content")
        if isinstance(extra, dict) and extra:
            call.extra = extra
        function = delta.get("function")
        if not function:
            return
        name = function.get("name")
        if name and name != call.name:
            if name.startswith(call.name):
                call.name = name  # the first time, or a provider that sends the name so far
            elif not call.name.startswith(name):
                call.name += name  # a name streamed in pieces
        arguments = function.get("arguments")
        if arguments is not None:  # a provider may send an object instead of a string
            call.arguments.append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def finish(self) -> Iterator[ModelEvent]:
        # A high surrogate that ended the stream never got its other half.
        if reasoning := self._reasoning.flush():
            if self._reasoning_content:
                self._reasoning_content.append(reasoning)
            yield ReasoningDelta(reasoning)
        if text := self._text.flush():
            yield TextDelta(text)
        calls = [  # joined first, then cleaned: a pair split across two chunks of arguments is one character
            ToolCallRequest(
                clean_text(c.id) or f"call_{i}_{time.monotonic_ns():x}",
                clean_text(c.name),
                clean_text("".join(c.arguments)),
            )
            for i, c in sorted(self.calls.items())
        ]
        for (index, key), pieces in self._pieces.items():
            self.details[index][key] = "".join(pieces)
        kept: list[dict[str, Any]] = [{"reasoning_detail": self.details[i]} for i in sorted(self.details)]
        partial = [c for _, c in sorted(self.calls.items())]
        kept += [
            {"tool_call_id": r.id, "extra_content": c.extra} for r, c in zip(calls, partial, strict=True) if c.extra
        ]
        if self._reasoning_content:
            kept.append({"reasoning_content": "".join(self._reasoning_content)})
        if kept:  # before the calls: a turn cancelled between them keeps no call without what it needs back
            yield KeptReasoning(self.kept_api, tuple(kept))
        yield from calls
        if self.usage is not None:
            yield self.usage
        yield Finished(self._reason(bool(calls)))

    def _reason(self, called: bool) -> FinishReason:
        if self.refused or self.finish_reason == "content_filter":
            return "refusal"
        if self.finish_reason == "length":
            return "length"
        # "stop" with tool calls (some local servers), "function_call", or none at all: the calls decide.
        return "tool_calls" if called else "stop"


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    return Usage(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        cached_tokens=int(prompt.get("cached_tokens") or usage.get("prompt_cache_hit_tokens") or 0),
        cache_write_tokens=int(prompt.get("cache_write_tokens") or 0),
        reasoning_tokens=int(completion.get("reasoning_tokens") or 0),
    )
