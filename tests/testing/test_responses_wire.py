"""The scripted server's Responses API wire, read by the official ``openai`` package with strict validation:
what it streams parses into the SDK's typed events, it refuses what the API refuses, and its usage follows
OpenAI's prefix-cache rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.responses_wire import prompt_text
from refagent.testing.wires import estimate_tokens

pytestmark = pytest.mark.anyio

KEY = "sk-test-key"
REASONING = {"effort": "low", "summary": "auto"}
INCLUDE = ["reasoning.encrypted_content"]
TOOL = {"type": "function", "name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}


@pytest.fixture
async def client_for() -> AsyncIterator[Any]:
    import openai

    made: list[Any] = []

    def make(server: ScriptedOpenAIServer, key: str = KEY) -> Any:
        # Strict: a required field the wire leaves out, or one of the wrong type, fails the parse.
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key=key, max_retries=0, _strict_response_validation=True
        )
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def stream(client: Any, **params: Any) -> list[Any]:
    params.setdefault("model", "gpt-test")
    params.setdefault("input", "hi")
    return [event async for event in await client.responses.create(stream=True, **params)]


async def test_a_streamed_turn_parses_into_the_sdks_typed_events(client_for: Any) -> None:
    from openai.types import responses as types

    turn = Turn(reasoning="Let me look.", text="Reading it.", tool_calls=[ToolCall("read_file", {"path": "a.py"})])
    with ScriptedOpenAIServer([turn], api_key=KEY) as server:
        events = await stream(
            client_for(server), reasoning=REASONING, include=INCLUDE, store=False, tools=[TOOL], prompt_cache_key="s-1"
        )
    kinds = [type(e) for e in events]
    assert kinds[:3] == [types.ResponseCreatedEvent, types.ResponseInProgressEvent, types.ResponseOutputItemAddedEvent]
    for expected in (
        types.ResponseReasoningSummaryPartAddedEvent,
        types.ResponseReasoningSummaryTextDeltaEvent,
        types.ResponseReasoningSummaryTextDoneEvent,
        types.ResponseReasoningSummaryPartDoneEvent,
        types.ResponseContentPartAddedEvent,
        types.ResponseTextDeltaEvent,
        types.ResponseTextDoneEvent,
        types.ResponseContentPartDoneEvent,
        types.ResponseFunctionCallArgumentsDeltaEvent,
        types.ResponseFunctionCallArgumentsDoneEvent,
        types.ResponseOutputItemDoneEvent,
    ):
        assert expected in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    summary = "".join(e.delta for e in events if isinstance(e, types.ResponseReasoningSummaryTextDeltaEvent))
    assert summary == "Let me look."
    assert "".join(e.delta for e in events if isinstance(e, types.ResponseTextDeltaEvent)) == "Reading it."
    arguments = "".join(e.delta for e in events if isinstance(e, types.ResponseFunctionCallArgumentsDeltaEvent))
    assert arguments == '{"path": "a.py"}'
    final = events[-1]
    assert isinstance(final, types.ResponseCompletedEvent)
    reasoning, message, call = final.response.output
    assert isinstance(reasoning, types.ResponseReasoningItem)
    assert reasoning.encrypted_content is not None
    assert reasoning.encrypted_content.startswith("enc_1_")
    assert isinstance(message, types.ResponseOutputMessage)
    assert isinstance(call, types.ResponseFunctionToolCall)
    assert (call.call_id, call.name, call.arguments) == ("call_1_0", "read_file", '{"path": "a.py"}')
    usage = final.response.usage
    assert usage is not None
    assert usage.input_tokens_details.cached_tokens == 0  # the first request: nothing cached yet
    assert usage.output_tokens_details.reasoning_tokens == 3
    assert final.response.output_text == "Reading it."


async def test_no_summary_and_no_encrypted_content_unless_asked(client_for: Any) -> None:
    from openai.types import responses as types

    with ScriptedOpenAIServer([Turn(reasoning="Hidden.", text="ok")]) as server:
        events = await stream(client_for(server))
    assert not [e for e in events if isinstance(e, types.ResponseReasoningSummaryTextDeltaEvent)]
    reasoning = events[-1].response.output[0]
    assert (reasoning.type, reasoning.summary, reasoning.encrypted_content) == ("reasoning", [], None)


async def test_a_length_turn_ends_incomplete(client_for: Any) -> None:
    from openai.types import responses as types

    with ScriptedOpenAIServer([Turn(text="cut", finish_reason="length")]) as server:
        events = await stream(client_for(server))
    final = events[-1]
    assert isinstance(final, types.ResponseIncompleteEvent)
    assert final.response.status == "incomplete"
    assert final.response.incomplete_details is not None
    assert final.response.incomplete_details.reason == "max_output_tokens"


async def test_a_refusal_is_a_refusal_content_part(client_for: Any) -> None:
    from openai.types import responses as types

    with ScriptedOpenAIServer([Turn(refusal="I can't help with that.")]) as server:
        events = await stream(client_for(server))
    assert (
        "".join(e.delta for e in events if isinstance(e, types.ResponseRefusalDeltaEvent)) == "I can't help with that."
    )
    [message] = events[-1].response.output
    assert message.content[0].type == "refusal"


async def test_issued_encrypted_content_comes_back_and_unknown_content_is_refused(client_for: Any) -> None:
    import openai

    turns = [
        Turn(reasoning="Think.", tool_calls=[ToolCall("read_file", {"path": "a"})]),
        Turn(text="done"),
        Turn(text="still here"),
    ]
    with ScriptedOpenAIServer(turns) as server:
        client = client_for(server)
        first = await stream(client, reasoning=REASONING, include=INCLUDE, store=False)
        reasoning, call = (item.to_dict() for item in first[-1].response.output)
        back = [
            {"role": "user", "content": "hi"},
            {key: value for key, value in reasoning.items() if key != "status"},
            {key: call[key] for key in ("type", "call_id", "name", "arguments")},
            {"type": "function_call_output", "call_id": call["call_id"], "output": "contents"},
        ]
        second = await stream(client, input=back, reasoning=REASONING, include=INCLUDE, store=False)
        forged = [*back[:1], {**back[1], "encrypted_content": "enc_1_forged"}, *back[2:]]
        with pytest.raises(openai.BadRequestError, match="could not be verified") as refused:
            await stream(client, input=forged, store=False)
        with pytest.raises(openai.BadRequestError, match="not persisted when `store` is set to false"):
            await stream(
                client,
                input=[back[0], {k: v for k, v in back[1].items() if k != "encrypted_content"}, *back[2:]],
                store=False,
            )
        with pytest.raises(openai.BadRequestError, match="without its required following item"):
            await stream(client, input=back[:2], store=False)
        after = await stream(client)  # the refused requests took no turn
    assert second[-1].response.output_text == "done"
    assert refused.value.status_code == 400
    assert refused.value.body["type"] == "invalid_request_error"  # OpenAI's error shape
    assert after[-1].response.output_text == "still here"


async def test_what_else_the_api_refuses(client_for: Any) -> None:
    import openai

    with ScriptedOpenAIServer(fallback=Turn(text="never")) as server:
        client = client_for(server)
        with pytest.raises(openai.BadRequestError, match="Responses are not persisted"):
            await stream(client, previous_response_id="resp_1", store=False)
        orphan = [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]
        with pytest.raises(
            openai.BadRequestError, match="No tool call found for function call output with call_id call_9"
        ):
            await stream(client, input=orphan)


async def test_errors_and_auth_in_openais_shape(client_for: Any) -> None:
    import openai

    with ScriptedOpenAIServer([Turn(fault=Fault.status(429, retry_after=3))], api_key=KEY) as server:
        with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
            await stream(client_for(server, key="sk-wrong"))
        with pytest.raises(openai.RateLimitError, match="Rate limit") as limited:
            await stream(client_for(server))
    assert limited.value.response.headers["retry-after"] == "3"


async def test_cached_tokens_follow_openais_prefix_rule_per_cache_key(client_for: Any) -> None:
    long = "x" * 8000  # 2000 tokens as the wire counts them
    turns = [Turn(text="ok")] * 5
    with ScriptedOpenAIServer(turns) as server:
        client = client_for(server)

        async def cached(key: str | None, prompt: str) -> int:
            params: dict[str, Any] = {"instructions": long, "input": prompt}
            if key is not None:
                params["prompt_cache_key"] = key
            events = await stream(client, **params)
            return int(events[-1].response.usage.input_tokens_details.cached_tokens)

        assert await cached("a", "first") == 0  # nothing before it
        assert await cached("a", "second") == 1024 + 896  # 2000 shared tokens, counted in steps of 128 from 1024
        assert await cached("b", "first") == 0  # another key, another cache
        assert await cached(None, "first") == 0
        assert await cached(None, "first") == 1920  # no key: one shared bucket
        body = server.requests[-1].body
    assert estimate_tokens(prompt_text(body)) == len(prompt_text(body)) // 4


async def test_a_turn_can_set_its_usage(client_for: Any) -> None:
    with ScriptedOpenAIServer([Turn(text="ok", usage=(5000, 7), cached_tokens=4096)]) as server:
        events = await stream(client_for(server))
    usage = events[-1].response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cached_tokens) == (5000, 7, 4096)


async def test_not_streamed_the_whole_response(client_for: Any) -> None:
    turn = Turn(text="hi there", tool_calls=[ToolCall("glob", {"pattern": "*"})])
    with ScriptedOpenAIServer([turn]) as server:
        response = await client_for(server).responses.create(model="gpt-test", input="hi")
    assert response.status == "completed"
    assert response.output_text == "hi there"
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.usage is not None
