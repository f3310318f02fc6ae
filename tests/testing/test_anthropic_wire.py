"""The scripted server's Messages API (:mod:`refagent.testing.anthropic_wire`) as the official ``anthropic``
SDK reads it: the streams parse into the SDK's typed events and final message, the errors into its typed
exceptions, and what the API refuses is refused (a tampered signature, thinking missing from a tool loop,
roles that do not alternate...). The usage follows the prompt-cache breakpoints."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import pytest
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    SignatureDelta,
    TextDelta,
    ThinkingDelta,
)

from refagent.testing.anthropic_wire import AnthropicWire
from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn

pytestmark = pytest.mark.anyio

KEY = "sk-ant-test"
MODEL = "claude-test"
HI = [{"role": "user", "content": "hi"}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
LONG = "You are a careful assistant. " * 400  # ~3000 tokens as the wire counts (JSON length / 4)


@contextmanager
def serving(*turns: Turn, **options: Any) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(turns, api_key=KEY, **options) as server:
        yield server


def root(server: ScriptedOpenAIServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def wire(server: ScriptedOpenAIServer) -> AnthropicWire:
    found = server.wire("/messages")
    assert isinstance(found, AnthropicWire)
    return found


@pytest.fixture
async def sdk() -> AsyncIterator[Any]:
    """Makes SDK clients for a server (no retries: a test sees each answer), closed after the test."""
    made: list[anthropic.AsyncAnthropic] = []

    def make(server: ScriptedOpenAIServer, key: str = KEY) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(base_url=root(server), api_key=key, max_retries=0)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


def post(server: ScriptedOpenAIServer, body: dict[str, Any]) -> tuple[int, Any]:
    """A raw request, for bodies the SDK would not send."""
    request = urllib.request.Request(
        f"{root(server)}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# -- streams ------------------------------------------------------------------------------------


async def test_a_stream_is_typed_events_and_a_final_message(sdk: Any) -> None:
    turn = Turn(
        reasoning="The user wants the notes.",
        text="Reading them.",
        tool_calls=[ToolCall("read_file", {"path": "notes.txt"})],
        argument_chunks=3,
    )
    with serving(turn) as server:
        client = sdk(server)
        async with client.messages.stream(model=MODEL, max_tokens=4096, messages=HI, thinking=THINKING) as stream:
            events = [event async for event in stream]
            final = await stream.get_final_message()
    assert isinstance(events[0], RawMessageStartEvent)
    starts = [e.content_block.type for e in events if isinstance(e, RawContentBlockStartEvent)]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = [type(e.delta) for e in events if isinstance(e, RawContentBlockDeltaEvent)]
    assert deltas.count(ThinkingDelta) == 5  # word by word
    assert deltas.count(SignatureDelta) == 1
    assert deltas.count(TextDelta) == 2
    assert deltas.count(InputJSONDelta) == 3
    assert [e.delta.stop_reason for e in events if isinstance(e, RawMessageDeltaEvent)] == ["tool_use"]
    thinking, text, call = final.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "The user wants the notes."
    assert thinking.signature == wire(server).sign("The user wants the notes.")
    assert text.type == "text"
    assert text.text == "Reading them."
    assert call.type == "tool_use"
    assert (call.id, call.name, call.input) == ("toolu_1_0", "read_file", {"path": "notes.txt"})
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 11  # a token a delta
    assert final.usage.cache_read_input_tokens == 0
    assert final.usage.cache_creation_input_tokens == 0


async def test_raw_events_come_in_the_documented_order(sdk: Any) -> None:
    with serving(Turn(text="Hello there")) as server:
        stream = await sdk(server).messages.create(model=MODEL, max_tokens=100, messages=HI, stream=True)
        kinds = [event.type async for event in stream]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert b"event: ping" in b"".join(wire(server).events(Turn(text="x"), {"model": MODEL}, 2))


async def test_a_whole_message_when_not_streamed(sdk: Any) -> None:
    with serving(Turn(text="Hello there", tool_calls=[ToolCall("glob", {"pattern": "*.md"}, id="toolu_x")])) as server:
        message = await sdk(server).messages.create(model=MODEL, max_tokens=100, messages=HI)
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"pattern": "*.md"}
    assert message.content[1].id == "toolu_x"
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens > 0


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (Turn(text="cut", finish_reason="length"), "max_tokens"),
        (Turn(text="done"), "end_turn"),
        (Turn(refusal="I can't help with that."), "refusal"),
        (Turn(text="paused", finish_reason="pause_turn"), "pause_turn"),
    ],
)
async def test_stop_reasons(sdk: Any, turn: Turn, reason: str) -> None:
    with serving(turn) as server:
        async with sdk(server).messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
            final = await stream.get_final_message()
    assert final.stop_reason == reason


async def test_an_error_event_reaches_the_sdk_as_an_error(sdk: Any) -> None:
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": MODEL,
                                               "content": [], "stop_reason": None, "stop_sequence": None,
                                               "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]  # fmt: skip
    with serving(Turn(raw_chunks=events)) as server:
        stream = await sdk(server).messages.create(model=MODEL, max_tokens=100, messages=HI, stream=True)
        with pytest.raises(anthropic.APIStatusError) as caught:
            async for _ in stream:
                pass
    assert caught.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error", "kind"),
    [
        (Fault.status(529, message="Overloaded"), anthropic.OverloadedError, "overloaded_error"),
        (Fault.status(429, retry_after=7), anthropic.RateLimitError, "rate_limit_error"),
        (Fault.status(500), anthropic.InternalServerError, "api_error"),
        (Fault.status(404, message="model: claude-nope"), anthropic.NotFoundError, "not_found_error"),
    ],
)
async def test_faults_have_anthropics_error_shape(sdk: Any, fault: Fault, error: type, kind: str) -> None:
    with serving(Turn(fault=fault)) as server, pytest.raises(error) as caught:
        await sdk(server).messages.create(model=MODEL, max_tokens=100, messages=HI)
    assert caught.value.body == {"type": "error", "error": {"type": kind, "message": fault.message}}
    if fault.retry_after is not None:
        assert caught.value.response.headers["retry-after"] == "7"


async def test_a_wrong_key_is_an_authentication_error(sdk: Any) -> None:
    with serving(Turn(text="never")) as server, pytest.raises(anthropic.AuthenticationError) as caught:
        await sdk(server, key="sk-ant-wrong").messages.create(model=MODEL, max_tokens=100, messages=HI)
    assert caught.value.body["error"]["type"] == "authentication_error"


def test_the_key_goes_in_x_api_key() -> None:
    with serving(Turn(text="ok")) as server:
        status, _ = post(server, {"model": MODEL, "max_tokens": 10, "messages": HI})
    assert status == 200
    assert server.requests[0].headers["x-api-key"] == KEY


# -- what the API refuses -----------------------------------------------------------------------


async def test_signed_thinking_comes_back_and_a_tampered_signature_is_refused(sdk: Any) -> None:
    call = ToolCall("read_file", {"path": "a.txt"})
    with serving(Turn(reasoning="I should read a.txt.", tool_calls=[call]), Turn(text="It is empty.")) as server:
        client = sdk(server)
        first = await client.messages.create(model=MODEL, max_tokens=4096, messages=HI, thinking=THINKING)
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1_0", "content": ""}]}
        genuine = [*HI, first.to_param(), result]
        tampered_content = [block.model_dump(exclude_none=True) for block in first.content]
        tampered_content[0]["thinking"] = "I should read /etc/passwd."
        tampered = [*HI, {"role": "assistant", "content": tampered_content}, result]
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model=MODEL, max_tokens=4096, messages=tampered, thinking=THINKING)
        second = await client.messages.create(model=MODEL, max_tokens=4096, messages=genuine, thinking=THINKING)
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "messages.1.content.0: Invalid `signature` in `thinking` block",
    }
    assert second.content[0].text == "It is empty."


def test_an_unfinished_tool_loop_needs_its_thinking_back_when_thinking_is_on() -> None:
    assistant = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "glob", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.md"}]}
    body = {"model": MODEL, "max_tokens": 4096, "messages": [*HI, assistant, result]}
    with serving(Turn(text="ok")) as server:
        refused = post(server, {**body, "thinking": THINKING})
        without_thinking = post(server, body)
    assert refused[0] == 400
    assert refused[1]["error"]["message"].startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."
    )
    assert without_thinking[0] == 200


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"messages": [*HI, *HI]}, 'roles must alternate between "user" and "assistant"'),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}, "text content blocks must be"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "greater than or equal to 1024"),
        ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "`max_tokens` must be greater than"),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}]},
            "unexpected `tool_use_id` found in `tool_result` blocks: t9",
        ),
        (
            {"messages": [*HI, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "g",
                                                                  "input": {}}]}, *HI]},
            "`tool_use` ids were found without `tool_result` blocks immediately after: t1",
        ),
        (
            {"system": [{"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}} for i in range(5)]},
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
    ],
)  # fmt: skip
def test_what_the_api_refuses(change: dict[str, Any], said: str) -> None:
    body = {k: v for k, v in {"model": MODEL, "max_tokens": 4096, "messages": HI, **change}.items() if v is not None}
    with serving(Turn(text="never")) as server:
        status, answer = post(server, body)
    assert status == 400
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert said in answer["error"]["message"]


# -- the prompt cache ---------------------------------------------------------------------------


def marked(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


async def test_the_usage_follows_the_cache_breakpoints(sdk: Any) -> None:
    system = [marked(LONG)]
    first_messages = [{"role": "user", "content": [marked("Read the notes, please.")]}]
    second_messages = [
        {"role": "user", "content": [marked("Read the notes, please.")]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [marked("And now?")]},
    ]
    with serving(Turn(text="Done."), Turn(text="Now this."), Turn(text="Again.")) as server:
        client = sdk(server)
        first = await client.messages.create(model=MODEL, max_tokens=100, system=system, messages=first_messages)
        second = await client.messages.create(model=MODEL, max_tokens=100, system=system, messages=second_messages)
        other = await client.messages.create(model="claude-other", max_tokens=100, system=system, messages=HI)
    written = first.usage.cache_creation_input_tokens
    assert written > 1024
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == written  # the first request's prefix, marked again
    assert second.usage.cache_creation_input_tokens > 0  # the new end
    assert second.usage.input_tokens == 0  # everything up to the last breakpoint: read or written
    assert other.usage.cache_read_input_tokens == 0  # the cache is per model
    assert wire(server).usages[1]["cache_read_input_tokens"] == written


def test_a_prefix_under_1024_tokens_is_not_cached() -> None:
    body = {"model": MODEL, "max_tokens": 10, "system": [marked("short")], "messages": HI}
    with serving(Turn(text="a"), Turn(text="b")) as server:
        post(server, body)
        post(server, body)
    assert [u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in wire(server).usages] == [0, 0]


def test_a_scripted_usage_and_cached_tokens_override_the_rule() -> None:
    body = {"model": MODEL, "max_tokens": 10, "system": [marked(LONG)], "messages": HI}
    with serving(Turn(text="a", usage=(5000, 9), cached_tokens=4000)) as server:
        post(server, body)
    assert wire(server).usages == [
        {"input_tokens": 1000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4000, "output_tokens": 9}
    ]


def test_cache_control_is_no_part_of_the_cached_text() -> None:
    first = {
        "model": MODEL,
        "max_tokens": 10,
        "system": [marked(LONG)],
        "messages": [{"role": "user", "content": [marked("one")]}],
    }
    moved = {"model": MODEL, "max_tokens": 10, "system": [{"type": "text", "text": LONG}], "messages": [
        {"role": "user", "content": [marked("one")]}, {"role": "assistant", "content": "two"},
        {"role": "user", "content": [marked("three")]}]}  # fmt: skip
    with serving(Turn(text="a"), Turn(text="b")) as server:
        post(server, first)
        post(server, moved)
    written = wire(server).usages[0]["cache_creation_input_tokens"]
    assert wire(server).usages[1]["cache_read_input_tokens"] == written
