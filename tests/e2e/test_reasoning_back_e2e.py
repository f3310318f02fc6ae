"""End to end: a real ``refagent`` process on a provider's model over Chat Completions (the provider's
endpoint moved by the config file to the scripted server on 127.0.0.1), where the server refuses a tool
loop that does not give back what it added to its answers, as the real one does: Gemini 3's thought
signatures (``extra_content`` on the first tool call of each response) and DeepSeek's thinking
(``reasoning_content``). The loop goes on only if refagent sends each back with the message it came
with. Every message the agent writes is checked against the ACP schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.process_sessions import chat_wire, load, prompt, said

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "test-key"


def env_for(tmp_path: Path, server: ScriptedOpenAIServer, provider: str = "gemini", model: str = "") -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.{provider}]\nbase_url = "http://127.0.0.1:{server.port}/v1"\n')
    return agent_env(
        tmp_path / "home",
        REFAGENT_CONFIG=str(config),
        REFAGENT_MODEL=f"{provider}/{model or 'gemini-3-pro-preview'}",
        **{f"{provider.upper()}_API_KEY": KEY},
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


def read(path: str) -> ToolCall:
    return ToolCall("read_file", {"path": path})


async def test_gemini_3s_thought_signatures_go_back_with_their_calls(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (project / name).write_text(f"the {name} notes\n")
    turns = [
        Turn(tool_calls=[read("a.txt"), read("b.txt")]),  # two at once: the first is signed
        Turn(tool_calls=[read("c.txt")]),
        Turn(text="Read all three."),
        Turn(tool_calls=[read("a.txt")]),  # after a load too
        Turn(text="Again."),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read the notes")
        assert result["stopReason"] == "end_turn"
        assert said(shown) == "Read all three."
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            await load(agent, sid, project)
            result, shown = await prompt(agent, sid, "once more")
        assert said(shown) == "Again."  # not refused
        wire = chat_wire(server)
        bodies = [r.body for r in server.chat_requests]
    assert len(bodies) == 5
    calls = [m["tool_calls"] for m in bodies[2]["messages"] if m.get("tool_calls")]
    assert [len(c) for c in calls] == [2, 1]
    for made in calls:
        assert made[0]["extra_content"] == {"google": {"thought_signature": wire.sign(made[0]["id"])}}
    assert "extra_content" not in calls[0][1]  # only the first of a response is signed
    again = [m["tool_calls"] for m in bodies[4]["messages"] if m.get("tool_calls")]
    assert [c[0]["extra_content"] for c in again[:2]] == [c[0]["extra_content"] for c in calls]  # kept on disk


async def test_deepseeks_thinking_goes_back_with_its_tool_calls(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("the notes\n")
    turns = [
        Turn(reasoning="I should read a.txt.", tool_calls=[read("a.txt")]),
        Turn(reasoning="It has notes.", tool_calls=[read("a.txt")]),
        Turn(reasoning="Done.", text="It holds the notes."),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = env_for(tmp_path, server, "deepseek", "deepseek-reasoner")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "read a.txt")
        bodies = [r.body for r in server.chat_requests]
    assert result["stopReason"] == "end_turn"
    assert said(shown) == "It holds the notes."  # not refused
    assert said(shown, "agent_thought_chunk") == "I should read a.txt.It has notes.Done."
    assistants = [m for m in bodies[2]["messages"] if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistants] == ["I should read a.txt.", "It has notes."]
