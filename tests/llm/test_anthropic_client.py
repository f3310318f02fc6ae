"""The Anthropic adapter (:mod:`refagent.llm.anthropic_client`) against the scripted server's Messages API
on 127.0.0.1 (:mod:`refagent.testing.anthropic_wire`), which refuses what Anthropic refuses: what is
streamed, the body it builds, its retries and errors, cancellation."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.config.clients import make_model, warm_up_for
from refagent.config.loading import load
from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.anthropic_client import API_VERSION, AnthropicModel
from refagent.llm.anthropic_request import DEFAULT_MAX_TOKENS
from refagent.llm.profiles import ModelProfile, missing_key
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
from refagent.session.messages import assistant_message, tool_message
from refagent.testing.anthropic_wire import AnthropicWire
from refagent.testing.openai_server import Fault, RecordedRequest, ScriptedOpenAIServer, ToolCall, Turn
from tests.support.model_streams import FAST, HI, collect, collect_failing, retries, texts

pytestmark = pytest.mark.anyio

KEY = "sk-ant-test-key"
MODEL = "claude-test"
TOOLS = [
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),
    ToolSpec("glob", "Find files.", {"type": "object", "properties": {"pattern": {"type": "string"}}}),
]
SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 200}  # ~1600 tokens: cacheable


@contextmanager
def serving(*turns: Turn, **options: Any) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(turns, api_key=KEY, **options) as server:
        yield server


def root(server: ScriptedOpenAIServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def sent(server: ScriptedOpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith("/messages")]


def wire(server: ScriptedOpenAIServer) -> AnthropicWire:
    found = server.wire("/messages")
    assert isinstance(found, AnthropicWire)
    return found


@pytest.fixture
async def models() -> AsyncIterator[list[AnthropicModel]]:
    """Models made in a test, closed after it."""
    made: list[AnthropicModel] = []
    yield made
    for model in made:
        await model.aclose()


@pytest.fixture
def model_for(models: list[AnthropicModel]) -> Any:
    def make(server: ScriptedOpenAIServer | None, *, retry: RetryPolicy = FAST, **fields: Any) -> AnthropicModel:
        profile_fields: dict[str, Any] = {
            "model": MODEL,
            "base_url": root(server) if server is not None else None,
            "api_key": KEY,
            "api_key_from": "ANTHROPIC_API_KEY",
            "client": "anthropic",
        }
        profile_fields.update(fields)
        model = AnthropicModel(ModelProfile("claude", "Claude", **profile_fields), retry=retry, rand=lambda: 0.0)
        models.append(model)
        return model

    return make


def marks(body: dict[str, Any]) -> list[str]:
    """Where the body's cache breakpoints are: ``tools[i]``, ``system[i]``, ``messages[i][j]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [f"system[{i}]" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        found += [f"messages[{i}][{j}]" for j, b in enumerate(message["content"]) if "cache_control" in b]
    return found


# -- importing -----------------------------------------------------------------------------------


def test_importing_the_adapter_and_the_registry_does_not_import_httpx2() -> None:
    code = "import sys, refagent.llm.anthropic_client, refagent.config.clients; print('httpx2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_kind_is_registered() -> None:
    profile = ModelProfile("c", "C", model=MODEL, api_key=KEY, client="anthropic")
    model = make_model(profile, FAST)
    assert isinstance(model, AnthropicModel)
    assert model.retry is FAST
    assert warm_up_for([profile]) is not None


