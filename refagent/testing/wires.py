"""How the scripted server (:mod:`refagent.testing.openai_server`) speaks each model API: a :class:`Wire`
turns a scripted :class:`~refagent.testing.script.Turn` into that API's streamed events or whole response,
its errors and its authentication; and :class:`PrefixCache`, the prompt-cache rule the usage reports.

The server routes each ``POST`` by the path's end (:attr:`Wire.path`) to a wire of its own (wires may keep
state, such as the signatures they issued, for the server's life). This module has the Chat Completions
wire (``/chat/completions``); the others are in modules of their own, which build on this one, and
:func:`refagent.testing.openai_server.server_wires` lists them all.

Standard library only, like the server.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from refagent.testing.script import Turn, arguments, pieces, split

__all__ = ["CREATED", "ChatWire", "PrefixCache", "Rejection", "Wire", "estimate_tokens", "sse"]

CREATED = 1_700_000_000
"""A fixed ``created`` timestamp: responses are byte-for-byte reproducible."""


class Rejection(Exception):
    """A request the API would refuse: answered with ``status`` and the wire's error body for ``message``."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


class Wire(Protocol):
    """One model API as the scripted server speaks it."""

    path: str
    """The end of the path of the ``POST`` it answers (``/chat/completions``)."""

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        """Whether ``headers`` (names lower-cased) carry ``key`` as this API sends keys."""
        ...

    def error(self, status: int, message: str, kind: str) -> dict[str, Any]:
        """The body of an error answer, as this API shapes it (``kind``: OpenAI's error type)."""
        ...

    def check(self, body: Mapping[str, Any]) -> None:
        """Raise :class:`Rejection` for a request the API would refuse (before a turn is taken)."""
        ...

    def events(self, turn: Turn, body: Mapping[str, Any], number: int) -> list[bytes]:
        """The streamed answer to request ``number``, as complete SSE events (each ending ``\\n\\n``)."""
        ...

    def complete(self, turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
        """The whole (not streamed) answer to request ``number``."""
        ...


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One SSE event: ``data`` as JSON (a string as it is), with an ``event:`` line when named."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def estimate_tokens(value: Any) -> int:
    """A request part's size in tokens as the scripted server counts them: its JSON's length over four."""
    return len(value if isinstance(value, str) else json.dumps(value)) // 4


class PrefixCache:
    """OpenAI's documented prompt-cache rule: a request whose prompt is at least ``minimum`` tokens reads
    from the cache the longest prefix it shares with an earlier request under the same key, in steps of
    ``step`` tokens from ``minimum`` on. The prompt is the request's JSON parts in the order the API reads
    them (tools, instructions, then the messages), counted by :func:`estimate_tokens`. The cache keeps the
    last ``keep`` prompts of each key (a real one evicts too; and the server stays fast over a long
    session). Thread-safe."""

    def __init__(self, minimum: int = 1024, step: int = 128, keep: int = 8) -> None:
        self.minimum = minimum
        self.step = step
        self._seen: dict[str, collections.deque[bytes]] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def read(self, key: str, prompt: str) -> int:
        """Tokens of ``prompt`` read from the cache under ``key``; remembers ``prompt`` for later requests."""
        data = prompt.encode("utf-8", "surrogatepass")
        with self._lock:
            earlier = self._seen.setdefault(key, collections.deque(maxlen=self._keep))
            shared = max((_common_prefix(data, e) for e in earlier), default=0)
            earlier.append(data)
        tokens = shared // 4
        if tokens < self.minimum:
            return 0
        return self.minimum + (tokens - self.minimum) // self.step * self.step


def _common_prefix(a: bytes, b: bytes) -> int:
    first, second = memoryview(a), memoryview(b)
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on views: compared in C, and nothing copied
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class ChatWire:
    """OpenAI's Chat Completions: ``chat.completion.chunk`` objects as ``data:`` events, ``[DONE]`` last."""

    path = "/chat/completions"

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        return headers.get("authorization") == f"Bearer {key}"

    def error(self, status: int, message: str, kind: str) -> dict[str, Any]:
        code: str | int = status
        if status == 401:  # OpenAI's type and code for a wrong key
            kind, code = "invalid_request_error", "invalid_api_key"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def check(self, body: Mapping[str, Any]) -> None:
        pass

    def events(self, turn: Turn, body: Mapping[str, Any], number: int) -> list[bytes]:
        events = [sse(chunk) for chunk in _chunks(turn, body, number)]
        events.append(b"data: [DONE]\n\n")
        return events

    def complete(self, turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces(turn.text)) or None}
        if turn.reasoning:
            message[turn.reasoning_field] = "".join(pieces(turn.reasoning))
        if turn.refusal:
            message["refusal"] = "".join(pieces(turn.refusal))
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{number}_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments(call)},
                }
                for i, call in enumerate(turn.tool_calls)
            ]
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": CREATED,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(turn)}],
            "usage": _usage(turn, body, len(pieces(turn.text))),
        }


def _finish_reason(turn: Turn) -> str | None:
    if turn.finish_reason == "":
        return "tool_calls" if turn.tool_calls else "stop"
    return turn.finish_reason


def _usage(turn: Turn, body: Mapping[str, Any], completion: int) -> dict[str, Any]:
    if turn.usage is not None:
        prompt, completion = turn.usage
    else:
        prompt = estimate_tokens(body.get("messages", []))
    total = prompt + completion
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    if turn.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": turn.cached_tokens}
    return usage


def _chunks(turn: Turn, body: Mapping[str, Any], number: int) -> Iterator[Mapping[str, Any] | str]:
    """The ``chat.completion.chunk`` objects of a streamed ``turn``, shaped like OpenAI's."""
    base = {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion.chunk", "created": CREATED}
    base["model"] = body.get("model", "")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    if turn.raw_chunks is not None:
        yield from turn.raw_chunks
        return
    count = 0
    yield chunk({"role": "assistant", "content": ""})
    for piece in pieces(turn.reasoning):
        count += 1
        yield chunk({turn.reasoning_field: piece})
    for piece in pieces(turn.text):
        count += 1
        yield chunk({"content": piece})
    for piece in pieces(turn.refusal):
        count += 1
        yield chunk({"refusal": piece})
    for index, call in enumerate(turn.tool_calls):
        call_id = call.id or f"call_{number}_{index}"
        for i, piece in enumerate(split(arguments(call), turn.argument_chunks)):
            count += 1
            entry: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if i == 0 or turn.repeat_name:
                entry.update(id=call_id, type="function")
                entry["function"] = {"name": call.name, "arguments": piece}
            yield chunk({"tool_calls": [entry]})
    usage = _usage(turn, body, count)
    finish = chunk({}, _finish_reason(turn))
    if turn.usage_mode == "with_finish":
        finish["usage"] = usage
    yield finish
    options = body.get("stream_options")
    if turn.usage_mode == "requested" and isinstance(options, dict) and options.get("include_usage"):
        yield {**base, "choices": [], "usage": usage}
