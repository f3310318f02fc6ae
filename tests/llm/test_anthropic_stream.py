"""Reading a Messages API stream (:mod:`refagent.llm.anthropic_stream`) event by event: what the scripted
server does not send (redacted thinking, surrogate pairs split across deltas, usage repeated at the end,
unknown events) and what is not the Messages API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from refagent.llm.anthropic_stream import Assembler, Malformed, StreamError
from refagent.llm.protocol import (
    Finished,
    KeptReasoning,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    Usage,
)


def start(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-test"}
    return {"type": "message_start", "message": {**message, "usage": usage or {"input_tokens": 5, "output_tokens": 1}}}


def block(index: int, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(reason: str | None, output: int = 3, **usage: Any) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": output, **usage}},
        {"type": "message_stop"},
    ]


def read(events: Iterable[dict[str, Any]]) -> list[ModelEvent]:
    assembler = Assembler()
    out = [event for data in events for event in assembler.feed(data)]
    assert assembler.complete
    return out + list(assembler.finish())


def test_thinking_and_redacted_thinking_are_kept_in_order_and_thinking_is_shown() -> None:
    events = [
        start(),
        block(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="First, "),
        delta(0, type="thinking_delta", thinking="look."),
        delta(0, type="signature_delta", signature="sig-1"),
        stop(0),
        block(1, {"type": "redacted_thinking", "data": "ENCRYPTED"}),
        stop(1),
        block(2, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(2, type="thinking_delta", thinking="Then act."),
        delta(2, type="signature_delta", signature="sig-2"),
        stop(2),
        block(3, {"type": "text", "text": ""}),
        delta(3, type="text_delta", text="Done."),
        stop(3),
        *end("end_turn"),
    ]
    assert read(events) == [
        ReasoningDelta("First, "),
        ReasoningDelta("look."),
        ReasoningDelta("\n\n"),
        ReasoningDelta("Then act."),
        TextDelta("Done."),
        KeptReasoning(
            "anthropic",
            (
                {"type": "thinking", "thinking": "First, look.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "ENCRYPTED"},
                {"type": "thinking", "thinking": "Then act.", "signature": "sig-2"},
            ),
        ),
        Usage(5, 3),
        Finished("stop"),
    ]


def test_a_thinking_block_that_never_got_its_signature_is_not_kept() -> None:
    events = [start(), block(0, {"type": "thinking", "thinking": "hm"}), stop(0), *end("end_turn")]
    assert read(events) == [ReasoningDelta("hm"), Usage(5, 3), Finished("stop")]


def test_tool_calls_come_after_the_text_with_their_arguments_joined() -> None:
    events = [
        start(),
        block(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="Looking."),
        stop(0),
        block(1, {"type": "tool_use", "id": "toolu_a", "name": "glob", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        delta(1, type="input_json_delta", partial_json='{"pattern": '),
        delta(1, type="input_json_delta", partial_json='"*.md"}'),
        stop(1),
        block(2, {"type": "tool_use", "id": "toolu_b", "name": "list_dir", "input": {}}),
        stop(2),
        *end("tool_use"),
    ]
    assert read(events) == [
        TextDelta("Looking."),
        ToolCallRequest("toolu_a", "glob", '{"pattern": "*.md"}'),
        ToolCallRequest("toolu_b", "list_dir", "{}"),
        Usage(5, 3),
        Finished("tool_calls"),
    ]


def test_a_surrogate_pair_split_across_deltas_is_one_character() -> None:
    events = [
        start(),
        block(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="a\ud83d"),
        delta(0, type="text_delta", text="\ude00b"),
        delta(0, type="text_delta", text="c\ud83d"),
        stop(0),
        *end("end_turn"),
    ]
    out = read(events)
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "a\U0001f600bc\ufffd"


def test_usage_counts_every_input_token_and_the_end_overwrites_the_start() -> None:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 200}
    events = [
        start({**usage, "output_tokens": 1}),
        *end("end_turn", output=42, cache_read_input_tokens=3100, output_tokens_details={"thinking_tokens": 30}),
    ]
    assert read(events) == [
        Usage(3310, 42, cached_tokens=3100, cache_write_tokens=200, reasoning_tokens=30),
        Finished("stop"),
    ]


@pytest.mark.parametrize(
    ("reason", "called", "finish"),
    [
        ("end_turn", False, "stop"),
        ("end_turn", True, "tool_calls"),
        ("stop_sequence", False, "stop"),
        ("pause_turn", False, "stop"),
        ("tool_use", True, "tool_calls"),
        ("max_tokens", True, "length"),
        ("model_context_window_exceeded", False, "length"),
        ("refusal", False, "refusal"),
        (None, False, "stop"),
    ],
)
def test_stop_reasons(reason: str | None, called: bool, finish: str) -> None:
    call = [block(0, {"type": "tool_use", "id": "t", "name": "glob", "input": {}}), stop(0)] if called else []
    assert read([start(), *call, *end(reason)])[-1] == Finished(finish)  # type: ignore[arg-type]


def test_pings_unknown_events_unknown_blocks_and_deltas_are_passed_over() -> None:
    events = [
        start(),
        {"type": "ping"},
        {"type": "something_new", "detail": 1},
        block(0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
        delta(0, type="input_json_delta", partial_json="{}"),
        stop(0),
        block(1, {"type": "text", "text": ""}),
        delta(1, type="citations_delta", citation={"cited_text": "x"}),
        delta(1, type="text_delta", text="ok"),
        stop(1),
        *end("end_turn"),
    ]
    assert read(events) == [TextDelta("ok"), Usage(5, 3), Finished("stop")]


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False), ("rate_limit_error", False)],
)
def test_an_error_event_raises_retryable_or_not(kind: str, retryable: bool) -> None:
    assembler = Assembler()
    list(assembler.feed(start()))
    with pytest.raises(StreamError) as caught:
        list(assembler.feed({"type": "error", "error": {"type": kind, "message": "Overloaded"}}))
    assert (caught.value.kind, caught.value.message, caught.value.retryable) == (kind, "Overloaded", retryable)


@pytest.mark.parametrize(
    "event",
    [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []},  # Chat Completions: no type
        [1, 2],
        delta(7, type="text_delta", text="x"),  # a block never started
        {"type": "message_start", "message": "hello"},
        {**block(0, {"type": "text", "text": ""}), "index": "zero"},
    ],
)
def test_what_is_not_the_messages_api_is_malformed(event: Any) -> None:
    with pytest.raises(Malformed):
        list(Assembler().feed(event))


def test_a_delta_of_the_wrong_type_is_malformed() -> None:
    assembler = Assembler()
    list(assembler.feed(block(0, {"type": "text", "text": ""})))
    with pytest.raises(Malformed):
        list(assembler.feed(delta(0, type="text_delta", text=5)))


def test_a_stream_without_message_stop_is_not_complete() -> None:
    assembler = Assembler()
    list(assembler.feed(start()))
    assert assembler.started
    assert not assembler.complete