def test_the_warm_up_imports_the_client_and_httpx2() -> None:
    code = (
        "import sys, anyio; from refagent.config.clients import warm_up_for; "
        "from refagent.llm.profiles import ModelProfile; "
        "warm = warm_up_for([ModelProfile('c', 'C', client='anthropic')]); "
        "before = ('httpx2' in sys.modules, 'refagent.llm.anthropic_client' in sys.modules); anyio.run(warm); "
        "print(before, ('httpx2' in sys.modules, 'refagent.llm.anthropic_client' in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(False, False) (True, True)"


def test_a_config_profile_reads_anthropics_key_and_is_named_after_its_host(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[profiles.claude]\nclient = "anthropic"\nmodel = "claude-sonnet-4-5"\n')
    config = load(None, {"REFAGENT_CONFIG": str(path), "ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": "sk-openai"})
    profile = next(p for p in config.profiles if p.id == "claude")
    assert (profile.api_key, profile.api_key_env) == (KEY, "ANTHROPIC_API_KEY")
    assert profile.endpoint == "https://api.anthropic.com"
    assert "api.anthropic.com" in profile.name
    keyless = load(None, {"REFAGENT_CONFIG": str(path), "OPENAI_API_KEY": "sk-openai"})
    problem = missing_key(next(p for p in keyless.profiles if p.id == "claude"))
    assert problem is not None
    assert "https://api.anthropic.com" in problem
    assert "ANTHROPIC_API_KEY" in problem


# -- streaming -----------------------------------------------------------------------------------


async def test_text_streams_then_usage_then_finished(model_for: Any) -> None:
    with serving(Turn(text=["Hel", "lo, ", "world"], usage=(11, 3))) as server:
        events = await collect(model_for(server))
    assert events == [TextDelta("Hel"), TextDelta("lo, "), TextDelta("world"), Usage(11, 3), Finished("stop")]


async def test_thinking_streams_as_reasoning_and_is_kept_signed(model_for: Any) -> None:
    turn = Turn(reasoning="Let me think.", text="Done.")
    with serving(turn) as server:
        events = await collect(model_for(server), ModelRequest(HI.messages, reasoning_effort="low"))
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Let ", "me ", "think."]
    assert texts(events) == ["Done."]
    signature = wire(server).sign("Let me think.")
    kept = [e for e in events if isinstance(e, KeptReasoning)]
    assert kept == [
        KeptReasoning("anthropic", ({"type": "thinking", "thinking": "Let me think.", "signature": signature},))
    ]
    assert events[-1] == Finished("stop")


async def test_tool_calls_arrive_whole_after_the_text(model_for: Any) -> None:
    calls = [ToolCall("read_file", {"path": "src/app.py"}), ToolCall("glob", {"pattern": "**/*.md"}, id="toolu_x")]
    with serving(Turn(text="Reading.", tool_calls=calls, argument_chunks=5, usage=(5, 9))) as server:
        events = await collect(model_for(server))
    assert events == [
        TextDelta("Reading."),
        ToolCallRequest("toolu_1_0", "read_file", '{"path": "src/app.py"}'),
        ToolCallRequest("toolu_x", "glob", '{"pattern": "**/*.md"}'),
        Usage(5, 9),
        Finished("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("turn", "finish"),
    [
        (Turn(text="cut", finish_reason="length"), "length"),
        (Turn(refusal="I can't help with that."), "refusal"),
        (Turn(text="paused", finish_reason="pause_turn"), "stop"),
        (Turn(text="end", finish_reason="stop_sequence"), "stop"),
    ],
)
async def test_stop_reasons(model_for: Any, turn: Turn, finish: str) -> None:
    with serving(turn) as server:
        events = await collect(model_for(server))
    assert events[-1] == Finished(finish)  # type: ignore[arg-type]


async def test_the_usage_counts_cache_reads_and_writes(model_for: Any) -> None:
    request = ModelRequest([SYSTEM, {"role": "user", "content": "hi"}], TOOLS)
    follow = ModelRequest(
        [*request.messages, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "And?"}], TOOLS
    )
    with serving(Turn(text="Hello."), Turn(text="More.")) as server:
        model = model_for(server)
        first = [e for e in await collect(model, request) if isinstance(e, Usage)]
        second = [e for e in await collect(model, follow) if isinstance(e, Usage)]
    reported = wire(server).usages
    assert first == [Usage(sum(reported[0][k] for k in ("input_tokens", "cache_creation_input_tokens")), 1,
                           cache_write_tokens=reported[0]["cache_creation_input_tokens"])]  # fmt: skip
    assert first[0].cache_write_tokens > 1024
    assert second[0].cached_tokens == first[0].cache_write_tokens  # the first request's end, read back
    assert second[0].prompt_tokens == sum(reported[1][k] for k in reported[1] if k != "output_tokens")


# -- what the server is sent ---------------------------------------------------------------------


async def test_the_request_goes_to_v1_messages_with_the_key_and_version(model_for: Any) -> None:
    with serving(Turn(text="ok"), Turn(text="ok")) as server:
        await collect(model_for(server))
        await collect(model_for(server, base_url=root(server) + "/v1/"))  # a base that ends in /v1 already
    first, second = sent(server)
    assert first.path == second.path == "/v1/messages"
    assert first.headers["x-api-key"] == KEY
    assert first.headers["anthropic-version"] == API_VERSION == "2023-06-01"
    assert first.headers["content-type"] == "application/json"
    assert "authorization" not in first.headers
    assert model_for(None).url == "https://api.anthropic.com/v1/messages"


async def test_the_body_system_tools_max_tokens_and_cache_breakpoints(model_for: Any) -> None:
    request = ModelRequest([SYSTEM, {"role": "user", "content": "hi"}], TOOLS, cache_key="session-1")
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), request)
    body = sent(server)[0].body
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["system"] == [{"type": "text", "text": SYSTEM["content"], "cache_control": {"type": "ephemeral"}}]
    assert body["tools"][0] == {"name": "read_file", "description": "Read a file.", "input_schema": TOOLS[0].parameters}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
    ]
    assert marks(body) == ["tools[1]", "system[0]", "messages[0][0]"]
    assert "thinking" not in body
    assert "temperature" not in body
    assert "session-1" not in json.dumps(body)  # Anthropic's cache needs no key


