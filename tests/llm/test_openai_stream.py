"""Chat Completions chunks read into events (:class:`refagent.llm.openai_stream.Assembler`): what a server
wants back with the assistant message, kept: OpenRouter's ``reasoning_details`` gathered in the shape a
response that is not streamed has, and a tool call's ``extra_content`` (Gemini's thought signature)."""

from __future__ import annotations

from typing import Any

from refagent.llm.openai_stream import KEPT_API, Assembler
from refagent.llm.protocol import Finished, KeptReasoning, ModelEvent, ReasoningDelta, TextDelta, ToolCallRequest


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def read(*chunks: dict[str, Any]) -> list[ModelEvent]:
    assembler = Assembler()
    events = [event for chunk in chunks for event in assembler.feed(chunk)]
    return events + list(assembler.finish())


TEXT = {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0}


def test_claudes_thinking_is_gathered_with_its_signature() -> None:
    events = read(
        delta(reasoning="", reasoning_details=[]),
        delta(reasoning="Think", reasoning_details=[{**TEXT, "text": "Think", "signature": None}]),
        delta(reasoning=" more", reasoning_details=[{**TEXT, "text": " more"}]),
        delta(reasoning_details=[{**TEXT, "text": "", "signature": "sig-1"}]),
        delta(tool_calls=[{"index": 0, "id": "c1", "function": {"name": "glob", "arguments": "{}"}}]),
    )
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Think", " more"]
    [kept] = [e for e in events if isinstance(e, KeptReasoning)]
    assert kept == KeptReasoning(
        KEPT_API, ({"reasoning_detail": {**TEXT, "text": "Think more", "signature": "sig-1"}},)
    )
    kinds = [type(e) for e in events]
    assert kinds.index(KeptReasoning) < kinds.index(ToolCallRequest) < kinds.index(Finished)  # the calls' needs first


def test_details_keep_their_order_and_kinds() -> None:
    encrypted = {"type": "reasoning.encrypted", "data": "opaque==", "format": "openai-responses-v1", "index": 1}
    summary = {"type": "reasoning.summary", "summary": "Plan", "format": "openai-responses-v1", "index": 0}
    events = read(
        delta(reasoning_details=[encrypted]),
        delta(reasoning_details=[summary, "not a detail", {**summary, "summary": "ned."}]),
        delta(reasoning_details={"type": "not a list"}),
    )
    [kept] = [e for e in events if isinstance(e, KeptReasoning)]
    assert kept.items == ({"reasoning_detail": {**summary, "summary": "Planned."}}, {"reasoning_detail": encrypted})


def test_reasoning_in_the_servers_own_field_is_kept_whole() -> None:
    """DeepSeek's thinking comes as ``reasoning_content`` and must go back in the tool loop."""
    events = read(delta(reasoning_content="Let me"), delta(reasoning_content=" see."), delta(content="Hi."))
    [kept] = [e for e in events if isinstance(e, KeptReasoning)]
    assert kept.items == ({"reasoning_content": "Let me see."},)


def test_reasoning_in_another_field_is_shown_not_kept() -> None:
    events = read(delta(reasoning="hm"), delta(content="Hi."))  # OpenRouter's and Ollama's plain text
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["hm"]
    assert not [e for e in events if isinstance(e, KeptReasoning)]
    assert events[-1] == Finished("stop")


def test_a_tool_calls_extra_content_is_kept_for_it() -> None:
    """Gemini 3 on Google's endpoint signs the first call of a response: the signature must come back on it."""
    signed = {"google": {"thought_signature": "sig=="}}
    assembler = Assembler("openai-chat http://gemini")
    chunks = [
        delta(
            tool_calls=[{"index": 0, "id": "a", "function": {"name": "glob", "arguments": ""}, "extra_content": signed}]
        ),
        delta(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}]),
        delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "grep", "arguments": "{}"}}]),
    ]
    events = [event for chunk in chunks for event in assembler.feed(chunk)] + list(assembler.finish())
    [kept] = [e for e in events if isinstance(e, KeptReasoning)]
    assert kept == KeptReasoning("openai-chat http://gemini", ({"tool_call_id": "a", "extra_content": signed},))
    assert [e.id for e in events if isinstance(e, ToolCallRequest)] == ["a", "b"]


def test_mistrals_content_chunks_are_text_and_thinking() -> None:
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Hmm, "}, {"type": "text", "text": "yes."}]}
    events = read(
        delta(content=[thinking]),
        delta(content=[{"type": "text", "text": "It is "}, "odd", {"type": "image_url"}]),
        delta(content=[{"type": "text", "text": "42."}]),
    )
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Hmm, ", "yes."]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["It is ", "42."]
    assert not [e for e in events if isinstance(e, KeptReasoning)]  # shown, not wanted back
