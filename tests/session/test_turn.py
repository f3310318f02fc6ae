"""The prompt turn on its own: stop reasons, history, retries shown, changed files noted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from refagent.acp import updates
from refagent.errors import ModelError, ModelRefused
from refagent.llm.protocol import (
    KEPT_REASONING,
    Finished,
    KeptReasoning,
    ModelEvent,
    ModelRequest,
    Retrying,
    TextDelta,
    ToolCallRequest,
    Usage,
    kept_reasoning,
    wire_message,
)
from refagent.llm.scripted import Fail, Response, ScriptedModel, text
from refagent.session.turn import Turn, run_prompt

pytestmark = pytest.mark.anyio


class Echo:
    """A tool runner that answers every call with its arguments."""

    def specs(self) -> list[Any]:
        return []

    async def run(self, call: ToolCallRequest) -> str:
        return f"ran {call.name} {call.arguments}"


async def play(
    *responses: Response, **options: Any
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], ScriptedModel]:
    model = ScriptedModel(list(responses))
    sent: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    turn = Turn(model=model, history=history, send_update=send, tools=Echo(), **options)
    stop = await run_prompt(turn, {"role": "user", "content": "go"})
    return stop, sent, history, model


async def test_end_turn_and_history() -> None:
    stop, _, history, _ = await play([ToolCallRequest("c1", "read_file", "{}")], text("done"))
    assert stop == "end_turn"
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2] == {"role": "tool", "tool_call_id": "c1", "content": "ran read_file {}"}


async def test_max_tokens_gives_unrun_calls_a_result() -> None:
    stop, _, history, _ = await play([TextDelta("cut"), ToolCallRequest("c1", "x", "{"), Finished("length")])
    assert stop == "max_tokens"
    assert history[-1]["role"] == "tool"
    assert "cut short" in history[-1]["content"]


async def test_refusal() -> None:
    stop, _, _, _ = await play([TextDelta("no"), Finished("refusal")])
    assert stop == "refusal"
    stop, sent, _, _ = await play([Fail(ModelRefused("policy"))])
    assert stop == "refusal"
    assert "refused: policy" in sent[-1]["content"]["text"]


async def test_max_turn_requests() -> None:
    loop = [ToolCallRequest("c", "x", "{}")]
    stop, _, _, model = await play(loop, loop, loop, max_requests=2)
    assert stop == "max_turn_requests"
    assert len(model.requests) == 2


async def test_model_failure_is_told_and_ends_the_turn() -> None:
    stop, sent, history, _ = await play([TextDelta("partial "), Fail(ModelError("endpoint down (HTTP 503)"))])
    assert stop == "end_turn"
    assert sent[-1]["sessionUpdate"] == "agent_message_chunk"
    assert "endpoint down" in sent[-1]["content"]["text"]
    assert history[-1] == {"role": "assistant", "content": "partial "}


async def test_retries_are_shown_as_thoughts() -> None:
    _, sent, _, _ = await play([Retrying(2, 0.25, "HTTP 429", 4), TextDelta("ok")])
    assert sent[0]["sessionUpdate"] == "agent_thought_chunk"
    assert "retrying in 0.2 s (attempt 2 of 4)" in sent[0]["content"]["text"]


async def test_usage_is_reported_as_the_update_the_meter_makes() -> None:
    seen: list[Usage] = []

    def usage(counts: Usage) -> dict[str, Any]:
        seen.append(counts)
        return updates.usage(counts.prompt_tokens + counts.completion_tokens, 1000)

    _, sent, _, _ = await play([TextDelta("x"), Usage(10, 2)], usage=usage)
    assert seen == [Usage(10, 2)]
    assert {"sessionUpdate": "usage_update", "used": 12, "size": 1000} in sent


async def test_reasoning_an_api_wants_back_is_kept_on_its_message_and_sent_in_the_next_request() -> None:
    signed = {"type": "thinking", "thinking": "Read it first.", "signature": "sig-1"}
    _, _, history, model = await play(
        [KeptReasoning("anthropic", (signed,)), ToolCallRequest("c1", "read_file", "{}")],
        text("done"),
        cache_key="session-1",
    )
    assert history[1][KEPT_REASONING] == {"api": "anthropic", "items": [signed]}
    second = model.requests[1]
    assert kept_reasoning(second.messages[1], "anthropic") == [signed]
    assert kept_reasoning(second.messages[1], "openai-responses") == []  # another API's: left out
    assert KEPT_REASONING not in wire_message(second.messages[1])
    assert wire_message(second.messages[0]) is second.messages[0]  # nothing to drop: no copy
    assert [r.cache_key for r in model.requests] == ["session-1", "session-1"]


class Slow:
    """A model that sends nothing for ``seconds``, then its text."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await anyio.sleep(self.seconds)
        yield TextDelta("finally")
        yield Finished("stop")


