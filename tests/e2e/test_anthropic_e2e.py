"""End to end: a real ``refagent`` process whose config file gives a profile ``client = "anthropic"``,
talking to the scripted server's Messages API on 127.0.0.1 (:mod:`refagent.testing.anthropic_wire`),
which refuses thinking sent back with a wrong signature, or not sent back in an unfinished tool loop, and
reports the usage by Anthropic's prompt-cache rules. Every message the agent writes is checked against the
ACP schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.anthropic_wire import AnthropicWire
from refagent.testing.openai_server import RecordedRequest, ScriptedOpenAIServer
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.process_sessions import notes_read_with_thinking, plan_in_parts, prompt, said

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-ant-test-key"
STEPS = 10


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    """An agent whose only profile is Anthropic's kind on ``server`` (its root: the client adds /v1/messages)."""
    config = tmp_path / "config.toml"
    config.write_text(
        'default_profile = "claude"\n\n'
        "[profiles.claude]\n"
        'client = "anthropic"\n'
        f'base_url = "http://127.0.0.1:{server.port}"\n'
        'api_key_env = "ANTHROPIC_API_KEY"\n'
        'model = "claude-test"\n'
        'reasoning_effort = ["low", "medium", "high"]\n'
    )
    return agent_env(
        tmp_path / "home",
        REFAGENT_CONFIG=str(config),
        ANTHROPIC_API_KEY=KEY,
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


def messages_requests(server: ScriptedOpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith("/v1/messages")]


def wire(server: ScriptedOpenAIServer) -> AnthropicWire:
    found = server.wire("/messages")
    assert isinstance(found, AnthropicWire)
    return found


async def test_thinking_streams_as_thoughts_and_goes_back_signed_in_the_tool_loop(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    turns = notes_read_with_thinking(project)
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read my notes")
        bodies = [r.body for r in messages_requests(server)]
        signature = wire(server).sign("I should read the notes.")
    assert result["stopReason"] == "end_turn"
    assert said(shown, "agent_thought_chunk") == "I should read the notes.They mention milk."
    assert said(shown) == "It says to remember the milk."
    assert any(u["sessionUpdate"] == "tool_call" for u in shown)
    assert len(bodies) == 2  # the second was not refused: its thinking came back, signed
    assert bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 10_000}  # the default level, medium
    assistant, results = bodies[1]["messages"][-2:]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I should read the notes.",
        "signature": signature,
    }
    assert assistant["content"][1]["type"] == "tool_use"
    assert results["content"][0]["type"] == "tool_result"
    assert "remember the milk" in str(results["content"][0]["content"])


async def test_a_long_tool_loop_reads_its_prompt_from_the_cache(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer(plan_in_parts(project, STEPS), api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read every part of the plan")
        usages = wire(server).usages
        requests = messages_requests(server)
    assert result["stopReason"] == "end_turn"
    assert said(shown) == "I have read every part."
    assert len(requests) == len(usages) == STEPS
    later = usages[1:]
    read = sum(u["cache_read_input_tokens"] for u in later)
    every = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in later)
    assert read / every >= 0.8, usages
    assert result["usage"]["cachedReadTokens"] == sum(u["cache_read_input_tokens"] for u in usages) > 0
    assert result["usage"]["cachedWriteTokens"] == sum(u["cache_creation_input_tokens"] for u in usages)
