"""The scripted server's Chat Completions usage for Claude on OpenRouter (:class:`ChatWire`): Anthropic's
prompt-cache rule over the body as OpenRouter hands it to Anthropic, with its 20-block lookback; nothing
cached where nothing asks."""

from __future__ import annotations

from typing import Any

from refagent.testing.script import Turn
from refagent.testing.wires import ChatWire, claude_prompt

EPHEMERAL = {"type": "ephemeral"}
CLAUDE = "anthropic/claude-test"


def system(marked: bool) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": "system " * 800}
    return {"role": "system", "content": [{**part, "cache_control": EPHEMERAL} if marked else part]}


def step(n: int) -> list[dict[str, Any]]:
    """One step of a tool loop: the call, and its result (two blocks)."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"line {n} " * 50},
    ]


def body(messages: list[dict[str, Any]], automatic: bool = True, model: str = CLAUDE) -> dict[str, Any]:
    found: dict[str, Any] = {"model": model, "messages": messages}
    if automatic:
        found["cache_control"] = EPHEMERAL
    return found


def usage(wire: ChatWire, sent: dict[str, Any]) -> tuple[int, int, int]:
    got = wire.usage(Turn(), sent, 1)
    details = got.get("prompt_tokens_details", {})
    return got["prompt_tokens"], details.get("cached_tokens", 0), details.get("cache_write_tokens", 0)


def test_the_prompt_is_read_in_anthropics_order_and_automatic_caching_marks_its_end() -> None:
    tools = [{"type": "function", "function": {"name": "t"}, "cache_control": EPHEMERAL}]
    messages = [{"role": "user", "content": "hi"}, system(False), *step(1)]
    blocks = claude_prompt({"tools": tools, "messages": messages, "cache_control": EPHEMERAL})
    assert [marked for _, marked in blocks] == [True, False, False, False, True]
    assert blocks[0][0] == {"type": "function", "function": {"name": "t"}}  # without its mark
    assert blocks[1][0]["role"] == "system"  # wherever it was
    assert blocks[3][0] == {"role": "assistant", "block": {"type": "tool_use", **messages[2]["tool_calls"][0]}}


def test_nothing_is_cached_unasked() -> None:
    wire = ChatWire()
    messages = [system(False), {"role": "user", "content": "go"}]
    for n in range(3):
        messages += step(n)
        total, read, written = usage(wire, body(messages, automatic=False))
        assert (read, written) == (0, 0)
        assert total > 0
    assert "prompt_tokens_details" not in wire.usages[-1]


def test_each_step_reads_the_last_ones_write_within_twenty_blocks() -> None:
    wire = ChatWire()
    messages = [system(True), {"role": "user", "content": "go " * 500}]
    total, read, written = usage(wire, body(messages))
    assert (read, written) == (0, total)
    for n in range(5):
        before = total
        messages += step(n)
        total, read, written = usage(wire, body(messages))
        assert (read, written) == (before, total - before)
    # A step of 11 calls adds 22 blocks: the last write is out of sight; the system prompt's is not.
    for n in range(100, 111):
        messages += step(n)
    total, read, written = usage(wire, body(messages))
    assert 0 < read < before
    assert usage(wire, body(messages, model="openai/gpt-test"))[1:] == (0, 0)  # the rule is Claude's
