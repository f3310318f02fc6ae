"""How the scripted server (:mod:`refagent.testing.openai_server`) speaks each model API: a :class:`Wire`
turns a scripted :class:`~refagent.testing.script.Turn` into that API's streamed events or whole response,
its errors and its authentication; and the prompt-cache rules the usage reports: :class:`PrefixCache`
(OpenAI's) and :class:`BreakpointCache` (Anthropic's).

The server routes each ``POST`` by the path's end (:attr:`Wire.path`) to a wire of its own (wires may keep
state, such as the signatures they issued, for the server's life). This module has the Chat Completions
wire (``/chat/completions``); the others are in modules of their own, which build on this one, and
:func:`refagent.testing.openai_server.server_wires` lists them all.

Standard library only, like the server.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from refagent.testing.script import Turn, arguments, pieces, split

__all__ = [
    "CREATED",
    "MIN_CACHED",
    "BreakpointCache",
    "ChatWire",
    "PrefixCache",
    "Rejection",
    "Wire",
    "estimate_tokens",
    "marked",
    "sse",
    "unmarked",
]

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


MIN_CACHED = 1024
"""The fewest tokens a prefix Anthropic caches has (its minimum for most models)."""
LOOKBACK = 20
"""How many blocks back from a breakpoint Anthropic looks for a prefix an earlier request wrote."""


class BreakpointCache:
    """Anthropic's prompt-cache rule: a prompt is blocks in the order the API reads them, each counted by
    :func:`estimate_tokens` over its JSON; the prefix ending at each marked block (a ``cache_control``
    breakpoint) is written when it has at least ``minimum`` tokens; a request reads the longest prefix an
    earlier request wrote (the same blocks, the same model) that ends at one of its breakpoints or, with
    ``lookback``, at one of the ``lookback`` blocks before one (Anthropic looks 20 back), and writes the
    part up to its last breakpoint beyond that. Thread-safe."""

    def __init__(self, minimum: int = MIN_CACHED, lookback: int = 0) -> None:
        self.minimum = minimum
        self.lookback = lookback
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def use(self, model: Any, blocks: Iterable[tuple[Any, bool]]) -> tuple[int, int, int]:
        """The prompt's tokens in all, read from the cache, and written to it, for ``blocks`` (each block,
        without its mark, and whether it was marked); remembers what it wrote."""
        total = 0
        running = hashlib.sha256(str(model).encode())
        prefixes: list[tuple[str, int]] = []  # (the prefix's digest, its tokens) at each block
        marks: list[int] = []  # the blocks marked, by index
        for block, marked in blocks:
            text = json.dumps(block, sort_keys=True)
            running.update(text.encode())
            total += estimate_tokens(text)
            prefixes.append((running.hexdigest(), total))
            if marked:
                marks.append(len(prefixes) - 1)
        looked = {p for mark in marks for p in range(max(0, mark - self.lookback), mark + 1)}
        with self._lock:
            read = max((prefixes[p][1] for p in looked if prefixes[p][0] in self._written), default=0)
            written = 0
            if marks and prefixes[marks[-1]][1] >= self.minimum and prefixes[marks[-1]][1] > read:
                written = prefixes[marks[-1]][1] - read
            self._written.update(prefixes[m][0] for m in marks if prefixes[m][1] >= self.minimum)
        return total, read, written


def marked(block: Any) -> bool:
    """Whether ``block`` (a content block, or a tool) is an Anthropic cache breakpoint."""
    return isinstance(block, dict) and "cache_control" in block


def unmarked(block: Any) -> Any:
    """``block`` without its ``cache_control`` (no part of the content)."""
    if not marked(block):
        return block
    return {key: value for key, value in block.items() if key != "cache_control"}


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
    """OpenAI's Chat Completions: ``chat.completion.chunk`` objects as ``data:`` events, ``[DONE]`` last.

    The usage counts the messages (:func:`estimate_tokens`), and reads nothing from a cache, except for a
    model named as OpenRouter names Claude (``anthropic/...``): then it follows OpenRouter's way with
    Claude (:func:`claude_prompt`, Anthropic's :class:`BreakpointCache` with its 20-block lookback), with
    the tokens read and written in ``prompt_tokens_details`` (``cached_tokens``, ``cache_write_tokens``).
    A turn's ``usage`` and ``cached_tokens`` override what it counts. :attr:`usages` keeps each answer's.

    Claude's thinking on OpenRouter (such a model, and a body that asks for ``reasoning``): a turn's
    reasoning streams as ``reasoning`` and as ``reasoning_details`` pieces of one ``reasoning.text`` detail
    (index 0), whose signature (:meth:`sign`) comes in a last piece; and, as Anthropic requires, a request
    whose conversation ends in tool results is refused (400) unless the assistant message that made the
    calls carries its ``reasoning_details`` back, each signed text unchanged.

    DeepSeek's thinking mode (a model named ``deepseek-reasoner``): as DeepSeek enforces, a request is
    refused (400) when an assistant message that made tool calls does not carry its ``reasoning_content``
    back.

    Gemini 3 on Google's OpenAI-compatible endpoint (a model named ``gemini-3...``): the first tool call of
    a response carries a thought signature (``extra_content.google.thought_signature``, :meth:`sign` of its
    id); as Google enforces, a request is refused (400) when an assistant message of the current turn
    (after the last user message) makes calls whose first does not carry its signature back.
    """

    path = "/chat/completions"

    def __init__(self, secret: bytes | None = None) -> None:
        self.claude_cache = BreakpointCache(lookback=LOOKBACK)
        self.usages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._secret = secret or os.urandom(32)

    def sign(self, thinking: str) -> str:
        """The signature the wire issues for Claude's ``thinking``."""
        return hmac.new(self._secret, thinking.encode(), hashlib.sha256).hexdigest()

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        return headers.get("authorization") == f"Bearer {key}"

    def error(self, status: int, message: str, kind: str) -> dict[str, Any]:
        code: str | int = status
        if status == 401:  # OpenAI's type and code for a wrong key
            kind, code = "invalid_request_error", "invalid_api_key"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def check(self, body: Mapping[str, Any]) -> None:
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        if _gemini3(body):
            self._check_signed_calls(messages)
        if body.get("model") == "deepseek-reasoner":
            for index, message in enumerate(messages):
                if message.get("tool_calls") and not isinstance(message.get("reasoning_content"), str):
                    raise Rejection(
                        400,
                        f"Missing `reasoning_content` field in the assistant message at message index {index}. For "
                        "more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls",
                    )
        if not _thinks(body):
            return
        for message in messages:
            for detail in message.get("reasoning_details") or ():
                if not isinstance(detail, Mapping):
                    raise Rejection(400, "reasoning_details: each must be an object")
                text, signature = detail.get("text"), detail.get("signature")
                if isinstance(signature, str) and signature and signature != self.sign(str(text)):
                    raise Rejection(400, "Invalid `signature` in `thinking` block")
        ending = len(messages)
        while ending and messages[ending - 1].get("role") == "tool":
            ending -= 1
        if ending < len(messages) and ending and not messages[ending - 1].get("reasoning_details"):
            raise Rejection(
                400,
                "Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a "
                "final `assistant` message must start with a thinking block.",
            )

    def _check_signed_calls(self, messages: list[Mapping[str, Any]]) -> None:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        for position, message in enumerate(messages[users[-1] + 1 if users else 0 :]):
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if not isinstance(calls, list) or not calls or not isinstance(calls[0], Mapping):
                continue
            first = calls[0]
            extra = first.get("extra_content")
            google = extra.get("google") if isinstance(extra, Mapping) else None
            signature = google.get("thought_signature") if isinstance(google, Mapping) else None
            if signature != self.sign(str(first.get("id"))):
                name = (first.get("function") or {}).get("name")
                raise Rejection(
                    400,
                    "Function call is missing a thought_signature in functionCall parts. This is required for "
                    f"tools to work correctly. Additional data, function call `default_api:{name}` , position "
                    f"{position + 1}. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures",
                )

    def events(self, turn: Turn, body: Mapping[str, Any], number: int) -> list[bytes]:
        sign = self.sign if _thinks(body) else None
        signs_calls = self.sign if _gemini3(body) else None
        events = [sse(chunk) for chunk in _chunks(turn, body, number, self.usage, sign, signs_calls)]
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
            "usage": self.usage(turn, body, len(pieces(turn.text))),
        }

    def usage(self, turn: Turn, body: Mapping[str, Any], completion: int) -> dict[str, Any]:
        """The usage of the answer to ``body`` (see the class docstring), kept in :attr:`usages`."""
        read = written = 0
        model = str(body.get("model", ""))
        if model.removeprefix("~").startswith("anthropic/"):
            prompt, read, written = self.claude_cache.use(model, claude_prompt(body))
        else:
            prompt = estimate_tokens(body.get("messages", []))
        if turn.usage is not None:
            prompt, completion = turn.usage
        if turn.cached_tokens is not None:
            read, written = turn.cached_tokens, 0
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["total_tokens"] = prompt + completion
        if read or written or turn.cached_tokens is not None:
            read = min(read, prompt)
            usage["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": min(written, prompt - read)}
        with self._lock:
            self.usages.append(usage)
        return usage