@pytest.mark.parametrize(
    ("effort", "limit", "budget", "max_tokens"),
    [
        ("low", None, 4096, DEFAULT_MAX_TOKENS),
        ("medium", None, 10_000, DEFAULT_MAX_TOKENS),
        ("high", None, 24_000, DEFAULT_MAX_TOKENS),
        ("ultra", None, 10_000, DEFAULT_MAX_TOKENS),  # a level the profile lists that has no budget of its own
        ("16000", None, 16_000, DEFAULT_MAX_TOKENS),
        ("high", 16_000, 11_904, 16_000),  # lowered under the profile's limit, room left for the answer
        ("low", 2048, 1024, 2048),
        ("medium", 1000, 1024, 1025),  # a limit under the least budget is raised above it
    ],
)
async def test_a_reasoning_effort_is_a_thinking_budget_under_max_tokens(
    model_for: Any, effort: str, limit: int | None, budget: int, max_tokens: int
) -> None:
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server, max_output_tokens=limit), ModelRequest(HI.messages, reasoning_effort=effort))
    body = sent(server)[0].body  # the stand-in refused it, had the budget not fitted
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == max_tokens


async def test_kept_thinking_goes_back_first_in_the_next_request(model_for: Any) -> None:
    """The round trip of a tool loop: the thinking of the first response, kept on the assistant message
    the turn makes (:func:`assistant_message`), goes back first in it; the stand-in checks its signature
    and that it is there (thinking is on, the loop is not finished)."""
    first_turn = Turn(
        reasoning="I should read a.txt.", text="Reading.", tool_calls=[ToolCall("read_file", {"path": "a.txt"})]
    )
    with serving(first_turn, Turn(text="It is empty.")) as server:
        model = model_for(server)
        request = ModelRequest([SYSTEM, {"role": "user", "content": "read a.txt"}], TOOLS, reasoning_effort="medium")
        events = await collect(model, request)
        calls = [e for e in events if isinstance(e, ToolCallRequest)]
        [kept] = [e for e in events if isinstance(e, KeptReasoning)]
        history = [*request.messages, assistant_message("Reading.", calls, kept), tool_message(calls[0].id, "")]
        second = await collect(model, ModelRequest(history, TOOLS, reasoning_effort="medium"))
    assert "".join(texts(second)) == "It is empty."
    assistant = sent(server)[1].body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "I should read a.txt.",
                "signature": wire(server).sign("I should read a.txt."),
            },
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1_0", "name": "read_file", "input": {"path": "a.txt"}},
        ],
    }
    assert "kept_reasoning" not in json.dumps(sent(server)[1].body)


async def test_tampered_thinking_is_refused_with_anthropics_message(model_for: Any) -> None:
    kept = KeptReasoning("anthropic", ({"type": "thinking", "thinking": "forged", "signature": "0" * 64},))
    call = ToolCallRequest("toolu_1", "glob", "{}")
    history = [{"role": "user", "content": "go"}, assistant_message("", [call], kept), tool_message("toolu_1", "a.md")]
    with serving(Turn(text="never")) as server:
        _, error = await collect_failing(model_for(server), ModelRequest(history, reasoning_effort="low"))
    assert type(error) is ModelError
    assert "answered 400: messages.1.content.0: Invalid `signature` in `thinking` block" in str(error)
    assert len(sent(server)) == 1  # not retried


