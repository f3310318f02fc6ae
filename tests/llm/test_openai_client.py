"""The OpenAI adapter: the real ``openai`` client against the scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from typing import Any

import anyio
import pytest

from refagent.errors import ModelAuthError, ModelError
from refagent.llm.openai_client import NO_KEY, OpenAIModel, _rejects_kept
from refagent.llm.profiles import ModelProfile
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
)
from refagent.llm.retry import RetryPolicy
from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn
from tests.support.model_streams import FAST, HI, collect, collect_failing, retries, texts
from tests.support.process_sessions import chat_wire

pytestmark = pytest.mark.anyio

KEY = "sk-test-key"


@contextmanager
def serving(*turns: Turn, **options: Any) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(turns, **options) as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def _openai_imported() -> None:
    """Import ``openai`` (~1 s) before the first test, so that its cost is not charged to one of them."""
    import openai  # noqa: F401


@pytest.fixture
async def models() -> AsyncIterator[list[OpenAIModel]]:
    """Models made in a test, closed after it."""
    made: list[OpenAIModel] = []
    yield made
    for model in made:
        await model.aclose()


@pytest.fixture
def model_for(models: list[OpenAIModel]) -> Any:
    def make(server: ScriptedOpenAIServer, *, retry: RetryPolicy = FAST, **fields: Any) -> OpenAIModel:
        profile_fields: dict[str, Any] = {"model": "gpt-test", "base_url": server.base_url, "api_key": KEY}
        profile_fields.update(fields)
        model = OpenAIModel(ModelProfile("test", "Test", **profile_fields), retry=retry, rand=lambda: 0.0)
        models.append(model)
        return model

    return make


# -- importing -----------------------------------------------------------------------------------


def test_importing_the_adapter_config_and_server_does_not_import_openai() -> None:
    code = (
        "import sys, refagent.llm.openai_client, refagent.config, refagent.config.clients, "
        "refagent.testing.openai_server; "
        "print('openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- streaming -----------------------------------------------------------------------------------


async def test_text_streams_chunk_by_chunk_then_usage_then_finished(model_for: Any) -> None:
    with serving(Turn(text=["Hel", "lo, ", "world"], usage=(11, 3))) as server:
        events = await collect(model_for(server))
    assert events == [TextDelta("Hel"), TextDelta("lo, "), TextDelta("world"), Usage(11, 3), Finished("stop")]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_from_either_field(model_for: Any, field: Any) -> None:
    with serving(Turn(reasoning="let me think", reasoning_field=field, text="done")) as server:
        events = await collect(model_for(server))
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["let ", "me ", "think"]
    assert texts(events) == ["done"]


async def test_reasoning_sent_in_both_fields_is_yielded_once(model_for: Any) -> None:
    delta = {"reasoning_content": "hmm", "reasoning": "hmm"}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]}]
    with serving(Turn(raw_chunks=chunks)) as server:
        model = model_for(server)
        events = await collect(model)
    kept = KeptReasoning(f"openai-chat {server.base_url}", ({"reasoning_content": "hmm"},))  # its own, kept once
    assert events == [ReasoningDelta("hmm"), kept, Finished("stop")]


async def test_tool_calls_are_assembled_from_split_chunks_after_the_text(model_for: Any) -> None:
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


async def test_a_name_and_id_repeated_in_every_chunk_are_not_concatenated(model_for: Any) -> None:
    call = ToolCall("edit_file", {"path": "a", "old_string": "x", "new_string": "y"}, id="call_abc")
    with serving(Turn(tool_calls=[call], repeat_name=True, argument_chunks=6)) as server:
        events = await collect(model_for(server))
    [request] = [e for e in events if isinstance(e, ToolCallRequest)]
    assert request == ToolCallRequest("call_abc", "edit_file", json.dumps(call.arguments))


async def test_arguments_that_are_not_json_are_passed_through_raw(model_for: Any) -> None:
    with serving(Turn(tool_calls=[ToolCall("read_file", '{"path": "a.py"')])) as server:
        events = await collect(model_for(server))
    assert ToolCallRequest("call_1_0", "read_file", '{"path": "a.py"') in events


async def test_stop_with_tool_calls_means_tool_calls(model_for: Any) -> None:
    # Some local servers say "stop" although the model called a tool: the calls decide.
    with serving(Turn(tool_calls=[ToolCall("glob", {"pattern": "*"})], finish_reason="stop")) as server:
        events = await collect(model_for(server))
    assert events[-1] == Finished("tool_calls")


async def test_tool_call_deltas_without_index_or_with_a_missing_id(model_for: Any) -> None:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(call: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": finish}]}

    chunks = [
        chunk({"id": "a", "function": {"name": "glob", "arguments": '{"pat'}}),
        chunk({"function": {"arguments": 'tern": "*"}'}}),
        chunk({"index": 1, "function": {"name": "grep", "arguments": "{}"}}, "tool_calls"),
    ]
    with serving(Turn(raw_chunks=chunks)) as server:
        events = await collect(model_for(server))
    calls = [e for e in events if isinstance(e, ToolCallRequest)]
    assert next((c.id, c.name, c.arguments) for c in calls) == ("a", "glob", '{"pattern": "*"}')
    assert calls[1].name == "grep"
    assert calls[1].id  # made up, so the history can pair the call with its result


async def test_an_empty_stream_finishes_with_stop(model_for: Any) -> None:
    with serving(Turn(raw_chunks=[])) as server:
        assert await collect(model_for(server)) == [Finished("stop")]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("requested", [Usage(7, 2)]), ("with_finish", [Usage(7, 2)]), ("never", [])],
)
async def test_usage_wherever_the_provider_puts_it(model_for: Any, mode: Any, expected: list[Usage]) -> None:
    with serving(Turn(text="a b", usage=(7, 2), usage_mode=mode)) as server:
        events = await collect(model_for(server))
    assert [e for e in events if isinstance(e, Usage)] == expected
    assert events[-1] == Finished("stop")


async def test_cached_input_tokens_are_read_from_the_usage(model_for: Any) -> None:
    with serving(Turn(text="a", usage=(2000, 2), cached_tokens=1536)) as server:
        events = await collect(model_for(server))
    assert [e for e in events if isinstance(e, Usage)] == [Usage(2000, 2, cached_tokens=1536)]


async def test_the_body_is_plain_json_with_no_keys_of_refagents_own(model_for: Any) -> None:
    kept = {"role": "assistant", "content": "hm", "kept_reasoning": {"api": "anthropic", "items": [{"x": 1}]}}
    request = ModelRequest([{"role": "user", "content": "hi"}, kept], cache_key="s-1")
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), request)
    body = server.chat_requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hm"}]
    assert "prompt_cache_key" not in body  # only OpenAI's host routes by it
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_on_openais_host_the_session_key_routes_to_its_cache() -> None:
    model = OpenAIModel(ModelProfile("o", "O", model="gpt-test", api_key=KEY))  # base_url: OpenAI's
    body = model._body("gpt-test", ModelRequest([{"role": "user", "content": "hi"}], cache_key="s-1"))
    assert body["prompt_cache_key"] == "s-1"


SYSTEM = {"role": "system", "content": "You are refagent."}
OPENROUTER = "https://openrouter.ai/api/v1"


def openrouter_body(model: str, base_url: str = OPENROUTER, profile_id: str = "o") -> dict[str, Any]:
    client = OpenAIModel(ModelProfile(profile_id, "O", model=model, base_url=base_url, api_key=KEY))
    return client._body(model, ModelRequest([SYSTEM, {"role": "user", "content": "hi"}], cache_key="s-1"))


def test_claude_on_openrouter_asks_for_caching_where_anthropic_wants_it() -> None:
    """Claude caches nothing unasked: the body asks for OpenRouter's automatic caching (the moving end), the
    system prompt is a breakpoint of its own, and the session keeps to one upstream provider."""
    body = openrouter_body("anthropic/claude-sonnet-4.5")
    assert body["cache_control"] == {"type": "ephemeral"}
    assert body["session_id"] == "s-1"
    assert body["messages"] == [
        {
            "role": "system",
            "content": [{"type": "text", "text": "You are refagent.", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "user", "content": "hi"},
    ]
    assert "prompt_cache_key" not in body
    assert openrouter_body("~anthropic/claude-sonnet-latest")["cache_control"] == {"type": "ephemeral"}
    # The provider of that name, moved to a proxy of one's own by the configuration: still OpenRouter.
    assert openrouter_body("anthropic/claude-sonnet-4.5", "http://127.0.0.1:9/v1", "openrouter")["cache_control"]


def test_other_models_on_openrouter_only_keep_to_their_provider() -> None:
    body = openrouter_body("openai/gpt-5")  # cached by its provider unasked
    assert body["session_id"] == "s-1"
    assert "cache_control" not in body
    assert body["messages"][0] == SYSTEM


def test_claude_named_elsewhere_is_sent_as_any_model() -> None:
    body = openrouter_body("anthropic/claude-sonnet-4.5", "https://llm.example.com/v1")  # a gateway we do not know
    assert "cache_control" not in body
    assert "session_id" not in body
    assert body["messages"][0] == SYSTEM


def test_what_a_server_wants_back_goes_back_to_it_only() -> None:
    """Kept under the endpoint's name: OpenRouter's reasoning details and a tool call's extra content go back
    to the server that sent them, and never to another (the user switched models)."""
    detail = {"type": "reasoning.encrypted", "data": "opaque==", "index": 0}
    signed = {"google": {"thought_signature": "sig=="}}
    call = {"id": "a", "type": "function", "function": {"name": "glob", "arguments": "{}"}}
    kept = {"api": f"openai-chat {OPENROUTER}", "items": [{"reasoning_detail": detail}]}
    kept["items"].append({"tool_call_id": "a", "extra_content": signed})
    assistant = {"role": "assistant", "content": "", "tool_calls": [call], "kept_reasoning": kept}
    request = ModelRequest([{"role": "user", "content": "hi"}, assistant], reasoning_effort="high")
    there = OpenAIModel(ModelProfile("o", "O", model="openai/gpt-5", base_url=OPENROUTER, api_key=KEY))
    body = there._body("openai/gpt-5", request)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{**call, "extra_content": signed}],
        "reasoning_details": [detail],
    }
    assert body["reasoning"] == {"effort": "high"}  # OpenRouter's one control for every model
    assert "reasoning_effort" not in body
    elsewhere = OpenAIModel(ModelProfile("o", "O", model="gpt-5", base_url="https://llm.example.com/v1", api_key=KEY))
    body = elsewhere._body("gpt-5", request)
    assert body["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}  # never sent it
    assert body["reasoning_effort"] == "high"


def test_what_is_kept_read_back_from_a_bad_record_is_left_out() -> None:
    """A session's records may hold anything: kept items of the wrong shape are not sent, and never fail."""
    call = {"id": ["not", "a", "string"], "type": "function", "function": {"name": "glob", "arguments": "{}"}}
    items = [{"tool_call_id": ["x"], "extra_content": {}}, {"reasoning_content": 7}, {"reasoning_detail": "x"}, 5]
    kept = {"api": f"openai-chat {OPENROUTER}", "items": items}
    assistant = {"role": "assistant", "content": "", "tool_calls": [call], "kept_reasoning": kept}
    model = OpenAIModel(ModelProfile("o", "O", model="openai/gpt-5", base_url=OPENROUTER, api_key=KEY))
    body = model._body("openai/gpt-5", ModelRequest([{"role": "user", "content": "hi"}, assistant]))
    assert body["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}


async def test_claudes_cache_on_openrouter_is_written_then_read(models: list[OpenAIModel]) -> None:
    """Through the scripted server's rule for Claude on OpenRouter: the first request writes the prompt
    (OpenRouter's ``cache_write_tokens``), the next reads it (``cached_tokens``)."""
    with serving(Turn(text="a"), Turn(text="b")) as server:
        wire = chat_wire(server)
        wire.claude_cache.minimum = 1  # a short prompt: cached all the same
        url = server.base_url
        model = OpenAIModel(ModelProfile("openrouter", "OR", model="anthropic/claude-test", base_url=url, api_key=KEY))
        models.append(model)
        first = [SYSTEM, {"role": "user", "content": "hi"}]
        used = [e for e in await collect(model, ModelRequest(first)) if isinstance(e, Usage)]
        second = [*first, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
        used += [e for e in await collect(model, ModelRequest(second)) if isinstance(e, Usage)]
    assert used[0].cached_tokens == 0 < used[0].cache_write_tokens == used[0].prompt_tokens
    assert used[1].cached_tokens == used[0].prompt_tokens  # the whole first prompt, read
    assert used[1].cache_write_tokens == used[1].prompt_tokens - used[0].prompt_tokens


async def test_finish_length(model_for: Any) -> None:
    with serving(Turn(text="cut", finish_reason="length")) as server:
        events = await collect(model_for(server))
    assert events[-1] == Finished("length")


async def test_content_filter_is_a_refusal(model_for: Any) -> None:
    with serving(Turn(text="Sure, here", finish_reason="content_filter")) as server:
        events = await collect(model_for(server))
    assert events[-1] == Finished("refusal")


async def test_a_refusal_delta_is_shown_as_text_and_ends_in_refusal(model_for: Any) -> None:
    with serving(Turn(refusal="I can't help with that.")) as server:
        events = await collect(model_for(server))
    assert "".join(texts(events)) == "I can't help with that."
    assert events[-1] == Finished("refusal")


# -- what the server is sent ---------------------------------------------------------------------


async def test_the_request_carries_messages_tools_model_and_key(model_for: Any) -> None:
    tool = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read a.py"}]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(messages=messages, tools=[tool]))
    [request] = server.chat_requests
    assert request.body["model"] == "gpt-test"
    assert request.body["messages"] == messages
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file.", "parameters": tool.parameters},
        }
    ]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"


