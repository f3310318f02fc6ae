"""End to end: a real ``refagent`` process, configured through its environment, talking to the scripted
OpenAI-compatible server on 127.0.0.1 through the real ``openai`` client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-test-key"


def env_for(tmp_path: Path, server: ScriptedOpenAIServer, **extra: str) -> dict[str, str]:
    return agent_env(
        tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="test-model", **extra
    )


async def prompt(agent: AgentProcess, sid: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = await agent.result(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )
    return result


async def test_conversation_streams_and_carries_history(tmp_path: Path, check: Any) -> None:
    turns = [
        Turn(text="Hello there, friend.", reasoning="The user greets me.", usage=(120, 8)),
        Turn(text="You said hello.", reasoning_field="reasoning", reasoning="Recall.", usage=(150, 5)),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            init = await agent.initialize()
            assert init["authMethods"][0]["id"] == "api-key"
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "hi"))["stopReason"] == "end_turn"
            second_answer = await prompt(agent, sid, "what did I say?")
            updates = agent.transcript.updates(sid)
        bodies = [r.body for r in server.chat_requests]
    assert agent.text(sid) == "Hello there, friend.You said hello."
    thoughts = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_thought_chunk")
    assert thoughts == "The user greets me.Recall."
    chunks = [u for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) > 2  # streamed, not buffered
    assert len({c["messageId"] for c in chunks}) == 2  # one id per message
    usage = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert [u["used"] for u in usage] == [128, 155]
    assert second_answer == {  # the turn's own tokens (ACP's unstable `usage`)
        "stopReason": "end_turn",
        "usage": {
            "totalTokens": 155,
            "inputTokens": 150,
            "outputTokens": 5,
            "thoughtTokens": 0,
            "cachedReadTokens": 0,
            "cachedWriteTokens": 0,
        },
    }
    assert bodies[0]["model"] == "test-model"
    assert bodies[0]["stream"] is True
    assert bodies[0]["messages"][0]["role"] == "system"
    assert {t["function"]["name"] for t in bodies[0]["tools"]} >= {"read_file", "edit_file", "run_command"}
    second = [(m["role"], m.get("content")) for m in bodies[1]["messages"][1:]]
    assert second == [
        ("user", "hi"),
        ("assistant", "Hello there, friend."),
        ("user", "what did I say?"),
    ]


async def test_tool_call_round_trip(tmp_path: Path, check: Any) -> None:
    (tmp_path / "notes.txt").write_text("remember the milk\n")
    turns = [
        Turn(tool_calls=[ToolCall("read_file", {"path": "notes.txt"})], repeat_name=True),
        Turn(text="It says to remember the milk."),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "read my notes"))["stopReason"] == "end_turn"
            kinds = [u["sessionUpdate"] for u in agent.transcript.updates(sid)]
        messages = server.chat_requests[1].body["messages"]
    assert "tool_call" in kinds
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert messages[-1]["role"] == "tool"
    assert "remember the milk" in messages[-1]["content"]


@pytest.mark.parametrize(
    ("turn", "stop"),
    [
        (Turn(text="cut", finish_reason="length"), "max_tokens"),
        (Turn(refusal="I can't help with that."), "refusal"),
        (Turn(text="filtered", finish_reason="content_filter"), "refusal"),
    ],
)
async def test_stop_reasons(tmp_path: Path, turn: Turn, stop: str, check: Any) -> None:
    with ScriptedOpenAIServer([turn], api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "go"))["stopReason"] == stop


async def test_max_turn_requests(tmp_path: Path, check: Any) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    loop = Turn(tool_calls=[ToolCall("read_file", {"path": "a.txt"})])
    with ScriptedOpenAIServer(fallback=loop, api_key=KEY) as server:
        env = env_for(tmp_path, server, REFAGENT_MAX_REQUESTS="3")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "go"))["stopReason"] == "max_turn_requests"
        assert len(server.chat_requests) == 3


async def test_transient_failures_are_retried_visibly(tmp_path: Path, check: Any) -> None:
    turns = [Turn(fault=Fault.status(429, retry_after=0)), Turn(fault=Fault.status(503)), Turn(text="finally")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = env_for(tmp_path, server, REFAGENT_CONFIG=str(_config(tmp_path, "[retry]\nbase_delay = 0.01\n")))
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "go"))["stopReason"] == "end_turn"
            thoughts = [
                u["content"]["text"]
                for u in agent.transcript.updates(sid)
                if u["sessionUpdate"] == "agent_thought_chunk"
            ]
    assert agent.text(sid) == "finally"
    assert len(thoughts) == 2
    assert all("retrying" in t for t in thoughts)


async def test_persistent_failure_ends_the_turn_and_the_session_goes_on(tmp_path: Path, check: Any) -> None:
    failing = [Turn(fault=Fault.status(500, message="the model is on fire"))] * 2
    with ScriptedOpenAIServer([*failing, Turn(text="back again")], api_key=KEY) as server:
        config = _config(tmp_path, "[retry]\nattempts = 2\nbase_delay = 0.01\n")
        async with AgentProcess.start(
            tmp_path, check=check, env=env_for(tmp_path, server, REFAGENT_CONFIG=str(config))
        ) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            response = await prompt(agent, sid, "go")
            assert response["stopReason"] == "end_turn"
            assert response["_meta"]["refagent"]["failure"]["kind"] == "model"  # a failure, marked as such
            assert "the model is on fire" in agent.text(sid)
            assert (await prompt(agent, sid, "again"))["stopReason"] == "end_turn"
            assert agent.text(sid).endswith("back again")


async def test_invalid_key_is_a_clear_error(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer([Turn(text="never")], api_key="the-right-key") as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            response = await prompt(agent, sid, "go")
            assert response["stopReason"] == "end_turn"
            assert response["_meta"]["refagent"]["failure"]["kind"] == "auth"
            assert "rejected the key from OPENAI_API_KEY" in agent.text(sid)


async def test_missing_key_means_auth_required(tmp_path: Path, check: Any) -> None:
    env = agent_env(tmp_path / "home", OPENAI_BASE_URL="https://models.example.com/v1", REFAGENT_MODEL="m")
    async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
        init = await agent.initialize()
        assert init["authMethods"][0]["id"] == "api-key"
        response = await agent.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert response["error"]["code"] == -32000
        assert "OPENAI_API_KEY" in response["error"]["message"]
        response = await agent.request("authenticate", {"methodId": "api-key"})
        assert response["error"]["code"] == -32000


async def test_local_endpoint_needs_no_key(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer([Turn(text="local model here")]) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, REFAGENT_MODEL="llama")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "hi"))["stopReason"] == "end_turn"
            assert agent.text(sid) == "local model here"


async def test_cancel_aborts_a_slow_stream_at_once(tmp_path: Path, check: Any) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.5)
    with ScriptedOpenAIServer([slow, Turn(text="next")], api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            msg_id = await agent.send_request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
            )
            await agent.wait_for(
                lambda m: (
                    m.get("method") == "session/update"
                    and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                )
            )
            started = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
            response = await agent.wait_for(lambda m: m.get("id") == msg_id)
            assert time.monotonic() - started < 0.5
            assert response["result"]["stopReason"] == "cancelled"
            assert server.wait_for_disconnect(2)
            assert (await prompt(agent, sid, "again"))["stopReason"] == "end_turn"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path