async def test_another_apis_kept_reasoning_is_left_out(model_for: Any) -> None:
    kept = KeptReasoning("openai-responses", ({"type": "reasoning", "encrypted_content": "xyz"},))
    history = [
        {"role": "user", "content": "hi"},
        assistant_message("Hello.", [], kept),
        {"role": "user", "content": "again"},
    ]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(history))
    messages = sent(server)[0].body["messages"]
    assert messages[1] == {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}
    assert "xyz" not in json.dumps(messages)


async def test_tool_results_are_one_user_message_and_the_roles_alternate(model_for: Any) -> None:
    calls = [ToolCallRequest("toolu_a", "glob", '{"pattern": "*"}'), ToolCallRequest("toolu_b", "read_file", "{}")]
    history = [
        SYSTEM,
        {"role": "user", "content": "look around"},
        assistant_message("", calls),  # no text: no empty text block
        tool_message("toolu_a", "a.md"),
        tool_message("toolu_b", ""),  # no output: a result with no content
        {"role": "user", "content": "<system-reminder>a.md changed</system-reminder>"},
        {"role": "user", "content": "and be quick"},
        {"role": "assistant", "content": None},  # a response cancelled before it said anything
        {"role": "user", "content": [{"type": "text", "text": "well?"}, {"type": "text", "text": ""}]},
    ]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(history, TOOLS))
    body = sent(server)[0].body  # the stand-in refuses roles that do not alternate, and empty text blocks
    ephemeral = {"type": "ephemeral"}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look around", "cache_control": ephemeral}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "glob", "input": {"pattern": "*"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.md"},
                {"type": "tool_result", "tool_use_id": "toolu_b"},
                {"type": "text", "text": "<system-reminder>a.md changed</system-reminder>"},
                {"type": "text", "text": "and be quick"},
                {"type": "text", "text": "well?", "cache_control": ephemeral},
            ],
        },
    ]


async def test_the_previous_steps_end_is_marked_so_that_its_write_is_read(model_for: Any) -> None:
    call = ToolCallRequest("toolu_1", "glob", '{"pattern": "*"}')
    step_one = [SYSTEM, {"role": "user", "content": "look"}]
    step_two = [*step_one, assistant_message("", [call]), tool_message("toolu_1", "a.md")]
    with serving(Turn(tool_calls=[ToolCall("glob", {"pattern": "*"}, id="toolu_1")]), Turn(text="done")) as server:
        model = model_for(server)
        await collect(model, ModelRequest(step_one, TOOLS))
        await collect(model, ModelRequest(step_two, TOOLS))
    first, second = (r.body for r in sent(server))
    assert marks(first) == ["tools[1]", "system[0]", "messages[0][0]"]
    assert marks(second) == ["tools[1]", "system[0]", "messages[0][0]", "messages[2][0]"]  # four: the most
    written, read = (
        wire(server).usages[0]["cache_creation_input_tokens"],
        wire(server).usages[1]["cache_read_input_tokens"],
    )
    assert read == written > 1024


async def test_arguments_that_are_not_a_json_object_go_as_an_empty_input_and_are_quoted(model_for: Any) -> None:
    calls = [ToolCallRequest("toolu_a", "read_file", '{"path": "a.'), ToolCallRequest("toolu_b", "glob", '["*"]')]
    history = [
        {"role": "user", "content": "go"},
        assistant_message("", calls),
        tool_message("toolu_a", "The arguments are not valid JSON."),
        tool_message("toolu_b", "The arguments must be a JSON object."),
    ]
    with serving(Turn(text="ok")) as server:
        await collect(model_for(server), ModelRequest(history))
    assistant, results = sent(server)[0].body["messages"][1:]
    assert [block["input"] for block in assistant["content"]] == [{}, {}]
    assert results["content"][0]["content"] == [
        {"type": "text", "text": 'The arguments of this call, as sent (not a JSON object): {"path": "a.'},
        {"type": "text", "text": "The arguments are not valid JSON."},
    ]
    assert results["content"][1]["content"][0] == {
        "type": "text",
        "text": 'The arguments of this call, as sent (not a JSON object): ["*"]',
    }


async def test_images_are_base64_image_blocks(model_for: Any) -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    with serving(Turn(text="A cat.")) as server:
        await collect(model_for(server, images=True), ModelRequest([{"role": "user", "content": content}]))
    blocks = sent(server)[0].body["messages"][0]["content"]
    assert blocks[0] == {"type": "text", "text": "What is this?"}
    assert blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}