def _finish_reason(turn: Turn) -> str | None:
    if turn.finish_reason == "":
        return "tool_calls" if turn.tool_calls else "stop"
    return turn.finish_reason


def claude_prompt(body: Mapping[str, Any]) -> list[tuple[Any, bool]]:
    """A Chat Completions body as OpenRouter hands it to Anthropic, as :class:`BreakpointCache` reads it:
    the tools, the system messages' text, then each other message's blocks (its reasoning details, its text
    or parts, each tool call), each without its ``cache_control`` and whether it had one; a
    ``cache_control`` on the body itself (automatic caching) marks the last block."""
    blocks: list[tuple[Any, bool]] = [(unmarked(tool), marked(tool)) for tool in body.get("tools") or ()]
    messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
    for message in sorted(messages, key=lambda m: m.get("role") != "system"):  # stable: the system first
        content = message.get("content")
        parts = [dict(detail) for detail in message.get("reasoning_details") or ()]  # thinking comes first
        parts += [{"type": "text", "text": content}] if isinstance(content, str) and content else list(content or ())
        parts += [{"type": "tool_use", **call} for call in message.get("tool_calls") or ()]
        for i, part in enumerate(parts):
            plain = unmarked(part)
            blocks.append(({"role": message.get("role"), "block": plain} if i == 0 else plain, marked(part)))
    if blocks and isinstance(body.get("cache_control"), Mapping):
        blocks[-1] = (blocks[-1][0], True)
    return blocks


