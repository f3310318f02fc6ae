"""The Responses API adapter: the real ``openai`` client against the scripted server's Responses wire on
127.0.0.1 (which refuses what the API refuses: reasoning it did not issue, a reasoning item out of place, an
output without its call)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from typing import Any

import anyio
import pytest

from refagent.errors import ModelAuthError, ModelConfigError
from refagent.llm.profiles import RESPONSES_CLIENT, ModelProfile
from refagent.llm.protocol import (
    Finished,
    KeptReasoning,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallRequest,
    ToolSpec,
    Usage,
    kept_reasoning,
)
from refagent.llm.responses_client import ResponsesModel
from refagent.llm.retry import RetryPolicy
from refagent.session.messages import assistant_message, tool_message
from refagent.testing.openai_server import Fault, RecordedRequest, ScriptedOpenAIServer, ToolCall, Turn
from tests.support.model_streams import FAST, HI, collect, collect_failing, of, retries, texts

pytestmark = pytest.mark.anyio

KEY = "sk-test-key"
READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
EFFORTS = ("low", "medium", "high")


@contextmanager
def serving(*turns: Turn, **options: Any) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(turns, **options) as server:
        yield server


def sent(server: ScriptedOpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith("/responses")]


@pytest.fixture(scope="module", autouse=True)
def _openai_imported() -> None:
    """Import ``openai`` (~1 s) before the first test, so that its cost is not charged to one of them."""
    import openai  # noqa: F401


@pytest.fixture
async def models() -> AsyncIterator[list[ResponsesModel]]:
    made: list[ResponsesModel] = []
    yield made
    for model in made:
        await model.aclose()


@pytest.fixture
def model_for(models: list[ResponsesModel]) -> Any:
    def make(server: ScriptedOpenAIServer, *, retry: RetryPolicy = FAST, **fields: Any) -> ResponsesModel:
        profile_fields: dict[str, Any] = {"model": "gpt-test", "base_url": server.base_url, "api_key": KEY}
        profile_fields.update(client=RESPONSES_CLIENT, **fields)
        model = ResponsesModel(ModelProfile("test", "Test", **profile_fields), retry=retry, rand=lambda: 0.0)
        models.append(model)
        return model

    return make


def test_importing_the_adapter_does_not_import_openai() -> None:
    code = "import sys, refagent.llm.responses_client; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- streaming -----------------------------------------------------------------------------------


async def test_text_streams_piece_by_piece_then_usage_then_finished(model_for: Any) -> None:
    with serving(Turn(text=["Hel", "lo, ", "world"], usage=(11, 3))) as server:
        events = await collect(model_for(server))
    assert events == [TextDelta("Hel"), TextDelta("lo, "), TextDelta("world"), Usage(11, 3), Finished("stop")]
    assert sent(server)[0].path == "/v1/responses"


async def test_reasoning_summaries_stream_as_reasoning(model_for: Any) -> None:
    with serving(Turn(reasoning="let me think", text="done")) as server:
        events = await collect(model_for(server, reasoning_efforts=EFFORTS))
    assert [e.text for e in of(events, ReasoningDelta)] == ["let ", "me ", "think"]
    assert texts(events) == ["done"]
    [usage] = of(events, Usage)
    assert usage.reasoning_tokens == 3


async def test_tool_calls_in_pieces_come_complete_after_the_text(model_for: Any) -> None:
    calls = [ToolCall("read_file", {"path": "src/app.py", "limit": 40}), ToolCall("glob", {"pattern": "**/*.md"})]
    with serving(Turn(text="Reading.", tool_calls=calls, argument_chunks=5, usage=(5, 9))) as server:
        events = await collect(model_for(server))
    assert events == [
        TextDelta("Reading."),
        ToolCallRequest("call_1_0", "read_file", '{"path": "src/app.py", "limit": 40}'),
        ToolCallRequest("call_1_1", "glob", '{"pattern": "**/*.md"}'),
        Usage(5, 9),
        Finished("tool_calls"),
    ]


async def test_kept_reasoning_goes_back_in_order_before_the_function_call(model_for: Any) -> None:
    call = ToolCall("read_file", {"path": "a.py"})
    with serving(Turn(reasoning="Read a.py first.", tool_calls=[call]), Turn(text="It is empty.")) as server:
        model = model_for(server, reasoning_efforts=EFFORTS)
        user = {"role": "user", "content": "what is in a.py?"}
        first = await collect(model, ModelRequest([user], [READ], "low", "session-1"))
        [kept] = of(first, KeptReasoning)
        [request] = of(first, ToolCallRequest)
        # The turn keeps it on the assistant message, as the session does.
        history = [user, assistant_message("", [request], kept), tool_message(request.id, "(empty file)")]
        second = await collect(model, ModelRequest(history, [READ], "low", "session-1"))
    assert kept.api == "openai-responses"
    [item] = kept.items
    assert item["type"] == "reasoning"
    assert item["encrypted_content"].startswith("enc_1_")
    assert item["summary"] == [{"type": "summary_text", "text": "Read a.py first."}]
    assert "status" not in item
    assert first.index(kept) < first.index(request)  # kept reasoning, then calls, then usage
    assert kept_reasoning(history[1], RESPONSES_CLIENT) == [item]
    assert "".join(texts(second)) == "It is empty."  # the wire checked the encrypted content it issued
    assert sent(server)[1].body["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "what is in a.py?"}]},
        item,
        {"type": "function_call", "call_id": "call_1_0", "name": "read_file", "arguments": '{"path": "a.py"}'},
        {"type": "function_call_output", "call_id": "call_1_0", "output": "(empty file)"},
    ]


async def test_reasoning_kept_for_another_api_is_left_out(model_for: Any) -> None:
    other = {
        "role": "assistant",
        "content": "Hm.",
        "kept_reasoning": {"api": "anthropic", "items": [{"type": "thinking", "signature": "sig"}]},
    }
    messages = [{"role": "user", "content": "hi"}, other, {"role": "user", "content": "again"}]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(messages))
    assert sent(server)[0].body["input"][1:] == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hm."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
    ]


async def test_reasoning_with_nothing_after_it_is_left_out(model_for: Any) -> None:
    # A response cut before its output: the API refuses a reasoning item that nothing follows.
    kept = KeptReasoning(
        RESPONSES_CLIENT, ({"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "x"},)
    )
    messages = [
        {"role": "user", "content": "hi"},
        assistant_message("", [], kept),
        {"role": "user", "content": "go on"},
    ]
    with serving(Turn(text="ok")) as server:
        events = await collect(model_for(server), ModelRequest(messages))
    assert texts(events) == ["ok"]
    assert [item["role"] for item in sent(server)[0].body["input"]] == ["user", "user"]


# -- what the server is sent ---------------------------------------------------------------------


async def test_the_body(model_for: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read a.py"}]
    request = ModelRequest(messages, [READ], reasoning_effort="high", cache_key="session-1")
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server, reasoning_efforts=EFFORTS, max_output_tokens=4096), request)
    [recorded] = sent(server)
    assert recorded.body == {
        "model": "gpt-test",
        "stream": True,
        "instructions": "Be brief.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Read a.py"}]}],
        "tools": [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file.",
                "parameters": READ.parameters,
                "strict": False,
            }
        ],
        "parallel_tool_calls": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "high", "summary": "auto"},
        "prompt_cache_key": "session-1",
        "max_output_tokens": 4096,
    }
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert recorded.headers["x-stainless-retry-count"] == "0"


async def test_no_reasoning_fields_for_a_model_that_does_not_reason(model_for: Any) -> None:
    with serving(Turn(reasoning="hidden", text="ok"), Turn(text="ok")) as server:
        events = await collect(model_for(server))
        await collect(model_for(server, reasoning_efforts=EFFORTS))
    assert not of(events, ReasoningDelta)
    assert not of(events, KeptReasoning)  # no encrypted content was asked for: nothing to send back
    first, second = (r.body for r in sent(server))
    assert set(first) == {"model", "stream", "input", "store"}
    assert second["reasoning"] == {"summary": "auto"}  # the profile reasons: the model's own effort
    assert second["include"] == ["reasoning.encrypted_content"]


async def test_instructions_and_a_later_system_message(model_for: Any) -> None:
    messages = [
        {"role": "system", "content": "You are refagent."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "The user switched modes."},
    ]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(messages))
    body = sent(server)[0].body
    assert body["instructions"] == "You are refagent.\n\nBe brief."
    assert body["input"][1] == {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "The user switched modes."}],
    }


async def test_images_go_as_input_images(model_for: Any) -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    with serving(Turn(text="A pixel.")) as server:
        await collect(model_for(server, images=True), ModelRequest([{"role": "user", "content": content}]))
    assert sent(server)[0].body["input"][0]["content"] == [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": url, "detail": "auto"},
    ]


async def test_cached_tokens_are_reported(model_for: Any) -> None:
    system = {"role": "system", "content": "You are a careful coding agent. " * 200}
    with serving(Turn(text="one"), Turn(text="two")) as server:
        model = model_for(server)
        first = await collect(model, ModelRequest([system, {"role": "user", "content": "a"}], cache_key="s"))
        second = await collect(model, ModelRequest([system, {"role": "user", "content": "b"}], cache_key="s"))
    [before], [after] = of(first, Usage), of(second, Usage)
    assert before.cached_tokens == 0
    assert after.cached_tokens >= 1024
    assert (after.cached_tokens - 1024) % 128 == 0


# -- how responses end ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (Turn(text="cut", finish_reason="length"), "length"),
        (Turn(text="Sure, here", finish_reason="content_filter"), "refusal"),
        (Turn(refusal="I can't help with that."), "refusal"),
    ],
)
async def test_length_and_refusals(model_for: Any, turn: Turn, reason: str) -> None:
    with serving(turn) as server:
        events = await collect(model_for(server))
    assert events[-1] == Finished(reason)  # type: ignore[arg-type]
    assert "".join(texts(events)) == "".join(turn.text or turn.refusal)


async def test_a_response_that_failed_on_the_server_is_retried(model_for: Any) -> None:
    failed = {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "Try again."}}}
    nested = {"type": "error", "error": {"type": "server_error", "code": "server_error", "message": "Overloaded."}}
    with serving(Turn(raw_chunks=[failed]), Turn(raw_chunks=[nested]), Turn(text="ok")) as server:
        events = await collect(model_for(server))
    assert texts(events) == ["ok"]
    assert [r.attempt for r in retries(events)] == [2, 3]
    assert "Try again. (server_error)" in retries(events)[0].reason
    assert "Overloaded." in retries(events)[1].reason
    assert len(sent(server)) == 3


async def test_a_response_that_failed_on_the_request_is_not_retried(model_for: Any) -> None:
    failed = {"type": "response.failed", "response": {"error": {"code": "invalid_prompt", "message": "Flagged."}}}
    with serving(Turn(raw_chunks=[failed]), Turn(text="ok")) as server:
        _, error = await collect_failing(model_for(server))
    assert "the response failed: Flagged. (invalid_prompt)" in str(error)
    assert f"{server.base_url}/responses" in str(error)
    assert len(sent(server)) == 1


async def test_a_stream_that_stops_after_text_is_cut_off_not_retried(model_for: Any) -> None:
    with serving(Turn(text="one two", finish_reason=None), Turn(text="again")) as server:
        events, error = await collect_failing(model_for(server))
    assert texts(events) == ["one ", "two"]
    assert "cut off" in str(error)
    assert "ended before the response was complete" in str(error)
    assert len(sent(server)) == 1


async def test_a_connection_cut_after_text_is_cut_off(model_for: Any) -> None:
    # created, in_progress, the message item, its content part, then two deltas: the cut.
    with serving(Turn(text="one two three four", fault=Fault.cut(after=6)), Turn(text="again")) as server:
        events, error = await collect_failing(model_for(server))
    assert texts(events) == ["one ", "two "]
    assert not retries(events)
    assert "cut off" in str(error)
    assert len(sent(server)) == 1


async def test_a_connection_cut_before_anything_was_shown_is_retried(model_for: Any) -> None:
    call = ToolCall("glob", {"pattern": "*"})
    with serving(Turn(tool_calls=[call], fault=Fault.cut(after=4)), Turn(tool_calls=[call])) as server:
        events = await collect(model_for(server))
    assert len(retries(events)) == 1
    assert of(events, ToolCallRequest) == [ToolCallRequest("call_2_0", "glob", '{"pattern": "*"}')]


# -- errors --------------------------------------------------------------------------------------


async def test_429_and_5xx_are_retried_visibly(model_for: Any) -> None:
    turns = [Turn(fault=Fault.status(429, retry_after=0.01)), Turn(fault=Fault.status(503)), Turn(text="ok")]
    with serving(*turns) as server:
        events = await collect(model_for(server))
    assert [(r.attempt, r.max_attempts) for r in retries(events)] == [(2, 3), (3, 3)]
    assert retries(events)[0].delay == 0.01
    assert "429" in retries(events)[0].reason
    assert "503" in retries(events)[1].reason
    assert texts(events) == ["ok"]


async def test_a_persistent_failure_names_the_responses_endpoint(model_for: Any) -> None:
    with serving(fallback=Turn(fault=Fault.status(500, message="The server had an error."))) as server:
        _, error = await collect_failing(model_for(server))
    assert f"{server.base_url}/responses answered 500: The server had an error." in str(error)
    assert "3 attempts" in str(error)


async def test_401_is_an_auth_error(model_for: Any) -> None:
    with serving(Turn(text="never"), api_key="the-right-key") as server:
        _, error = await collect_failing(model_for(server, api_key_env="OPENAI_API_KEY"))
    assert isinstance(error, ModelAuthError)
    assert "Incorrect API key provided" in str(error)
    assert "OPENAI_API_KEY" in str(error)
    assert len(sent(server)) == 1


async def test_404_is_a_config_error(model_for: Any) -> None:
    with serving(Turn(fault=Fault.status(404, message="The model `gpt-nope` does not exist."))) as server:
        _, error = await collect_failing(model_for(server, model="gpt-nope"))
    assert isinstance(error, ModelConfigError)
    assert f"{server.base_url}/responses answered 404 for the model 'gpt-nope'" in str(error)


async def test_an_unknown_reasoning_effort_is_said_as_such(model_for: Any) -> None:
    said = "Unsupported value: 'reasoning.effort' does not support 'minimal' with this model."
    with serving(Turn(fault=Fault.status(400, message=said)), Turn(text="ok")) as server:
        _, error = await collect_failing(model_for(server), ModelRequest(HI.messages, reasoning_effort="minimal"))
    assert "does not accept the reasoning effort 'minimal'" in str(error)
    assert len(sent(server)) == 1


async def test_reasoning_summaries_refused_to_the_key_are_no_longer_asked_for(model_for: Any) -> None:
    said = (
        "Your organization must be verified to generate reasoning summaries. Please go to: "
        "https://platform.openai.com/settings/organization/general and click on Verify Organization."
    )
    with serving(Turn(fault=Fault.status(400, message=said)), Turn(text="one"), Turn(text="two")) as server:
        model = model_for(server, reasoning_efforts=EFFORTS)
        first = await collect(model, ModelRequest(HI.messages, reasoning_effort="low"))
        await collect(model, ModelRequest(HI.messages, reasoning_effort="low"))
    assert texts(first) == ["one"]
    assert not retries(first)  # not an attempt: asked again at once
    assert [r.body["reasoning"] for r in sent(server)] == [{"effort": "low", "summary": "auto"}] + [
        {"effort": "low"}
    ] * 2


# -- cancellation --------------------------------------------------------------------------------


async def test_cancel_during_a_slow_stream_closes_the_connection(model_for: Any) -> None:
    with serving(Turn(text=["tick "] * 20, chunk_delay=1.0)) as server:
        model = model_for(server)
        first = anyio.Event()
        seen: list[ModelEvent] = []

        async def consume() -> None:
            async for event in model.stream(HI):
                seen.append(event)
                first.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await first.wait()
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        assert time.monotonic() - cancelled_at < 0.5
        assert texts(seen) == ["tick "]
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)


async def test_leaving_the_stream_early_closes_the_connection(model_for: Any) -> None:
    with serving(Turn(text=["tick "] * 20, chunk_delay=0.5)) as server:
        async with aclosing(model_for(server).stream(HI)) as stream:
            async for _ in stream:
                break
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)