async def test_a_lone_surrogate_is_sent_cleaned(model_for: Any) -> None:
    with serving(Turn(text="ok")) as server:
        events = await collect(model_for(server), ModelRequest([{"role": "user", "content": "broken \ud83d here"}]))
    assert texts(events) == ["ok"]
    assert sent(server)[0].body["messages"][0]["content"][0]["text"] == "broken \ufffd here"


# -- retries -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 529, 500, 503])
async def test_transient_statuses_are_retried_visibly(model_for: Any, status: int) -> None:
    with serving(Turn(fault=Fault.status(status, retry_after=0)), Turn(text="ok")) as server:
        events = await collect(model_for(server))
    [retry] = retries(events)
    assert (retry.attempt, retry.delay, retry.max_attempts) == (2, 0.0, 3)  # retry-after: 0 honoured
    assert f"answered {status}" in retry.reason
    assert texts(events) == ["ok"]
    assert len(sent(server)) == 2


async def test_retry_after_is_honoured_and_capped(model_for: Any) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with serving(Turn(fault=Fault.status(429, retry_after=30)), Turn(text="ok")) as server:
        model = AnthropicModel(model_for(server).profile, retry=RetryPolicy(max_retry_after=5), sleep=sleep)
        try:
            await collect(model)
        finally:
            await model.aclose()
    assert waits == [5]


async def test_an_overloaded_error_event_before_anything_is_retried(model_for: Any) -> None:
    overloaded = Turn(raw_chunks=[{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}])
    with serving(overloaded, Turn(text="ok")) as server:
        events = await collect(model_for(server))
    [retry] = retries(events)
    assert "reported an error mid-stream: overloaded_error: Overloaded" in retry.reason
    assert texts(events) == ["ok"]