async def test_no_tools_means_no_tools_field(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server))
    assert "tools" not in server.chat_requests[0].body


async def test_a_server_that_rejects_stream_options_is_asked_again_without(model_for: Any) -> None:
    with serving(Turn(text="one", usage_mode="with_finish"), Turn(text="two"), reject_stream_options=True) as server:
        model = model_for(server)
        first = await collect(model)
        second = await collect(model)
    assert texts(first) == ["one"]
    assert texts(second) == ["two"]
    assert not retries(first)
    assert [("stream_options" in r.body) for r in server.chat_requests] == [True, False, False]
    assert Usage in {type(e) for e in first}


async def test_a_server_that_refuses_its_own_reasoning_back_is_asked_again_without(model_for: Any) -> None:
    """A strict server that names ``reasoning_content`` as unknown gets the request again without what it
    added to its answers, and never again with it; the turn does not fail."""
    call = ToolCall("glob", {"pattern": "*"})
    turns = (Turn(reasoning="look", tool_calls=[call]), Turn(reasoning="so", text="done"), Turn(text="more"))
    with serving(*turns, reject_message_fields=("reasoning_content",)) as server:
        model = model_for(server)
        first = [e for e in await collect(model) if isinstance(e, KeptReasoning | ToolCallRequest)]
        kept, made = first
        assert isinstance(kept, KeptReasoning)
        assert isinstance(made, ToolCallRequest)
        assistant = {"role": "assistant", "content": "", "kept_reasoning": {"api": kept.api, "items": list(kept.items)}}
        assistant["tool_calls"] = [{"id": made.id, "type": "function", "function": {"name": "glob", "arguments": "{}"}}]
        history = [
            {"role": "user", "content": "hi"},
            assistant,
            {"role": "tool", "tool_call_id": made.id, "content": "a"},
        ]
        second = await collect(model, ModelRequest(history))
        third = await collect(model, ModelRequest([*history, {"role": "assistant", "content": "done"}, *HI.messages]))
    assert texts(second) == ["done"]
    assert texts(third) == ["more"]
    assert not retries(second)
    sent = [any("reasoning_content" in m for m in r.body["messages"]) for r in server.chat_requests]
    assert sent == [False, True, False, False]  # refused once, then never sent


