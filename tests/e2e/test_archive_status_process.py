"""The unstable v1 session and sign-in queries over real pipes, through real ``refagent`` processes against the
scripted OpenAI-compatible server: ``session/archive`` and ``session/unarchive`` (an archived session is out
of ``session/list`` unless the request asks for it, and stays so across a restart), ``session/status``
(``open`` with what the session is doing, ``saved``, or ``-32002``) and ``auth/status`` (whether a model is
set up). Every message the agents send is validated against the unstable schema as well as the stable one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.acp_schema import validate_agent_message_unstable
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import env_for, prompt

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def listed(result: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(s["sessionId"], s["archived"]) for s in result["sessions"]]


def status(agent: AgentProcess, sid: str) -> Any:
    return agent.request("session/status", {"sessionId": sid})


async def test_archive_hides_a_session_from_the_list_until_unarchived_across_restarts(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    check = validate_agent_message_unstable
    with ScriptedOpenAIServer(fallback=Turn(text="ok"), api_key="sk-test-key") as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            capabilities = (await agent.initialize())["agentCapabilities"]
            assert capabilities["sessionCapabilities"]["archive"] == {}
            assert capabilities["sessionCapabilities"]["status"] == {}
            first = await agent.new_session(project)
            await prompt(agent, first, "first")
            second = await agent.new_session(project)
            await prompt(agent, second, "second")
            everyone = await agent.result("session/list", {})
            assert sorted(listed(everyone)) == sorted([(first, False), (second, False)])

            # archiving an open session closes it: it is then saved, not open, and out of the default list
            assert (await status(agent, first))["result"]["status"] == "open"
            assert await agent.result("session/archive", {"sessionId": first}) == {}
            assert await agent.result("session/archive", {"sessionId": first}) == {}  # again: still archived
            assert (await status(agent, first))["result"] == {"status": "saved"}
            gone = await agent.request(
                "session/prompt", {"sessionId": first, "prompt": [{"type": "text", "text": "x"}]}
            )
            assert gone["error"]["code"] == -32002
            assert listed(await agent.result("session/list", {})) == [(second, False)]
            assert listed(await agent.result("session/list", {"archived": None})) == [(second, False)]
            assert listed(await agent.result("session/list", {"archived": "only"})) == [(first, True)]
            both = await agent.result("session/list", {"archived": "include", "cwd": str(project)})
            assert sorted(listed(both)) == sorted([(first, True), (second, False)])
            unknown_filter = await agent.request("session/list", {"archived": "_mine"})
            assert unknown_filter["error"]["code"] == -32602
            missing = await agent.request("session/archive", {"sessionId": "sess_nope"})
            assert missing["error"]["code"] == -32002

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:  # the mark was saved
            await agent.initialize()
            assert listed(await agent.result("session/list", {})) == [(second, False)]
            assert (await status(agent, first))["result"] == {"status": "saved"}
            assert await agent.result("session/unarchive", {"sessionId": first}) == {}
            assert await agent.result("session/unarchive", {"sessionId": first}) == {}  # again: still listed
            assert sorted(listed(await agent.result("session/list", {}))) == sorted([(first, False), (second, False)])
            unknown = await status(agent, "sess_nope")
            assert unknown["error"]["code"] == -32002
            assert unknown["error"]["data"] == {"sessionId": "sess_nope"}
            missing = await agent.request("session/unarchive", {"sessionId": "sess_nope"})
            assert missing["error"]["code"] == -32002


async def test_status_says_a_turn_waits_on_the_user_and_auth_status_that_a_model_is_set_up(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [Turn(tool_calls=[ToolCall("write_file", {"path": "a.py", "content": "x = 1\n"})]), Turn(text="Done.")]
    with ScriptedOpenAIServer(script, api_key="sk-test-key") as server:
        async with AgentProcess.start(
            tmp_path, check=validate_agent_message_unstable, env=env_for(tmp_path, server)
        ) as agent:
            result = await agent.initialize()
            assert result["agentCapabilities"]["auth"]["status"] == {}
            signed_in = await agent.result("auth/status", {})
            assert signed_in["state"] == "authenticated"
            assert [a["active"] for a in signed_in["accounts"]] == [True]
            assert "sk-test-key" not in str(signed_in)  # a key is never shown
            sid = await agent.new_session(project)
            assert (await status(agent, sid))["result"] == {"status": "open", "_meta": {"refagent": {"turn": "idle"}}}
            params = {"sessionId": sid, "prompt": [{"type": "text", "text": "Write a.py"}]}
            prompt_id = await agent.send_request("session/prompt", params)
            asked = await agent.wait_for(lambda m: m.get("method") == "session/request_permission")
            waiting = (await status(agent, sid))["result"]
            option = next(o for o in asked["params"]["options"] if o["kind"] == "allow_once")
            answer = {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
            await agent.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            await agent.wait_for(lambda m: m.get("id") == prompt_id and "method" not in m)
            idle = (await status(agent, sid))["result"]
    assert waiting == {"status": "open", "_meta": {"refagent": {"turn": "waiting"}}}
    assert idle == {"status": "open", "_meta": {"refagent": {"turn": "idle"}}}


async def test_auth_status_without_a_model_set_up(tmp_path: Path) -> None:
    """No model in the environment, and a config file that could hold one: the user must sign in (and is never
    refused with -32000 for asking)."""
    async with AgentProcess.start(
        tmp_path, check=validate_agent_message_unstable, env=env_for(tmp_path, None)
    ) as agent:
        await agent.initialize()
        assert await agent.result("auth/status", {}) == {"state": "unauthenticated"}
