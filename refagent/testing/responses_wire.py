"""OpenAI's Responses API as the scripted server (:mod:`refagent.testing.openai_server`) speaks it:
:class:`ResponsesWire`, answering ``POST .../responses``.

A streamed answer (``"stream": true``) is the event sequence the API documents, each SSE event with its
``event:`` line and a ``sequence_number`` counting from 0: ``response.created`` and
``response.in_progress`` (the response so far, ``in_progress``, no output), then the output items in
order, each opened by ``response.output_item.added`` and closed by ``response.output_item.done`` (the whole
item):

- the turn's reasoning: a ``reasoning`` item whose summary (one part, when the request asks for one with
  ``reasoning.summary``) streams as ``response.reasoning_summary_part.added``,
  ``response.reasoning_summary_text.delta`` ..., ``.done`` and ``response.reasoning_summary_part.done``;
  when the request's ``include`` has ``reasoning.encrypted_content``, the finished item carries an
  ``encrypted_content`` the wire issues (``enc_<request number>_<hash>``) and remembers;
- the turn's text and refusal: one assistant ``message`` item, each a content part
  (``response.content_part.added``, ``response.output_text.delta`` or ``response.refusal.delta`` ...,
  their ``.done``, ``response.content_part.done``);
- each tool call: a ``function_call`` item (``call_id``, ``name``), its arguments in
  ``response.function_call_arguments.delta`` pieces, then ``.done``;

and last ``response.completed``, or ``response.incomplete`` for a turn whose ``finish_reason`` is
``length`` (``max_output_tokens``) or ``content_filter``, with the whole response and its usage. A turn whose
``finish_reason`` is ``None`` ends without either (the stream just stops); ``raw_chunks`` are sent as
they are (objects as JSON, with their ``type`` as the ``event:`` line). Not streamed: the whole
``response`` object.

Usage: ``input_tokens`` is the prompt's size (:func:`estimate_tokens` of the prompt in the API's order:
tools, instructions, input; :func:`prompt_text`), ``cached_tokens`` what OpenAI's documented prefix-cache
rule reads of it (:class:`~refagent.testing.wires.PrefixCache`: 1024 tokens at least, in steps of 128),
under the request's ``prompt_cache_key`` (requests without one share a bucket) unless the turn says
(``Turn.cached_tokens``); ``output_tokens`` counts the pieces streamed, ``reasoning_tokens`` those of the
reasoning; a turn's ``usage`` overrides the first two, ``usage_mode="never"`` sends none.

What the API would refuse is refused before a turn is taken (:meth:`ResponsesWire.check`, a 400 in OpenAI's
error shape and wording): ``previous_response_id`` with ``store: false``; a ``reasoning`` input item without
``encrypted_content``, with one the wire never issued, or with no item after it (the API wants a reasoning
item followed by the output it led to); a ``function_call_output`` whose ``call_id`` no earlier
``function_call`` of the input has. Keys go as ``Authorization: Bearer``, as for Chat Completions.

Standard library only, like the server.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from refagent.testing.script import Turn, arguments, pieces, split
from refagent.testing.wires import CREATED, ChatWire, PrefixCache, Rejection, estimate_tokens, sse

__all__ = ["ResponsesWire", "prompt_text"]

ENCRYPTED_CONTENT = "reasoning.encrypted_content"
"""What a request's ``include`` lists to get reasoning items' encrypted content."""


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt of a request as the wire measures and caches it: its tools, instructions and input, in
    that order (the order the API reads them in), as JSON."""
    parts = (body.get("tools") or [], body.get("instructions") or "", body.get("input") or [])
    return "".join(json.dumps(part) for part in parts)