class Refused(Exception):
    status_code = 400


def test_only_a_field_refused_as_unknown_is_left_out() -> None:
    """DeepSeek's thinking mode refuses a message *without* its ``reasoning_content``: never a reason to stop
    sending it."""
    assert _rejects_kept(Refused("Additional properties are not allowed ('reasoning_content' was unexpected)"))
    assert _rejects_kept(Refused("Unknown name \"extra_content\" at 'messages[1].tool_calls[0]'"))
    assert not _rejects_kept(Refused("Missing `reasoning_content` field in the assistant message at message index 2"))
    assert not _rejects_kept(Refused("model not found"))


async def test_a_reasoning_effort_is_sent_as_reasoning_effort(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        events = await collect(model_for(server), ModelRequest(messages=HI.messages, reasoning_effort="high"))
    assert texts(events) == ["ok"]
    [request] = server.chat_requests
    assert request.body["reasoning_effort"] == "high"
    assert request.body["messages"] == HI.messages


async def test_no_reasoning_effort_means_no_new_field(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server))
    assert set(server.chat_requests[0].body) == {"model", "messages", "stream", "stream_options"}


async def test_a_reasoning_effort_survives_cleaning_the_request(model_for: Any) -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "a\ud83d"}], reasoning_effort="low")
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), request)
    [sent] = server.chat_requests
    assert sent.body["messages"] == [{"role": "user", "content": "a\ufffd"}]  # cleaned, and sent once
    assert sent.body["reasoning_effort"] == "low"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (400, "Unrecognized request argument supplied: reasoning_effort"),
        (400, "Unsupported parameter: 'reasoning_effort' is not supported with this model."),
        (422, "Unsupported value: 'reasoning_effort' does not support 'high' with this model."),
    ],
)
async def test_an_endpoint_that_rejects_the_reasoning_effort(model_for: Any, status: int, said: str) -> None:
    with serving(Turn(fault=Fault.status(status, message=said)), Turn(text="ok")) as server:
        _, error = await collect_failing(
            model_for(server, source="config.toml [profiles.test]"),
            ModelRequest(messages=HI.messages, reasoning_effort="high"),
        )
    message = str(error)
    assert "The model 'gpt-test' does not accept the reasoning effort 'high'" in message
    assert f"answered {status}: {said}" in message
    assert "`reasoning_effort` in config.toml [profiles.test]" in message
    assert len(server.chat_requests) == 1  # neither retried nor asked again without it


