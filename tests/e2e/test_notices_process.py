"""Notices from a real ``refagent`` process, over real pipes, with the real OpenAI adapter against the scripted
server: an MCP stdio server that fails at start and a request answered 429 (which the adapter retries) are
notices for a client with ``session.notices``, never recorded (a restarted agent's load replays neither),
and an agent message and a thought for one without; a broken config file and an unconfined machine
(``REFAGENT_SANDBOX_DISABLE``) likewise, the broken file told by the built-in model at the first prompt
for a client without notices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.mcp_servers.harness import stdio_entry
from tests.support.process_sessions import KEY, after_opening, config_path, env_for, load, prompt, said, thread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTICES: dict[str, Any] = {"session": {"notices": {}}}


def notices(agent: AgentProcess, sid: str) -> list[dict[str, Any]]:
    return [u for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "notice"]


@pytest.mark.parametrize("capable", [True, False], ids=["notices", "no-notices"])
async def test_a_failed_mcp_server_and_a_retried_request(tmp_path: Path, check: Any, capable: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [Turn(fault=Fault.status(429, retry_after=0)), Turn(text="made it")]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize(NOTICES if capable else {})
            params = {"cwd": str(project), "mcpServers": [stdio_entry("quits", "exit", "3")]}
            sid = (await agent.result("session/new", params))["sessionId"]
            if capable:
                await agent.wait_for(lambda m: m.get("params", {}).get("update", {}).get("sessionUpdate") == "notice")
            else:
                await agent.wait_for(lambda m: "MCP server quits" in said([m.get("params", {}).get("update", {})]))
            opened = list(agent.transcript.updates(sid))
            result, shown = await prompt(agent, sid, "go")
            assert result["stopReason"] == "end_turn"
            await agent.close_stdin()
            assert await agent.wait_exit(10) == 0
        assert len(server.chat_requests) == 2  # the 429, then the retry

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:  # a restart
            await agent.initialize(NOTICES if capable else {})
            _, replayed = await load(agent, sid, project)

    mcp = [u for u in opened if u["sessionUpdate"] in ("notice", "agent_message_chunk")]
    if capable:
        [failed] = mcp
        assert failed["sessionUpdate"] == "notice"
        assert (failed["severity"], failed["title"]) == ("error", "MCP server quits failed")
        assert "exited with code 3" in failed["description"]
        [retried] = [u for u in shown if u["sessionUpdate"] == "notice"]
        assert (retried["severity"], retried["title"]) == ("warning", "The model request is being retried")
        assert "429" in retried["description"]
        assert "attempt 2" in retried["description"]
        assert said(shown, "agent_thought_chunk") == ""
        assert said(shown) == "made it"
        # never recorded: the load replays the prompt and the answer only
        assert thread(replayed) == [("user_message_chunk", "go"), ("agent_message_chunk", "made it")]
        assert [u["sessionUpdate"] for u in replayed] == ["user_message_chunk", "agent_message_chunk"]
    else:
        assert said(mcp).startswith("MCP server quits: exited with code 3")
        assert notices(agent, sid) == []
        assert not any(u["sessionUpdate"] == "notice" for u in shown)
        assert "retrying in 0.0 s (attempt 2" in said(shown, "agent_thought_chunk")
        assert said(shown) == "made it"
        kinds = [kind for kind, _ in thread(replayed)]
        assert kinds[-3:] == ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk"]  # as before


@pytest.mark.parametrize("capable", [True, False], ids=["notices", "no-notices"])
async def test_a_broken_config_file_and_an_unconfined_machine(tmp_path: Path, check: Any, capable: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = config_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('default_profile = "work"\n[profiles.work\n')
    env = env_for(tmp_path, None, REFAGENT_SANDBOX_DISABLE="namespaces,landlock")
    async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
        await agent.initialize(NOTICES if capable else {})
        sid = await agent.new_session(project)
        opened = await after_opening(agent, sid, 3 if capable else 2)
        result, shown = await prompt(agent, sid, "hi")
        assert result["stopReason"] == "end_turn"
        assert result["_meta"]["refagent"]["failure"] == {"kind": "config", "message": said(shown)}
        await agent.close_stdin()
        assert await agent.wait_exit(10) == 0
    assert opened[0]["sessionUpdate"] == "available_commands_update"
    answer = said(shown)
    assert "The configuration is broken: " in answer  # the first prompt fails with it, of kind "config"
    assert "not valid TOML" in answer
    if capable:
        broken, sandbox = opened[1:]
        assert (broken["severity"], broken["title"]) == ("error", "The configuration is broken")
        assert "config.toml: not valid TOML" in broken["description"]
        assert (sandbox["severity"], sandbox["title"]) == ("warning", "Commands are not fully confined on this machine")
        assert "writes outside the workspace" in sandbox["description"]
        assert said(opened) == ""
    else:
        [message] = opened[1:]  # the sandbox, said; the broken file is the first prompt's to tell
        assert said([message]).startswith("Sandbox: commands are not fully confined on this machine (")
        assert "configuration" not in said([message])
        assert notices(agent, sid) == []