async def test_an_error_event_after_text_is_a_cut_off_reply(model_for: Any) -> None:
    chunks = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                              "model": MODEL, "usage": {"input_tokens": 3, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an"}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]  # fmt: skip
    with serving(Turn(raw_chunks=chunks), Turn(text="never")) as server:
        events, error = await collect_failing(model_for(server))
    assert texts(events) == ["Half an"]
    assert "was cut off" in str(error)
    assert "ask the model to continue" in str(error)
    assert len(sent(server)) == 1


async def test_an_error_event_of_another_type_is_not_retried(model_for: Any) -> None:
    invalid = Turn(raw_chunks=[{"type": "error", "error": {"type": "invalid_request_error", "message": "Bad thing"}}])
    with serving(invalid, Turn(text="never")) as server:
        _, error = await collect_failing(model_for(server))
    assert "invalid_request_error: Bad thing" in str(error)
    assert len(sent(server)) == 1


async def test_a_stream_cut_before_anything_was_shown_is_retried(model_for: Any) -> None:
    with serving(Turn(text="lost", fault=Fault.cut(after=2)), Turn(text="whole")) as server:
        events = await collect(model_for(server))
    assert len(retries(events)) == 1
    assert texts(events) == ["whole"]


async def test_a_stream_cut_after_text_was_shown_is_not_retried(model_for: Any) -> None:
    with serving(Turn(text="one two three", fault=Fault.cut(after=5)), Turn(text="never")) as server:
        events, error = await collect_failing(model_for(server))
    assert texts(events) == ["one ", "two "]
    assert "was cut off" in str(error)
    assert len(sent(server)) == 1


async def test_a_persistent_failure_gives_up_after_the_attempts(model_for: Any) -> None:
    with serving(*[Turn(fault=Fault.status(529, message="Overloaded"))] * 3) as server:
        events, error = await collect_failing(model_for(server))
    assert len(retries(events)) == 2
    assert (
        str(error)
        == f"{root(server)}/v1/messages answered 529: Overloaded. Gave up after 3 attempts (model {MODEL!r})."
    )


async def test_a_connection_refused_is_retried_then_reported(model_for: Any) -> None:
    with serving() as server:
        port = server.port
    model = model_for(None, base_url=f"http://127.0.0.1:{port}")
    events, error = await collect_failing(model)
    assert len(retries(events)) == 2
    assert "connection refused" in str(error)


# -- errors --------------------------------------------------------------------------------------


async def test_a_rejected_key_names_where_it_came_from_and_never_the_key(model_for: Any) -> None:
    said = f"invalid x-api-key {KEY}"
    with serving(Turn(fault=Fault.status(401, message=said))) as server:
        _, error = await collect_failing(model_for(server))
    assert isinstance(error, ModelAuthError)
    assert "rejected the key from ANTHROPIC_API_KEY" in str(error)
    assert KEY not in str(error)
    assert "[the key]" in str(error)


async def test_a_wrong_key_is_an_auth_error(model_for: Any) -> None:
    with serving(Turn(text="never")) as server:
        _, error = await collect_failing(model_for(server, api_key="sk-ant-wrong"))
    assert isinstance(error, ModelAuthError)
    assert "rejected the key from ANTHROPIC_API_KEY (401: Incorrect API key provided.)" in str(error)
    assert len(sent(server)) == 1


async def test_403_says_the_key_may_not_use_the_model(model_for: Any) -> None:
    with serving(Turn(fault=Fault.status(403))) as server:
        _, error = await collect_failing(model_for(server))
    assert isinstance(error, ModelAuthError)
    assert "may not be allowed to use the model 'claude-test'" in str(error)


async def test_404_is_a_config_error_naming_the_model_and_where_to_set_it(model_for: Any) -> None:
    with serving(Turn(fault=Fault.status(404, message="model: claude-nope"))) as server:
        _, error = await collect_failing(model_for(server, source="/home/u/config.toml [profiles.claude]"))
    assert isinstance(error, ModelConfigError)
    assert "answered 404 for the model 'claude-test' (model: claude-nope)" in str(error)
    assert "`model` in /home/u/config.toml [profiles.claude]" in str(error)


async def test_a_max_tokens_over_the_models_most_says_to_set_max_output_tokens(model_for: Any) -> None:
    said = "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for claude-test"
    with serving(Turn(fault=Fault.status(400, message=said))) as server:
        _, error = await collect_failing(model_for(server, source="/home/u/config.toml [profiles.claude]"))
    assert type(error) is ModelError
    assert f"answered 400: {said} (model 'claude-test')" in str(error)
    assert "set `max_output_tokens` in /home/u/config.toml [profiles.claude]" in str(error)
    assert len(sent(server)) == 1


async def test_a_missing_key_fails_before_any_request(model_for: Any) -> None:
    model = model_for(None, api_key=None, api_key_env="ANTHROPIC_API_KEY")
    _, error = await collect_failing(model)
    assert isinstance(error, ModelAuthError)
    assert "https://api.anthropic.com" in str(error)
    assert "ANTHROPIC_API_KEY" in str(error)
    assert model._client is None  # nothing was made, nothing sent


async def test_a_profile_without_a_model_is_a_config_error(model_for: Any) -> None:
    _, error = await collect_failing(model_for(None, model=""))
    assert isinstance(error, ModelConfigError)
    assert "names no model" in str(error)


@pytest.mark.parametrize(
    ("chunks", "said"),
    [
        ([{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []}], "an event without a type"),
        (["[DONE]"], "an event that is not JSON"),
    ],
)
async def test_a_stream_that_is_not_the_messages_api(model_for: Any, chunks: list[Any], said: str) -> None:
    with serving(Turn(raw_chunks=chunks)) as server:
        _, error = await collect_failing(model_for(server))
    assert said in str(error)
    assert str(error).endswith("is it Anthropic's Messages API?")
    assert len(sent(server)) == 1


async def test_an_answer_that_is_no_stream_of_events(model_for: Any) -> None:
    with _json_server({"id": "chatcmpl-1", "object": "chat.completion", "choices": []}) as base_url:
        _, error = await collect_failing(model_for(None, base_url=base_url))
    assert "sent a 200 answer of type 'application/json', not a stream of events" in str(error)
    assert str(error).endswith("is it Anthropic's Messages API?")


@contextmanager
def _json_server(answer: dict[str, Any]) -> Iterator[str]:
    """An endpoint that answers every POST with ``answer`` as plain JSON (one that ignores ``stream``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


# -- cancellation --------------------------------------------------------------------------------


async def test_cancel_during_a_slow_stream_returns_at_once_and_closes_the_connection(model_for: Any) -> None:
    with serving(Turn(text=["tick "] * 20, chunk_delay=0.6)) as server:
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
        assert time.monotonic() - cancelled_at < 0.5  # well before the next event
        assert texts(seen) == ["tick "]
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)


async def test_leaving_the_stream_early_closes_the_connection(model_for: Any) -> None:
    with serving(Turn(text=["tick "] * 20, chunk_delay=0.3)) as server:
        async with aclosing(model_for(server).stream(HI)) as stream:
            async for _ in stream:
                break
        assert await anyio.to_thread.run_sync(server.wait_for_disconnect, 2.0)