async def test_another_client_error_with_a_reasoning_effort_is_reported_as_usual(model_for: Any) -> None:
    with serving(Turn(fault=Fault.status(400, message="Invalid 'messages[1].role'."))) as server:
        _, error = await collect_failing(model_for(server), ModelRequest(messages=HI.messages, reasoning_effort="low"))
    assert "answered 400: Invalid 'messages[1].role'." in str(error)
    assert "reasoning effort" not in str(error)


async def test_a_local_profile_needs_no_key(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        events = await collect(model_for(server, api_key=None))
    assert texts(events) == ["ok"]
    assert server.chat_requests[0].headers["authorization"] == f"Bearer {NO_KEY}"


async def test_a_profile_without_a_model_uses_the_first_listed(model_for: Any) -> None:
    with serving(Turn(text="ok"), Turn(text="again")) as server:
        model = model_for(server, model="")
        await collect(model)
        await collect(model)
    assert [r.path for r in server.requests] == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    assert server.chat_requests[0].body["model"] == "scripted-model"


# -- faults --------------------------------------------------------------------------------------


async def test_429_with_retry_after_is_honoured_and_capped(model_for: Any) -> None:
    with serving(
        Turn(fault=Fault.status(429, retry_after=0.01)), Turn(fault=Fault.status(429, retry_after=30)), Turn(text="ok")
    ) as server:
        events = await collect(model_for(server))
    assert [(r.attempt, r.delay) for r in retries(events)] == [(2, 0.01), (3, FAST.max_retry_after)]
    assert "429" in retries(events)[0].reason
    assert "Rate limit" in retries(events)[0].reason
    assert texts(events) == ["ok"]
    assert len(server.chat_requests) == 3


async def test_429_without_retry_after_backs_off_exponentially(model_for: Any) -> None:
    policy = RetryPolicy(attempts=4, base_delay=0.004)
    with serving(*[Turn(fault=Fault.status(429))] * 3, Turn(text="ok")) as server:
        events = await collect(model_for(server, retry=policy))
    # rand() is 0 in these tests: the jitter factor is at its lowest, 0.5.
    assert [r.delay for r in retries(events)] == [0.002, 0.004, 0.008]
    assert [r.max_attempts for r in retries(events)] == [4, 4, 4]
    assert texts(events) == ["ok"]


def test_backoff_is_bounded_and_jittered() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0)
    assert policy.delay(2, None, 0.0) == 0.5
    assert policy.delay(2, None, 0.999) < 1.0
    assert policy.delay(30, None, 0.999) < 5.0
    assert policy.delay(2, 1000.0, 0.5) == policy.max_retry_after
    assert policy.delay(2, -3.0, 0.5) == 0.0


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retried(model_for: Any, status: int) -> None:
    with serving(Turn(fault=Fault.status(status)), Turn(text="ok")) as server:
        events = await collect(model_for(server))
    assert [r.attempt for r in retries(events)] == [2]
    assert str(status) in retries(events)[0].reason
    assert texts(events) == ["ok"]


async def test_a_stream_cut_before_anything_was_yielded_is_retried(model_for: Any) -> None:
    # Two chunks arrive (the role, and half a tool call) before the cut: nothing was yielded yet.
    with serving(
        Turn(tool_calls=[ToolCall("glob", {"pattern": "*"})], fault=Fault.cut(after=2)),
        Turn(tool_calls=[ToolCall("glob", {"pattern": "*"})]),
    ) as server:
        events = await collect(model_for(server))
    assert "connection" in retries(events)[0].reason
    assert [e for e in events if isinstance(e, ToolCallRequest)] == [
        ToolCallRequest("call_2_0", "glob", '{"pattern": "*"}')
    ]
    assert len(server.chat_requests) == 2


async def test_a_stream_cut_after_text_was_shown_is_not_retried(model_for: Any) -> None:
    with serving(Turn(text="one two three four", fault=Fault.cut(after=3)), Turn(text="again")) as server:
        events, error = await collect_failing(model_for(server))
    assert texts(events) == ["one ", "two "]
    assert not retries(events)
    assert len(server.chat_requests) == 1
    assert "cut off" in str(error)
    assert server.base_url in str(error)


async def test_a_connection_refused_is_retried_then_reported(model_for: Any) -> None:
    with serving() as server:
        port = server.port
        base_url = server.base_url
    # The server is gone: nothing listens on the port any more.
    events, error = await collect_failing(model_for(server, base_url=base_url))
    assert len(retries(events)) == FAST.attempts - 1
    assert f"127.0.0.1:{port}" in str(error)
    assert "3 attempts" in str(error)