class ResponsesWire:
    """OpenAI's Responses API (see the module docstring). One per server: it remembers the encrypted
    content it issued and the prompts it cached, for the server's life. Thread-safe."""

    path = "/responses"

    def __init__(self) -> None:
        self.cache = PrefixCache()
        self._issued: set[str] = set()
        self._lock = threading.Lock()

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        return headers.get("authorization") == f"Bearer {key}"

    def error(self, status: int, message: str, kind: str) -> dict[str, Any]:
        return ChatWire().error(status, message, kind)  # one shape for all of OpenAI's APIs

    def check(self, body: Mapping[str, Any]) -> None:
        previous = body.get("previous_response_id")
        if previous and body.get("store") is False:
            raise Rejection(
                400,
                f"Previous response with id '{previous}' not found. Responses are not persisted when `store` "
                "is set to false.",
            )
        items = body.get("input")
        if not isinstance(items, list):
            return
        calls: set[str] = set()
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise Rejection(400, f"Invalid type for 'input[{index}]': expected an object.")
            kind = item.get("type")
            if kind == "reasoning":
                self._check_reasoning(item, items[index + 1 :], body)
            elif kind == "function_call":
                calls.add(str(item.get("call_id")))
            elif kind == "function_call_output" and str(item.get("call_id")) not in calls:
                raise Rejection(400, f"No tool call found for function call output with call_id {item.get('call_id')}.")

    def _check_reasoning(self, item: Mapping[str, Any], after: list[Any], body: Mapping[str, Any]) -> None:
        item_id = item.get("id")
        encrypted = item.get("encrypted_content")
        if not encrypted:
            stored = "" if body.get("store") is not False else " Items are not persisted when `store` is set to false."
            raise Rejection(400, f"Item with id '{item_id}' not found.{stored}")
        with self._lock:
            issued = encrypted in self._issued
        if not issued:
            raise Rejection(
                400,
                f"The encrypted content for item {item_id} could not be verified. Reason: Encrypted content "
                "could not be decrypted or parsed.",
            )
        following = after[0] if after else None
        if not isinstance(following, dict) or not (
            following.get("type") in ("reasoning", "function_call")
            or (following.get("type", "message") == "message" and following.get("role") == "assistant")
        ):
            raise Rejection(
                400, f"Item '{item_id}' of type 'reasoning' was provided without its required following item."
            )

    def events(self, turn: Turn, body: Mapping[str, Any], number: int) -> list[bytes]:
        if turn.raw_chunks is not None:
            return [sse(chunk, chunk.get("type") if isinstance(chunk, Mapping) else None) for chunk in turn.raw_chunks]
        events, _ = self._answer(turn, body, number)
        return [sse({**event, "sequence_number": i}, event["type"]) for i, event in enumerate(events)]

    def complete(self, turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
        _, response = self._answer(turn, body, number)
        return response

    # -- the answer ----------------------------------------------------------------------------------

    def _answer(self, turn: Turn, body: Mapping[str, Any], number: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The events of a streamed answer to ``turn`` (without sequence numbers), and the final response."""
        events: list[dict[str, Any]] = []
        output: list[dict[str, Any]] = []
        start = _response(body, number, "in_progress", [], None)
        events += [{"type": "response.created", "response": start}, {"type": "response.in_progress", "response": start}]
        reasoning = pieces(turn.reasoning)
        if reasoning:
            self._reasoning(events, output, reasoning, body, number)
        count = len(reasoning)
        if turn.text or turn.refusal:
            count += _message(events, output, pieces(turn.text), pieces(turn.refusal), number)
        for index, call in enumerate(turn.tool_calls):
            call_id = call.id or f"call_{number}_{index}"
            count += _function_call(events, output, call_id, call.name, split(arguments(call), turn.argument_chunks))
        status, details = "completed", None
        if turn.finish_reason in ("length", "content_filter"):
            status = "incomplete"
            details = {"reason": "max_output_tokens" if turn.finish_reason == "length" else "content_filter"}
        response = _response(body, number, status, output, self._usage(turn, body, count, len(reasoning)))
        response["incomplete_details"] = details
        if turn.finish_reason is not None:
            events.append({"type": f"response.{status}", "response": response})
        return events, response

    def _reasoning(
        self,
        events: list[dict[str, Any]],
        output: list[dict[str, Any]],
        parts: list[str],
        body: Mapping[str, Any],
        number: int,
    ) -> None:
        item_id = f"rs_{number}_{len(output)}"
        text = "".join(parts)
        events.append(
            {"type": "response.output_item.added", "output_index": len(output), "item": _reasoning_item(item_id, [])}
        )
        summary: list[dict[str, Any]] = []
        reasoning = body.get("reasoning")
        if isinstance(reasoning, Mapping) and reasoning.get("summary"):
            where = {"item_id": item_id, "output_index": len(output), "summary_index": 0}
            events.append({"type": "response.reasoning_summary_part.added", **where, "part": _summary("")})
            events += [{"type": "response.reasoning_summary_text.delta", **where, "delta": p} for p in parts]
            events.append({"type": "response.reasoning_summary_text.done", **where, "text": text})
            events.append({"type": "response.reasoning_summary_part.done", **where, "part": _summary(text)})
            summary = [_summary(text)]
        item = _reasoning_item(item_id, summary)
        if ENCRYPTED_CONTENT in (body.get("include") or ()):
            item["encrypted_content"] = self._issue(number, text)
        _done(events, output, item)

    def _issue(self, number: int, text: str) -> str:
        """Encrypted content for a reasoning item of request ``number``, remembered so that :meth:`check`
        knows it when it comes back."""
        encrypted = f"enc_{number}_{hashlib.sha256(f'{number}:{text}'.encode()).hexdigest()[:16]}"
        with self._lock:
            self._issued.add(encrypted)
        return encrypted

    def _usage(self, turn: Turn, body: Mapping[str, Any], count: int, reasoning: int) -> dict[str, Any] | None:
        prompt = prompt_text(body)
        cached = self.cache.read(str(body.get("prompt_cache_key") or ""), prompt)  # remembered in any case
        if turn.usage_mode == "never":
            return None
        inputs, outputs = turn.usage if turn.usage is not None else (estimate_tokens(prompt), count)
        cached = min(cached, inputs) if turn.cached_tokens is None else turn.cached_tokens
        return {
            "input_tokens": inputs,
            # cache_write_tokens: in the SDK's schema (required); the wire counts none
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": outputs,
            "output_tokens_details": {"reasoning_tokens": min(reasoning, outputs)},
            "total_tokens": inputs + outputs,
        }


def _message(
    events: list[dict[str, Any]], output: list[dict[str, Any]], text: list[str], refusal: list[str], number: int
) -> int:
    """Add the assistant message item of ``text`` and ``refusal`` (each a content part when not empty);
    how many pieces were streamed."""
    item_id = f"msg_{number}_{len(output)}"
    item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    events.append({"type": "response.output_item.added", "output_index": len(output), "item": item})
    content: list[dict[str, Any]] = []
    for kind, parts in (("output_text", text), ("refusal", refusal)):
        if not parts:
            continue
        where = {"item_id": item_id, "output_index": len(output), "content_index": len(content)}
        whole = "".join(parts)
        part: dict[str, Any]
        extra: dict[str, Any]
        if kind == "output_text":  # text parts have annotations, their events logprobs (none asked for)
            field, events_of, part, extra = "text", "response.output_text", {"annotations": []}, {"logprobs": []}
        else:
            field, events_of, part, extra = "refusal", "response.refusal", {}, {}
        events.append({"type": "response.content_part.added", **where, "part": {"type": kind, field: "", **part}})
        events += [{"type": f"{events_of}.delta", **where, "delta": p, **extra} for p in parts]
        events.append({"type": f"{events_of}.done", **where, field: whole, **extra})
        events.append({"type": "response.content_part.done", **where, "part": {"type": kind, field: whole, **part}})
        content.append({"type": kind, field: whole, **part})
    _done(events, output, {**item, "status": "completed", "content": content})
    return len(text) + len(refusal)


def _function_call(
    events: list[dict[str, Any]], output: list[dict[str, Any]], call_id: str, name: str, pieces: list[str]
) -> int:
    """Add a function call item whose arguments stream as ``pieces``; how many pieces were streamed."""
    item_id = f"fc_{call_id}"
    item = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call_id}
    item["name"] = name
    where = {"item_id": item_id, "output_index": len(output)}
    events.append({"type": "response.output_item.added", "output_index": len(output), "item": item})
    events += [{"type": "response.function_call_arguments.delta", **where, "delta": p} for p in pieces]
    whole = "".join(pieces)
    events.append({"type": "response.function_call_arguments.done", **where, "arguments": whole})
    _done(events, output, {**item, "status": "completed", "arguments": whole})
    return len(pieces)


def _done(events: list[dict[str, Any]], output: list[dict[str, Any]], item: dict[str, Any]) -> None:
    events.append({"type": "response.output_item.done", "output_index": len(output), "item": item})
    output.append(item)


def _reasoning_item(item_id: str, summary: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": summary}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _response(
    body: Mapping[str, Any], number: int, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``response`` object, with what the request asked for echoed as the API does."""
    asked = body.get("reasoning")
    reasoning: Mapping[str, Any] = asked if isinstance(asked, Mapping) else {}
    return {
        "id": f"resp_scripted_{number}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model", ""),
        "output": list(output),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": body.get("store", True),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }
