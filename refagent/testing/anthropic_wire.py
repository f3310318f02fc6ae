"""Anthropic's Messages API as the scripted server (:mod:`refagent.testing.openai_server`) speaks it:
:class:`AnthropicWire` answers ``POST .../v1/messages`` from the same script of
:class:`~refagent.testing.script.Turn`\\ s as every other API.

Its key is the ``x-api-key`` header (or ``Authorization: Bearer``, as the official SDK sends it). Its
errors have Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``, the type from the
status (400 ``invalid_request_error``, 401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 429 ``rate_limit_error``, 529 ``overloaded_error``, another 5xx ``api_error``);
``Fault.status(529)`` plays an overloaded API.

A streamed turn is the events Anthropic documents: ``message_start`` (with the usage), then each block
(``content_block_start``, its deltas, ``content_block_stop``; a ``ping`` after the first block's start),
then ``message_delta`` (the stop reason, the output tokens) and ``message_stop``; each with its ``event:``
line. The turn's reasoning is a ``thinking`` block of ``thinking_delta`` pieces and a ``signature_delta``
whose signature the wire issues (an HMAC of the thinking with a secret of its own, so that it knows its
own signatures for the server's life); its text a ``text`` block (a refusal too, with the stop reason
``refusal``); its tool calls ``tool_use`` blocks (ids ``toolu_<request>_<index>`` unless scripted) whose
arguments come as ``input_json_delta`` pieces (:attr:`Turn.argument_chunks`). Finish reasons: ``length``
is ``max_tokens``, ``stop`` ``end_turn``, ``tool_calls`` ``tool_use``, ``content_filter`` ``refusal``, the
default ``tool_use`` or ``end_turn``; any other is sent as it is. :attr:`Turn.raw_chunks` sends exactly
those events (an object with its type as its ``event:`` line, a string as a bare ``data:`` line). A turn
that is not streamed is the whole ``message`` object.

What it refuses (400 ``invalid_request_error``, in Anthropic's words), before a turn is taken: no
``max_tokens``; a thinking budget under 1024 or not under ``max_tokens``; a temperature other than 1 with
thinking; roles that do not alternate; a message with no content, or an empty text block; more than four
``cache_control`` breakpoints; a ``tool_use`` without its ``tool_result`` in the next message, or a
``tool_result`` without its ``tool_use`` in the one before; a thinking block whose signature does not
match its thinking (one the wire did not issue for it); and, when thinking is enabled, an unfinished tool
loop (the last user message holds only ``tool_result`` blocks) whose assistant message does not start
with a thinking block (Anthropic's documented requirement: the thinking must come back).

The usage follows Anthropic's documented prompt-cache rules (:class:`BreakpointCache`): the prompt is the
tools, then the system, then the messages, in that order, each block counted by
:func:`~refagent.testing.wires.estimate_tokens` over its JSON (without its ``cache_control``, which is no
part of the content); the prefix ending at each ``cache_control`` breakpoint is cached (written) when it
has at least 1024 tokens; a request reads the longest of its breakpoint prefixes that an earlier request
wrote (the same text, the same model), and writes the part up to its last breakpoint beyond that. (Anthropic
also looks up to 20 blocks back from each breakpoint for an earlier one; the wire does not, so a client
must mark where its previous request ended itself.) ``input_tokens`` is the rest, uncached;
``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are in ``message_start``. A turn's
``usage`` sets the whole input (its parts clamped to it) and the output; its ``cached_tokens`` sets the
tokens read (and then none are written). :attr:`AnthropicWire.usages` keeps each answer's usage.

Standard library only, like the server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from refagent.testing.script import Turn, arguments, pieces, split
from refagent.testing.wires import BreakpointCache, Rejection, marked, sse, unmarked

__all__ = ["AnthropicWire"]

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
"""Anthropic's error type for each status (another 5xx: ``api_error``)."""
MAX_BREAKPOINTS = 4
THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def _prompt(body: Mapping[str, Any]) -> Iterator[tuple[Any, bool]]:
    """The prompt's blocks in the order the API reads them, each without its ``cache_control``, and
    whether it was marked."""
    for tool in body.get("tools") or ():
        yield unmarked(tool), marked(tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        yield unmarked(block), marked(block)
    for message in body.get("messages") or ():
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or ()
        for i, block in enumerate(blocks):
            plain = unmarked(block)
            yield ({"role": message.get("role"), "block": plain} if i == 0 else plain), marked(block)


class AnthropicWire:
    """Anthropic's Messages API (see the module docstring)."""

    path = "/messages"

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or os.urandom(32)
        self.cache = BreakpointCache()
        self.usages: list[dict[str, int]] = []
        """The usage of each answer (streamed or not), in the order they were given."""
        self._lock = threading.Lock()

    def sign(self, thinking: str) -> str:
        """The signature the wire issues for ``thinking``."""
        return hmac.new(self._secret, thinking.encode(), hashlib.sha256).hexdigest()

    # -- the Wire protocol ------------------------------------------------------------------

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        # The official SDK (2.17) sends its API key as a bearer token: the API takes either.
        return headers.get("x-api-key") == key or headers.get("authorization") == f"Bearer {key}"

    def error(self, status: int, message: str, kind: str) -> dict[str, Any]:
        if kind not in ERROR_TYPES.values() and kind != "api_error":
            kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def check(self, body: Mapping[str, Any]) -> None:
        if not isinstance(body.get("max_tokens"), int):
            raise Rejection(400, "max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Rejection(
                400, "messages: Field required" if messages is None else "messages: at least one message is required"
            )
        thinking = body.get("thinking")
        enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
        if isinstance(thinking, dict) and enabled:
            _check_thinking(body, thinking)
        marks = sum(1 for _, is_marked in _prompt(body) if is_marked)
        if marks > MAX_BREAKPOINTS:
            raise Rejection(
                400, f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}."
            )
        for i in range(len(messages)):
            self._check_message(messages, i)
        if enabled:
            _check_tool_loop(messages)

    def events(self, turn: Turn, body: Mapping[str, Any], number: int) -> list[bytes]:
        if turn.raw_chunks is not None:
            return [sse(c) if isinstance(c, str) else sse(c, str(c.get("type", ""))) for c in turn.raw_chunks]
        return [sse(event, event["type"]) for event in self._events(turn, body, number)]

    def complete(self, turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
        made = list(self._blocks(turn, number))
        message = self._message(turn, body, number, sum(len(deltas) for _, deltas in made) or 1)
        message["content"] = [block for block, _ in made]
        message["stop_reason"] = _stop_reason(turn)
        return message

    # -- streaming --------------------------------------------------------------------------

    def _events(self, turn: Turn, body: Mapping[str, Any], number: int) -> Iterator[dict[str, Any]]:
        made = list(self._blocks(turn, number))
        message = self._message(turn, body, number, sum(len(deltas) for _, deltas in made) or 1)
        output = message["usage"]["output_tokens"]
        message["usage"]["output_tokens"] = 1  # so far: the stream's end says how many in all
        yield {"type": "message_start", "message": message}
        for index, (block, deltas) in enumerate(made):
            start = dict(block)  # what the deltas will say is not in the start: a block starts empty
            if start["type"] == "tool_use":
                start["input"] = {}
            elif start["type"] == "text":
                start["text"] = ""
            elif start["type"] == "thinking":
                start["thinking"], start["signature"] = "", ""
            yield {"type": "content_block_start", "index": index, "content_block": start}
            if index == 0:
                yield {"type": "ping"}
            for delta in deltas:
                yield {"type": "content_block_delta", "index": index, "delta": delta}
            yield {"type": "content_block_stop", "index": index}
        if not made:
            yield {"type": "ping"}
        delta = {"stop_reason": _stop_reason(turn), "stop_sequence": None}
        yield {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output}}
        yield {"type": "message_stop"}

    def _blocks(self, turn: Turn, number: int) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Each block of the turn, whole, and the deltas it streams as."""
        if turn.reasoning:
            parts = pieces(turn.reasoning)
            thinking = "".join(parts)
            signature = self.sign(thinking)
            deltas = [{"type": "thinking_delta", "thinking": p} for p in parts]
            deltas.append({"type": "signature_delta", "signature": signature})
            yield {"type": "thinking", "thinking": thinking, "signature": signature}, deltas
        text = pieces(turn.text) + pieces(turn.refusal)
        if text:
            block = {"type": "text", "text": "".join(text)}
            yield block, [{"type": "text_delta", "text": p} for p in text]
        for index, call in enumerate(turn.tool_calls):
            raw = arguments(call)
            block = {"type": "tool_use", "id": call.id or f"toolu_{number}_{index}", "name": call.name}
            block["input"] = _object(raw)
            chunks = split(raw, turn.argument_chunks)
            yield block, [{"type": "input_json_delta", "partial_json": c} for c in chunks]

    def _message(self, turn: Turn, body: Mapping[str, Any], number: int, output: int) -> dict[str, Any]:
        """The ``message`` object without its content, its usage counted (and kept)."""
        total, read, written = self.cache.use(body.get("model"), _prompt(body))
        if turn.cached_tokens is not None:
            read, written = turn.cached_tokens, 0
        if turn.usage is not None:
            total, output = turn.usage
        read = min(read, total)
        written = min(written, total - read)
        usage = {
            "input_tokens": total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": output,
        }
        with self._lock:
            self.usages.append(dict(usage))
        return {
            "id": f"msg_scripted_{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }

    # -- checks -----------------------------------------------------------------------------

    def _check_message(self, messages: Sequence[Any], i: int) -> None:
        message = messages[i]
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Rejection(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i > 0 and messages[i - 1].get("role") == role:
            raise Rejection(
                400,
                'messages: roles must alternate between "user" and "assistant", but found multiple '
                f'"{role}" roles in a row',
            )
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not blocks and not (role == "assistant" and i == len(messages) - 1):
            raise Rejection(
                400,
                f"messages.{i}: all messages must have non-empty content except for the optional final assistant "
                "message",
            )
        for j, block in enumerate(blocks or ()):
            if not isinstance(block, dict):
                raise Rejection(400, f"messages.{i}.content.{j}: Input should be a valid dictionary")
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                raise Rejection(400, "messages: text content blocks must be non-empty")
            if kind == "thinking" and not hmac.compare_digest(
                str(block.get("signature", "")), self.sign(str(block.get("thinking", "")))
            ):
                raise Rejection(400, f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        uses = [b.get("id") for b in blocks or () if b.get("type") == "tool_use"]
        following = messages[i + 1].get("content") if i + 1 < len(messages) else None
        answered = {
            b.get("tool_use_id") for b in following or () if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        if uses and role == "assistant" and i + 1 < len(messages) and not set(uses) <= answered:
            missing = ", ".join(str(u) for u in uses if u not in answered)
            raise Rejection(
                400,
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}. "
                "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            )
        previous = messages[i - 1].get("content") if i > 0 else None
        called = {b.get("id") for b in previous or () if isinstance(b, dict) and b.get("type") == "tool_use"}
        for j, block in enumerate(blocks or ()):
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                raise Rejection(
                    400,
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` block "
                    "in the previous message.",
                )


def _check_thinking(body: Mapping[str, Any], thinking: Mapping[str, Any]) -> None:
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        raise Rejection(400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if body["max_tokens"] <= budget:
        raise Rejection(
            400,
            f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
            f"{THINKING_DOCS}#max-tokens-and-context-window-size",
        )
    if body.get("temperature", 1) != 1:
        raise Rejection(
            400, "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation."
        )


def _check_tool_loop(messages: Sequence[Any]) -> None:
    """An unfinished tool loop's assistant message must start with its thinking (thinking enabled)."""
    last = messages[-1]
    content = last.get("content")
    if last.get("role") != "user" or not isinstance(content, list) or not content:
        return
    if any(block.get("type") != "tool_result" for block in content) or len(messages) < 2:
        return
    i = len(messages) - 2
    blocks = messages[i].get("content")
    first = blocks[0].get("type") if isinstance(blocks, list) and blocks else "text"
    if first not in ("thinking", "redacted_thinking"):
        raise Rejection(
            400,
            f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When "
            "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
            "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
            "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
            f"{THINKING_DOCS}",
        )


def _stop_reason(turn: Turn) -> str | None:
    if turn.finish_reason == "":
        if turn.refusal:
            return "refusal"
        return "tool_use" if turn.tool_calls else "end_turn"
    if turn.finish_reason is None:
        return None
    named = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use", "content_filter": "refusal"}
    return named.get(turn.finish_reason, turn.finish_reason)


def _object(raw: str) -> Any:
    """Scripted arguments as a whole answer's ``input`` (arguments that are no JSON object: ``{}``)."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