async def test_a_persistent_failure_raises_a_clear_model_error(model_for: Any) -> None:
    with serving(fallback=Turn(fault=Fault.status(503, message="The engine is overloaded."))) as server:
        events, error = await collect_failing(model_for(server))
    message = str(error)
    assert f"{server.base_url}/chat/completions answered 503: The engine is overloaded." in message
    assert "3 attempts" in message
    assert "gpt-test" in message
    assert len(retries(events)) == 2
    assert len(server.chat_requests) == 3


async def test_a_client_error_is_not_retried(model_for: Any) -> None:
    with serving(Turn(fault=Fault.status(400, message="Invalid 'messages[1].role'.")), Turn(text="ok")) as server:
        _, error = await collect_failing(model_for(server))
    assert "answered 400: Invalid 'messages[1].role'." in str(error)
    assert len(server.chat_requests) == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failures_name_the_variable_to_set(model_for: Any, status: int) -> None:
    with serving(Turn(fault=Fault.status(status)), Turn(text="ok")) as server:
        _, error = await collect_failing(model_for(server, api_key_env="MY_PROVIDER_KEY"))
    assert isinstance(error, ModelAuthError)
    assert "MY_PROVIDER_KEY" in str(error)
    assert str(status) in str(error)
    assert len(server.chat_requests) == 1


async def test_a_wrong_key_is_reported_with_what_the_server_said(model_for: Any) -> None:
    with serving(Turn(text="ok"), api_key="the-right-key") as server:
        _, error = await collect_failing(model_for(server, api_key_env="OPENAI_API_KEY"))
    assert isinstance(error, ModelAuthError)
    assert "Incorrect API key provided" in str(error)
    assert "OPENAI_API_KEY" in str(error)


