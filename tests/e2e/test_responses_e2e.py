"""End to end on OpenAI's Responses API: a real ``refagent`` process whose config file gives a profile
``client = "openai-responses"``, talking through the real ``openai`` client to the scripted server's
Responses wire, which refuses reasoning it did not issue or that comes back out of place, and reports
cached tokens by OpenAI's prefix rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import RecordedRequest, ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.responses_wire import prompt_text
from refagent.testing.wires import PrefixCache, estimate_tokens
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-test-key"


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(
        'default_profile = "responses"\n\n'
        "[profiles.responses]\n"
        'client = "openai-responses"\n'
        f'base_url = "{server.base_url}"\n'
        f'api_key = "{KEY}"\n'
        'model = "o-test"\n'
        'reasoning_effort = ["low", "medium", "high"]\n'
    )
    return agent_env(tmp_path / "home", REFAGENT_CONFIG=str(config), XDG_DATA_HOME=str(tmp_path / "data"))


async def prompt(agent: AgentProcess, sid: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = await agent.result(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )
    return result


def sent(server: ScriptedOpenAIServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith("/responses")]


def thoughts(agent: AgentProcess, sid: str) -> str:
    updates = agent.transcript.updates(sid)
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_thought_chunk")


async def test_a_tool_turn_shows_thoughts_and_sends_the_reasoning_back(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("remember the milk\n")
    turns = [
        Turn(reasoning="I should read the notes.", tool_calls=[ToolCall("read_file", {"path": "notes.txt"})]),
        Turn(reasoning="They are about milk.", text="It says to remember the milk."),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            response = await prompt(agent, sid, "read my notes")
            shown, thought = agent.text(sid), thoughts(agent, sid)
        first, second = (r.body for r in sent(server))
    assert response["stopReason"] == "end_turn"
    assert shown == "It says to remember the milk."
    assert "I should read the notes." in thought
    assert "They are about milk." in thought
    assert first["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert (first["store"], first["include"], first["prompt_cache_key"]) == (
        False,
        ["reasoning.encrypted_content"],
        sid,
    )
    assert first["instructions"]  # the system prompt
    assert {t["name"] for t in first["tools"]} >= {"read_file", "edit_file", "run_command"}
    tail = second["input"][-3:]
    assert [item["type"] for item in tail] == ["reasoning", "function_call", "function_call_output"]
    assert tail[0]["encrypted_content"].startswith("enc_1_")  # issued by the wire, which checked it came back
    assert tail[1]["call_id"] == tail[2]["call_id"] == "call_1_0"
    assert "remember the milk" in tail[2]["output"]
    assert "kept_reasoning" not in json.dumps(second)


async def test_a_ten_step_tool_loop_is_read_from_the_prompt_cache(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("alpha\n")
    steps = [
        Turn(reasoning=f"Step {i}: read it again.", tool_calls=[ToolCall("read_file", {"path": "a.txt"})])
        for i in range(10)
    ]
    with ScriptedOpenAIServer([*steps, Turn(text="Read it ten times.")], api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            response = await prompt(agent, sid, "read a.txt ten times")
        bodies = [r.body for r in sent(server)]
    assert response["stopReason"] == "end_turn"
    assert len(bodies) == 11
    # Each request carries every reasoning item so far, in order: the prefix stays the same.
    for number, body in enumerate(bodies):
        kept = [item["encrypted_content"] for item in body["input"] if item["type"] == "reasoning"]
        assert [c.split("_")[1] for c in kept] == [str(n) for n in range(1, number + 1)]
    # What the stand-in reported, by its rule replayed over the same requests, is what the agent reports.
    prompts = [estimate_tokens(prompt_text(body)) for body in bodies]
    cache = PrefixCache()
    cached = [cache.read(str(body.get("prompt_cache_key") or ""), prompt_text(body)) for body in bodies]
    usage = response["usage"]
    assert usage["inputTokens"] == sum(prompts)
    assert usage["cachedReadTokens"] == sum(cached) > 0
    assert cached[0] == 0
    assert sum(cached[1:]) >= 0.8 * sum(prompts[1:]), (cached, prompts)
