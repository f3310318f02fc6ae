"""End to end: a real ``refagent`` process on ``openrouter/anthropic/claude-sonnet-4.5`` (the OpenRouter
provider, its endpoint moved by the config file to the scripted server on 127.0.0.1), over a long tool
loop. Claude caches nothing unless the request asks; the scripted server reports the usage by OpenRouter's
way with Claude (Anthropic's prompt-cache rule, its 20-block lookback, a ``cache_control`` on the body
marking the last block), so the cache it reads is what refagent asked for. Every message the agent writes
is checked against the ACP schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.process_sessions import chat_wire, notes_read_with_thinking, plan_in_parts, prompt, said

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-or-test-key"
STEPS = 10


def env_for(tmp_path: Path, server: ScriptedOpenAIServer, config_text: str = "") -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.openrouter]\nbase_url = "http://127.0.0.1:{server.port}/api/v1"\n{config_text}')
    return agent_env(
        tmp_path / "home",
        REFAGENT_CONFIG=str(config),
        REFAGENT_MODEL="openrouter/anthropic/claude-sonnet-4.5",
        OPENROUTER_API_KEY=KEY,
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


async def test_a_long_tool_loop_on_claude_reads_its_prompt_from_the_cache(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer(plan_in_parts(project, STEPS), api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read every part of the plan")
        wire = chat_wire(server)
        usages = wire.usages
        bodies = [r.body for r in server.chat_requests]
    assert result["stopReason"] == "end_turn"
    assert said(shown) == "I have read every part."
    assert len(bodies) == len(usages) == STEPS
    assert all(body["model"] == "anthropic/claude-sonnet-4.5" for body in bodies)
    assert len({body["session_id"] for body in bodies}) == 1  # one upstream provider: where the cache is
    later = usages[1:]
    read = sum(u["prompt_tokens_details"]["cached_tokens"] for u in later)
    assert read / sum(u["prompt_tokens"] for u in later) >= 0.8, usages
    assert result["usage"]["cachedReadTokens"] == sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert result["usage"]["cachedWriteTokens"] == sum(u["prompt_tokens_details"]["cache_write_tokens"] for u in usages)
    # Priced as OpenRouter prices Claude Sonnet 4.5 (per million: $3 in, $0.30 read, $3.75 written, $15 out).
    prices = {"prompt": 3.0, "read": 0.3, "written": 3.75, "completion": 15.0}
    cost = 0.0
    for u in usages:
        cached, written = u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens_details"]["cache_write_tokens"]
        cost += (u["prompt_tokens"] - cached - written) * prices["prompt"] + cached * prices["read"]
        cost += written * prices["written"] + u["completion_tokens"] * prices["completion"]
    [*_, last] = [u for u in shown if u["sessionUpdate"] == "usage_update"]
    assert last["cost"]["amount"] == pytest.approx(cost / 1_000_000, abs=1e-6)  # said to the millionth
    uncached = sum(
        u["prompt_tokens"] * prices["prompt"] + u["completion_tokens"] * prices["completion"] for u in usages
    )
    assert cost < 0.5 * uncached, (cost, uncached)  # what the same turn costs where nothing is cached


THINKING = """
[providers.openrouter.models."anthropic/claude-sonnet-4.5"]
reasoning_effort = ["low", "medium", "high"]
"""


async def test_claudes_thinking_streams_as_thoughts_and_goes_back_signed(tmp_path: Path, check: Any) -> None:
    """Claude on OpenRouter thinks (at the default level, medium, with the budget the ``anthropic`` kind gives
    it); its thinking shows as thoughts, and its ``reasoning_details`` go back, signed and unchanged, with the
    tool calls they led to: the scripted server refuses the tool loop's next request otherwise, as Anthropic
    does."""
    project = tmp_path / "project"
    project.mkdir()
    turns = notes_read_with_thinking(project)
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read my notes")
        wire = chat_wire(server)
        signature = wire.sign("I should read the notes.")
        bodies = [r.body for r in server.chat_requests]
    assert result["stopReason"] == "end_turn"
    assert said(shown, "agent_thought_chunk") == "I should read the notes.They mention milk."
    assert said(shown) == "It says to remember the milk."
    assert len(bodies) == 2  # the second was not refused: its thinking came back, signed
    assert bodies[0]["reasoning"] == {"max_tokens": 10_000}  # medium, as the anthropic kind budgets it
    assert bodies[0]["max_tokens"] == 64_000  # the model's limit: room for the answer
    assert "reasoning_effort" not in bodies[0]
    assistant = next(m for m in bodies[1]["messages"] if m["role"] == "assistant")
    assert assistant["reasoning_details"] == [
        {
            "type": "reasoning.text",
            "format": "anthropic-claude-v1",
            "index": 0,
            "text": "I should read the notes.",
            "signature": signature,
        }
    ]
    assert assistant["tool_calls"][0]["function"]["name"] == "read_file"