async def test_a_missing_key_fails_before_any_request(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        model = model_for(server, base_url="https://models.example.com/v1", api_key=None, api_key_env="EXAMPLE_KEY")
        with pytest.raises(ModelAuthError, match="EXAMPLE_KEY"):
            await collect(model)
    assert server.requests == []


async def test_an_error_event_inside_the_stream(model_for: Any) -> None:
    error = {"error": {"message": "Provider returned error", "code": 502}}
    fatal = {"error": {"message": "This model's maximum context length is 8192 tokens.", "code": "context_length"}}
    with serving(Turn(raw_chunks=[error]), Turn(text="ok"), Turn(raw_chunks=[fatal])) as server:
        model = model_for(server)
        events = await collect(model)
        with pytest.raises(ModelError, match="maximum context length"):
            await collect(model)
    assert texts(events) == ["ok"]
    assert len(retries(events)) == 1


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [("{not json", "an event that is not JSON"), ({"choices": [{"delta": "text"}]}, "a chunk refagent cannot read")],
)
async def test_a_malformed_stream_is_a_clear_model_error(model_for: Any, chunk: Any, expected: str) -> None:
    with serving(Turn(raw_chunks=[chunk]), Turn(text="ok")) as server:
        _, error = await collect_failing(model_for(server))
    assert expected in str(error)
    assert server.base_url in str(error)
    assert len(server.chat_requests) == 1


# -- cancellation --------------------------------------------------------------------------------


async def test_cancel_during_a_slow_stream_returns_at_once_and_closes_the_connection(model_for: Any) -> None:
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
            await first.wait()  # the first chunk arrived while the server is still streaming: no buffering
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        assert time.monotonic() - cancelled_at < 0.5  # well before the next chunk
        assert texts(seen) == ["tick "]
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)


async def test_leaving_the_stream_early_closes_the_connection(model_for: Any) -> None:
    with serving(Turn(text=["tick "] * 20, chunk_delay=0.5)) as server:
        async with aclosing(model_for(server).stream(HI)) as stream:
            async for _ in stream:
                break
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)


async def test_a_consumer_cancelled_between_events_still_closes_the_connection(model_for: Any) -> None:
    # The turn awaits the editor between events: a cancel lands there, outside the stream, which is left
    # suspended; it is closed when dropped (asyncio finalises abandoned async generators at once).
    with serving(Turn(text=["tick "] * 20, chunk_delay=0.5)) as server:
        model = model_for(server)
        with anyio.move_on_after(5) as scope:
            async for event in model.stream(HI):
                if isinstance(event, TextDelta):
                    scope.cancel()
                    await anyio.sleep(1)  # the cancel is delivered here
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)


async def test_cancel_during_a_retry_wait(model_for: Any) -> None:
    policy = RetryPolicy(attempts=3, base_delay=60.0)
    with serving(Turn(fault=Fault.status(500)), Turn(text="ok")) as server:
        seen: list[ModelEvent] = []
        with anyio.CancelScope() as scope:
            async for event in model_for(server, retry=policy).stream(HI):
                seen.append(event)
                scope.cancel()  # delivered in the stream's wait before the retry
    assert len(retries(seen)) == 1
    assert retries(seen)[0].delay >= policy.max_delay / 2
    assert len(server.chat_requests) == 1


# -- the scripted server itself ------------------------------------------------------------------


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_the_server_answers_without_streaming_too() -> None:
    with serving(Turn(text="hi there", tool_calls=[ToolCall("glob", {"pattern": "*"})])) as server:
        answer = _post(f"{server.base_url}/chat/completions", {"model": "m", "messages": []})
    message = answer["choices"][0]["message"]
    assert message["content"] == "hi there"
    assert message["tool_calls"][0]["function"] == {"name": "glob", "arguments": '{"pattern": "*"}'}
    assert answer["choices"][0]["finish_reason"] == "tool_calls"


def test_the_server_runs_from_the_command_line(tmp_path: Any) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "scripted hello"}], "fallback": {"fault": {"status": 503}}}))
    process = subprocess.Popen(
        [sys.executable, "-m", "refagent.testing.openai_server", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        answer = _post(f"{base_url}/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert answer["choices"][0]["message"]["content"] == "scripted hello"
        with urllib.request.urlopen(f"{base_url}/_scripted/requests", timeout=5) as response:
            recorded = json.loads(response.read())
        assert recorded[0]["body"]["messages"] == [{"role": "user", "content": "x"}]
    finally:
        process.terminate()
        process.wait(timeout=5)
