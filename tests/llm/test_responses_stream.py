"""Reading a Responses API stream: the pure assembler, fed the events the API documents (as decoded JSON)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from refagent.llm.openai_stream import Malformed
from refagent.llm.protocol import (
    Finished,
    KeptReasoning,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    Usage,
)
from refagent.llm.responses_stream import ResponseFailed, ResponsesAssembler, retryable_code

USAGE = {
    "input_tokens": 2000,
    "input_tokens_details": {"cached_tokens": 1536},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 25},
    "total_tokens": 2040,
}


def run(events: Iterable[Any]) -> list[ModelEvent]:
    assembler = ResponsesAssembler()
    out: list[ModelEvent] = []
    for event in events:
        out.extend(assembler.feed(event))
    out.extend(assembler.finish())
    return out


def completed(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "response.completed", "response": {"status": "completed", "usage": usage}}


def incomplete(reason: str) -> dict[str, Any]:
    response = {"status": "incomplete", "incomplete_details": {"reason": reason}, "usage": USAGE}
    return {"type": "response.incomplete", "response": response}


def text(delta: str, item: str = "msg_1", part: int = 0) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item,
        "output_index": 1,
        "content_index": part,
        "delta": delta,
    }


def summary(delta: str, part: int = 0, item: str = "rs_1") -> dict[str, Any]:
    return {
        "type": "response.reasoning_summary_text.delta",
        "item_id": item,
        "output_index": 0,
        "summary_index": part,
        "delta": delta,
    }


def call_added(index: int, call_id: str, name: str) -> dict[str, Any]:
    item = {"id": f"fc_{index}", "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}
    return {"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress"}}


def arguments(index: int, delta: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": f"fc_{index}",
        "output_index": index,
        "delta": delta,
    }


def reasoning_done(item_id: str, encrypted: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": "Hm."}]}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return {"type": "response.output_item.done", "output_index": 0, "item": {**item, "status": "completed"}}


def test_text_then_usage_then_one_finished() -> None:
    events = run([{"type": "response.created", "response": {}}, text("Hel"), text("lo"), completed(USAGE)])
    assert events == [
        TextDelta("Hel"),
        TextDelta("lo"),
        Usage(2000, 40, cached_tokens=1536, reasoning_tokens=25),
        Finished("stop"),
    ]


def test_summary_parts_and_content_parts_are_separated_by_a_blank_line() -> None:
    events = run(
        [
            summary("**Plan**"),
            summary(" read it"),
            summary("**Then**", part=1),
            {
                "type": "response.reasoning_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "raw",
            },
            text("One."),
            text("Two.", item="msg_2"),
            completed(),
        ]
    )
    thought = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert thought == "**Plan** read it\n\n**Then**\n\nraw"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "One.\n\nTwo."


def test_a_surrogate_pair_split_across_deltas_is_joined_and_a_lone_one_replaced() -> None:
    events = run([text("a\ud83d"), text("\ude00b"), summary("x\ud83d"), completed()])
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a\U0001f600b"
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "x\ufffd"


def test_function_calls_in_pieces_come_at_the_end_in_output_order_after_the_kept_reasoning() -> None:
    events = run(
        [
            reasoning_done("rs_a", "enc-a"),
            call_added(2, "call_b", "glob"),
            call_added(1, "call_a", "read_file"),
            arguments(1, '{"path": '),
            arguments(2, '{"pattern": "*"}'),
            arguments(1, '"a.py"}'),
            reasoning_done("rs_b", None),  # no encrypted content: nothing to send back with store false
            completed(USAGE),
        ]
    )
    assert events == [
        KeptReasoning(
            "openai-responses",
            (
                {
                    "id": "rs_a",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "Hm."}],
                    "encrypted_content": "enc-a",
                },
            ),
        ),
        ToolCallRequest("call_a", "read_file", '{"path": "a.py"}'),
        ToolCallRequest("call_b", "glob", '{"pattern": "*"}'),
        Usage(2000, 40, cached_tokens=1536, reasoning_tokens=25),
        Finished("tool_calls"),
    ]


def test_the_whole_arguments_of_done_win_over_the_pieces() -> None:
    done = {"type": "response.function_call_arguments.done", "item_id": "fc_0", "output_index": 0, "arguments": "{}"}
    item_done = {
        "type": "response.output_item.done",
        "output_index": 1,
        "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"q": 1}'},
    }
    events = run(
        [call_added(0, "c0", "glob"), arguments(0, '{"pat'), done, call_added(1, "c1", "grep"), item_done, completed()]
    )
    calls = [e for e in events if isinstance(e, ToolCallRequest)]
    assert calls == [ToolCallRequest("c0", "glob", "{}"), ToolCallRequest("c1", "grep", '{"q": 1}')]


def test_a_refusal_is_text_and_ends_in_refusal() -> None:
    refusal = {"type": "response.refusal.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}
    events = run([{**refusal, "delta": "I can't "}, {**refusal, "delta": "help."}, completed()])
    assert events == [TextDelta("I can't "), TextDelta("help."), Finished("refusal")]


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "refusal"), ("max_messages", "length")]
)
def test_an_incomplete_response(reason: str, finish: Any) -> None:
    events = run([text("cut"), incomplete(reason)])
    assert events[-2:] == [Usage(2000, 40, cached_tokens=1536, reasoning_tokens=25), Finished(finish)]


def test_calls_of_a_response_cut_short_still_come_but_it_ends_length() -> None:
    events = run([call_added(0, "c0", "glob"), arguments(0, "{"), incomplete("max_output_tokens")])
    assert ToolCallRequest("c0", "glob", "{") in events
    assert events[-1] == Finished("length")


@pytest.mark.parametrize(
    ("event", "retryable", "said"),
    [
        (
            {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "Try again."}}},
            True,
            "the response failed: Try again. (server_error)",
        ),
        (
            {"type": "response.failed", "response": {"error": {"code": "invalid_prompt", "message": "No."}}},
            False,
            "the response failed: No. (invalid_prompt)",
        ),
        ({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down."}, True, "Slow down."),
        ({"type": "error", "error": {"type": "server_error", "code": None, "message": "Oops."}}, True, "Oops."),
        ({"type": "error", "code": "context_length_exceeded", "message": "Too long."}, False, "Too long."),
    ],
)
def test_failures_in_the_stream_say_whether_to_retry(event: dict[str, Any], retryable: bool, said: str) -> None:
    with pytest.raises(ResponseFailed) as caught:
        run([text("a"), event])
    assert caught.value.retryable is retryable
    assert said in caught.value.message


def test_a_stream_that_ends_before_the_response_did_is_a_cut() -> None:
    with pytest.raises(ResponseFailed, match="ended before the response was complete") as caught:
        run([text("half")])
    assert caught.value.retryable


def test_an_event_of_the_wrong_shape_is_malformed() -> None:
    with pytest.raises(Malformed, match="cannot read"):
        run([{"type": "response.output_text.delta", "delta": 42}])


def test_unknown_events_and_items_are_ignored() -> None:
    events = run(
        [
            {"type": "response.web_search_call.in_progress", "output_index": 0},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "web_search_call"}},
            "not an object",
            completed(),
        ]
    )
    assert events == [Finished("stop")]


def test_retryable_codes() -> None:
    assert retryable_code("server_error")
    assert retryable_code(None, 503)
    assert retryable_code("429")
    assert not retryable_code("invalid_request_error", None, 400)
