"""The script of the scripted model server (:mod:`refagent.testing.openai_server`): the responses it gives,
one :class:`Turn` per request, and the faults it can play, whatever API a request comes through (each API's
form of them is its wire's, :mod:`refagent.testing.wires`).

Standard library only, like the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

__all__ = [
    "Fault",
    "RecordedRequest",
    "ToolCall",
    "Turn",
    "arguments",
    "default_message",
    "pieces",
    "split",
    "turn_from_json",
]

ReasoningField = Literal["reasoning_content", "reasoning"]
UsageMode = Literal["requested", "with_finish", "never"]


@dataclass(frozen=True, slots=True)
class Fault:
    """Something going wrong with one request. Build with :meth:`status` or :meth:`cut`."""

    status_code: int = 0
    retry_after: float | str | None = None
    message: str = ""
    cut_after: int | None = None
    """Close the connection after this many SSE chunks, without finishing the response."""

    @classmethod
    def status(cls, code: int, *, retry_after: float | str | None = None, message: str = "") -> Fault:
        """Answer with HTTP ``code`` and an OpenAI-style error body; ``retry_after`` sets the header."""
        return cls(status_code=code, retry_after=retry_after, message=message or default_message(code))

    @classmethod
    def cut(cls, after: int = 0) -> Fault:
        """Start a 200 streaming response, send ``after`` chunks, then drop the connection."""
        return cls(cut_after=after)


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str | Mapping[str, Any] = ""
    """The raw argument string (it need not be JSON), or an object that is sent as JSON."""
    id: str | None = None
    """Defaults to ``call_<request>_<index>``."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One scripted response. Strings are streamed word by word; sequences of strings chunk by chunk."""

    text: str | Sequence[str] = ""
    reasoning: str | Sequence[str] = ""
    reasoning_field: ReasoningField = "reasoning_content"
    refusal: str | Sequence[str] = ""
    tool_calls: Sequence[ToolCall] = ()
    argument_chunks: int = 3
    """How many chunks each tool call's arguments are split into."""
    repeat_name: bool = False
    """Repeat the tool call's name, id and type in every chunk (as some providers do)."""
    finish_reason: str | None = ""
    """``""``: ``tool_calls`` if there are tool calls, else ``stop``; ``None``: send no finish reason."""
    usage: tuple[int, int] | None = None
    """``(prompt_tokens, completion_tokens)``; default: a count derived from the request and the chunks."""
    cached_tokens: int | None = None
    """Input tokens the usage says were read from the cache; default: what the API's caching rule gives
    (:class:`refagent.testing.wires.PrefixCache`; none for Chat Completions)."""
    usage_mode: UsageMode = "requested"
    """``requested``: a last chunk with empty choices, only when ``stream_options.include_usage`` was asked
    (OpenAI's behaviour); ``with_finish``: on the finish chunk, always; ``never``."""
    raw_chunks: Sequence[Mapping[str, Any] | str] | None = None
    """Send exactly these chunks instead: objects as JSON, strings as they are (``[]``: just ``[DONE]``)."""
    chunk_delay: float = 0.0
    """Seconds between chunks after the first two (slow streaming, for cancel tests)."""
    fault: Fault | None = None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The decoded JSON body (``None`` for a GET)."""
    received: float = 0.0
    """``time.monotonic()`` when the whole request had been read (before its body was parsed)."""
    answered: float = 0.0
    """``time.monotonic()`` when the whole answer had been written (0: not yet, or never)."""


def default_message(code: int) -> str:
    """What a server says with an error status the script gives no message for."""
    return {
        401: "Incorrect API key provided.",
        403: "You are not allowed to use this model.",
        429: "Rate limit reached. Please try again later.",
        500: "The server had an error while processing your request.",
        502: "Bad gateway.",
        503: "The engine is currently overloaded. Please try again later.",
    }.get(code, f"Scripted error {code}.")


def pieces(value: str | Sequence[str]) -> list[str]:
    """How a turn's text is streamed: a string word by word (each word with its space), a sequence as it is."""
    if isinstance(value, str):
        words = value.split(" ")
        return [p for p in (w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)) if p]
    return list(value)


def split(text: str, parts: int) -> list[str]:
    """``text`` in at most ``parts`` pieces of equal size (``[""]`` for no text)."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def arguments(call: ToolCall) -> str:
    """A tool call's arguments as the string a model would stream."""
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


_TURN_FIELDS = frozenset(f.name for f in fields(Turn)) - {"fault", "tool_calls", "usage"}


def turn_from_json(data: Mapping[str, Any]) -> Turn:
    """A :class:`Turn` from its JSON form: an object with its field names, ``fault`` as ``{"status": 429,
    "retry_after": 1}`` or ``{"cut_after": 2}``, tool calls as ``{"name": ..., "arguments": ...}``."""
    unknown = set(data) - _TURN_FIELDS - {"fault", "tool_calls", "usage"}
    if unknown:
        raise ValueError(f"unknown turn fields: {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in _TURN_FIELDS}
    if "usage" in data and data["usage"] is not None:
        kwargs["usage"] = tuple(data["usage"])
    kwargs["tool_calls"] = [ToolCall(**c) for c in data.get("tool_calls", [])]
    fault = data.get("fault")
    if fault is not None:
        if "cut_after" in fault:
            kwargs["fault"] = Fault.cut(int(fault["cut_after"]))
        else:
            kwargs["fault"] = Fault.status(
                int(fault["status"]), retry_after=fault.get("retry_after"), message=fault.get("message", "")
            )
    return Turn(**kwargs)