def _gemini3(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is for Gemini 3 (on Google's endpoint: such models are named so only there)."""
    return str(body.get("model", "")).startswith("gemini-3")


def _thinks(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` asks Claude on OpenRouter to think."""
    return str(body.get("model", "")).removeprefix("~").startswith("anthropic/") and bool(body.get("reasoning"))


def _chunks(
    turn: Turn,
    body: Mapping[str, Any],
    number: int,
    usage_of: Callable[[Turn, Mapping[str, Any], int], dict[str, Any]],
    sign: Callable[[str], str] | None = None,
    signs_calls: Callable[[str], str] | None = None,
) -> Iterator[Mapping[str, Any] | str]:
    """The ``chat.completion.chunk`` objects of a streamed ``turn``, shaped like OpenAI's (``usage_of``: the
    usage of the answer, given its output's tokens; ``sign``: Claude on OpenRouter thinks; ``signs_calls``:
    Gemini 3 signs its first call; see :class:`ChatWire`)."""
    base = {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion.chunk", "created": CREATED}
    base["model"] = body.get("model", "")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    if turn.raw_chunks is not None:
        yield from turn.raw_chunks
        return
    count = 0
    yield chunk({"role": "assistant", "content": ""})
    detail = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}
    for piece in pieces(turn.reasoning):
        count += 1
        if sign is None:
            yield chunk({turn.reasoning_field: piece})
        else:
            yield chunk({"reasoning": piece, "reasoning_details": [{**detail, "text": piece}]})
    if sign is not None and turn.reasoning:
        signature = sign("".join(pieces(turn.reasoning)))
        yield chunk({"reasoning_details": [{**detail, "text": "", "signature": signature}]})
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
            if i == 0 and index == 0 and signs_calls is not None:
                entry["extra_content"] = {"google": {"thought_signature": signs_calls(call_id)}}
            yield chunk({"tool_calls": [entry]})
    usage = usage_of(turn, body, count)
    finish = chunk({}, _finish_reason(turn))
    if turn.usage_mode == "with_finish":
        finish["usage"] = usage
    yield finish
    options = body.get("stream_options")
    if turn.usage_mode == "requested" and isinstance(options, dict) and options.get("include_usage"):
        yield {**base, "choices": [], "usage": usage}
