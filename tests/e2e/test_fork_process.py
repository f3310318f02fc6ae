"""``session/fork`` (unstable) in a real ``refagent`` process, over real pipes, against the scripted server:
advertised with a store; the response validates against the unstable schema (the transcript's check);
the model sees the source's earlier conversation in the fork's first request; the source and the fork go
on independently; after a restart ``session/load`` of each shows its own history; a fork of an unknown
session is ``-32002``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.acp_schema import unstable_feature
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import KEY, after_opening, env_for, load, prompt, thread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def turn(text: str, answer: str) -> list[tuple[str, str]]:
    return [("user_message_chunk", text), ("agent_message_chunk", answer)]


def conversation(body: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


async def test_fork_then_load_both_after_a_restart(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [
        Turn(text="one"),
        Turn(text="two"),
        Turn(text="forked three"),
        Turn(text="source three"),
    ]
    with ScriptedOpenAIServer(script, fallback=Turn(text="later"), api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            capabilities = (await agent.initialize())["agentCapabilities"]
            assert capabilities["sessionCapabilities"]["fork"] == {}
            source = await agent.new_session(project)
            await prompt(agent, source, "first")
            await prompt(agent, source, "second")
            response = await agent.request("session/fork", {"sessionId": source, "cwd": str(project)})
            assert "result" in response, response
            forked = response["result"]["sessionId"]
            opened = await after_opening(agent, forked, 2)
            await prompt(agent, forked, "third, in the fork")
            await prompt(agent, source, "third, in the source")
            missing = await agent.request(
                "session/fork", {"sessionId": "sess_00000000000000000000000000000000", "cwd": str(project)}
            )
            await agent.close_stdin()
            assert await agent.wait_exit(10) == 0
        bodies = [r.body for r in server.chat_requests]

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:  # a restart
            await agent.initialize()
            listed = await agent.result("session/list", {"cwd": str(project)})
            _, replayed_source = await load(agent, source, project)
            _, replayed_fork = await load(agent, forked, project)
            await prompt(agent, forked, "fourth, in the fork")
            after_restart = server.chat_requests[-1].body

    assert forked != source
    assert set(response["result"]) == {"sessionId", "modes", "configOptions"}
    assert unstable_feature(response, "session/fork") == "the response to 'session/fork'"  # validated as such
    assert [u["sessionUpdate"] for u in opened] == ["available_commands_update", "session_info_update"]
    assert opened[1]["title"] == "first (fork)"
    assert missing["error"]["code"] == -32002

    earlier = [("user", "first"), ("assistant", "one"), ("user", "second"), ("assistant", "two")]
    assert conversation(bodies[2]) == [*earlier, ("user", "third, in the fork")]  # the fork's first request
    assert conversation(bodies[3]) == [*earlier, ("user", "third, in the source")]  # the source knows no fork

    assert {s["sessionId"]: s.get("title") for s in listed["sessions"]} == {source: "first", forked: "first (fork)"}
    history = [*turn("first", "one"), *turn("second", "two")]
    assert thread(replayed_source) == [*history, *turn("third, in the source", "source three")]
    assert thread(replayed_fork) == [*history, *turn("third, in the fork", "forked three")]
    assert conversation(after_restart) == [
        *earlier,
        ("user", "third, in the fork"),
        ("assistant", "forked three"),
        ("user", "fourth, in the fork"),
    ]