@pytest.mark.parametrize("notices", [True, False], ids=["notices", "thoughts"])
async def test_a_silent_model_is_said_to_be_waited_for(notices: bool) -> None:
    """After ``quiet_after`` seconds of nothing, the user hears that the model is waited for (a notice, or
    a thought line), and again every twice that while it stays silent; what happens after the stall limit,
    and that cancelling ends it now, are in the words."""
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    turn = Turn(model=Slow(0.45), history=[], send_update=send, notices=notices, quiet_after=0.1, stall_seconds=9)
    assert await run_prompt(turn, {"role": "user", "content": "go"}) == "end_turn"
    kind = "notice" if notices else "agent_thought_chunk"
    said = [u for u in sent if u["sessionUpdate"] == kind]
    assert len(said) == 2  # at 0.1 s and 0.3 s
    words = said[0]["description"] if notices else said[0]["content"]["text"]
    assert "Nothing from the model for 0 s; still waiting" in words
    assert "silent for 9 s is retried; cancelling ends the turn now" in words
    if notices:
        assert (said[0]["severity"], said[0]["title"]) == ("info", "Waiting for the model")
    assert sent[-1]["sessionUpdate"] == "agent_message_chunk"


async def test_a_model_that_streams_is_not_said_to_be_waited_for() -> None:
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    turn = Turn(model=ScriptedModel([text("a b c")]), history=[], send_update=send, notices=True, quiet_after=0.05)
    await run_prompt(turn, {"role": "user", "content": "go"})
    assert not [u for u in sent if u["sessionUpdate"] == "notice"]


async def test_a_cancelled_response_keeps_no_reasoning() -> None:
    """Kept reasoning comes at the end of a response: one cut before it keeps none, and the history stays
    what a plain message would be."""
    _, _, history, _ = await play([TextDelta("partial"), Finished("length")])
    assert KEPT_REASONING not in history[1]


async def test_changed_files_are_noted_before_the_next_request() -> None:
    pending = [["src/a.py"], []]
    _, _, _, model = await play(
        [ToolCallRequest("c", "x", "{}")], text("ok"), changed_files=lambda: pending.pop(0) if pending else []
    )
    first = model.requests[0].messages
    assert "src/a.py" in first[-1]["content"]
    assert "changed outside your tool calls" in first[-1]["content"]
    assert not any("system-reminder" in str(m.get("content")) for m in model.requests[1].messages[len(first) :])


async def test_system_prompt_leads() -> None:
    _, _, _, model = await play(text("hi"), system_prompt="You are a test.")
    assert model.requests[0].messages[0] == {"role": "system", "content": "You are a test."}


async def test_a_retry_is_a_notice_for_a_client_that_shows_them() -> None:
    _, sent, _, _ = await play([Retrying(2, 0.25, "HTTP 429", 4), TextDelta("ok")], notices=True)
    assert sent[0]["sessionUpdate"] == "notice"
    assert sent[0]["severity"] == "warning"
    assert "retrying in 0.2 s (attempt 2 of 4)" in sent[0]["description"]
    assert not any(u["sessionUpdate"] == "agent_thought_chunk" for u in sent)


async def test_the_sessions_reasoning_effort_goes_into_each_request() -> None:
    _, _, _, model = await play(text("ok"), reasoning_effort="high")
    assert [r.reasoning_effort for r in model.requests] == ["high"]
