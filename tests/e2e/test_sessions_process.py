"""Sessions across real ``refagent`` processes, over real pipes, against the scripted OpenAI-compatible
server: a restart replays an identical visible history and the next request carries the earlier
conversation; a ``kill -9`` in the middle of a turn leaves a session that still lists and loads, with the
text that streamed until shortly before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.persistence.recorder import VISIBLE, replay
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-test-key"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("a - b", "a + b")
PLAN = [
    {"content": "Read calc.py", "status": "completed", "priority": "high"},
    {"content": "Fix add", "status": "in_progress", "priority": "high"},
]


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    return agent_env(
        tmp_path / "home",
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY=KEY,
        REFAGENT_MODEL="test-model",
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "refagent" / "sessions"


async def prompt(agent: AgentProcess, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run a prompt, allowing every permission asked; return the result and the updates of the turn."""
    msg_id = await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    shown: list[dict[str, Any]] = []
    while True:
        message = await agent.wait_for(lambda m: True)
        if message.get("method") == "session/update":
            shown.append(message["params"]["update"])
        elif message.get("method") == "session/request_permission":
            option = next(o for o in message["params"]["options"] if o["kind"] == "allow_once")
            await agent.send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option["optionId"]}},
                }
            )
        elif message.get("id") == msg_id and "method" not in message:
            assert "result" in message, message
            return message["result"], shown


async def load(agent: AgentProcess, sid: str, cwd: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``session/load``: its result and the updates before it."""
    msg_id = await agent.send_request("session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []})
    replayed: list[dict[str, Any]] = []
    while True:
        message = await agent.wait_for(lambda m: True)
        if message.get("method") == "session/update":
            assert message["params"]["sessionId"] == sid
            replayed.append(message["params"]["update"])
        elif message.get("id") == msg_id and "method" not in message:
            assert "result" in message, f"{message}\n{agent.stderr()[-3000:]}"
            return message["result"], replayed


def expected_replay(turns: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """What a load must show: each prompt, then what the agent showed for it, folded."""
    out: list[dict[str, Any]] = []
    for text, shown in turns:
        out.append({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
        out += replay([u for u in shown if u["sessionUpdate"] in VISIBLE])
    return out


def without_user_ids(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in u.items() if k != "messageId"} if u["sessionUpdate"] == "user_message_chunk" else u
        for u in updates
    ]


async def test_a_restarted_agent_replays_the_same_history_and_continues(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text(BUGGY)
    script = [
        Turn(
            reasoning="The test fails; read calc.py.",
            text="Let me read the code.",
            tool_calls=[ToolCall("update_plan", {"entries": PLAN}), ToolCall("read_file", {"path": "calc.py"})],
        ),
        Turn(tool_calls=[ToolCall("edit_file", {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"})]),
        Turn(reasoning="Done.", text="Fixed: add subtracted instead of adding."),
        Turn(text="You are welcome."),
        Turn(text="Yes: calc.py now adds."),
    ]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        turns: list[tuple[str, list[dict[str, Any]]]] = []
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            capabilities = (await agent.initialize())["agentCapabilities"]
            assert capabilities["loadSession"] is True
            sid = await agent.new_session(project)
            for text in ("Fix the bug in calc.py.", "Thanks!"):
                result, shown = await prompt(agent, sid, text)
                assert result["stopReason"] == "end_turn"
                turns.append((text, shown))
            await agent.close_stdin()
            assert await agent.wait_exit(10) == 0
        assert (project / "calc.py").read_text() == FIXED
        earlier = [*server.chat_requests[-1].body["messages"][1:], {"role": "assistant", "content": "You are welcome."}]

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            listed = await agent.result("session/list", {})
            assert [(s["sessionId"], s["title"]) for s in listed["sessions"]] == [(sid, "Fix the bug in calc.py.")]
            result, replayed = await load(agent, sid, project)
            assert set(result) == {"modes", "configOptions"}
            assert without_user_ids(replayed) == expected_replay(turns)
            result, _ = await prompt(agent, sid, "Is it fixed?")
            assert result["stopReason"] == "end_turn"
        body = server.chat_requests[-1].body
    kinds = [u["sessionUpdate"] for u in replayed]
    assert {"agent_thought_chunk", "agent_message_chunk", "tool_call", "plan", "user_message_chunk"} <= set(kinds)
    edit = next(u for u in replayed if u["sessionUpdate"] == "tool_call" and u["kind"] == "edit")
    assert edit["status"] == "completed"
    assert {"type": "diff", "path": str(project / "calc.py"), "oldText": BUGGY, "newText": FIXED} in edit["content"]
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1:-1] == earlier
    assert body["messages"][-1] == {"role": "user", "content": "Is it fixed?"}


async def test_a_killed_agent_leaves_a_session_that_loads(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [
        Turn(text="Quick answer."),
        Turn(text=["word "] * 400, chunk_delay=0.05),  # killed while this streams
        Turn(text="Back again."),
        Turn(text="Still here."),
    ]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            await prompt(agent, sid, "first")
            await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "long"}]})
            for _ in range(20):  # 50 ms apart: the first ones have waited past FLUSH_SECONDS by the last
                await agent.wait_for(
                    lambda m: (
                        m.get("method") == "session/update"
                        and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                    )
                )
            agent.process.kill()  # SIGKILL: no cleanup of any kind
            assert await agent.wait_exit(10) != 0
        path = sessions_dir(tmp_path) / f"{sid}.jsonl"
        with path.open("a", encoding="utf-8") as file:
            file.write('{"kind":"update","update":{"sessionUpdate":"agent_message_chu')  # a write cut short

        for answer, next_prompt in (("Back again.", "after the crash"), ("Still here.", "and again")):
            async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
                await agent.initialize()
                listed = await agent.result("session/list", {"cwd": str(project)})
                assert [s["sessionId"] for s in listed["sessions"]] == [sid]
                _, replayed = await load(agent, sid, project)
                texts = [(u["sessionUpdate"], u["content"]["text"]) for u in replayed]
                assert texts[:3] == [
                    ("user_message_chunk", "first"),
                    ("agent_message_chunk", "Quick answer."),
                    ("user_message_chunk", "long"),
                ]
                # what streamed before the kill, as far as it was written (at most FLUSH_SECONDS lost)
                assert texts[3][0] == "agent_message_chunk"
                assert texts[3][1].startswith("word word word word word ")
                assert set(texts[3][1].split()) == {"word"}
                result, shown = await prompt(agent, sid, next_prompt)
                assert result["stopReason"] == "end_turn"
                assert "".join(u["content"]["text"] for u in shown if u["sessionUpdate"] == "agent_message_chunk") == (
                    answer
                )
                await agent.close_stdin()
                assert await agent.wait_exit(10) == 0
        # the records written after the cut line were kept: the second restart replayed the first one's turn
        assert ("user_message_chunk", "after the crash") in texts
        assert ("agent_message_chunk", "Back again.") in texts
        messages = server.chat_requests[-1].body["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["first", "long", "after the crash", "and again"]


async def test_an_agent_killed_during_a_tool_call_leaves_it_in_the_replay(tmp_path: Path, check: Any) -> None:
    """The running call (and what follows it) is held in the record file, not the replay file: after a
    kill -9 the next agent folds it back in, repairs the replay file, and the session goes on."""
    project = tmp_path / "project"
    project.mkdir()
    script = [
        Turn(text="Let me run it.", tool_calls=[ToolCall("run_command", {"command": "sleep 30"})]),
        Turn(text="Back again."),
    ]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
            asked = await agent.wait_for(lambda m: m.get("method") == "session/request_permission")
            call_id = asked["params"]["toolCall"]["toolCallId"]
            agent.process.kill()  # while the call waits for permission
            assert await agent.wait_exit(10) != 0
        replay_file = sessions_dir(tmp_path) / f"{sid}.replay"
        assert call_id.encode() not in replay_file.read_bytes()  # held: only in the record file

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            _, replayed = await load(agent, sid, project)
            kinds = [(u["sessionUpdate"], u.get("toolCallId")) for u in replayed]
            assert kinds == [("user_message_chunk", None), ("agent_message_chunk", None), ("tool_call", call_id)]
            assert replayed[2]["kind"] == "execute"
            assert call_id.encode() in replay_file.read_bytes()  # repaired
            result, _ = await prompt(agent, sid, "again")
            assert result["stopReason"] == "end_turn"
            await agent.close_stdin()
            assert await agent.wait_exit(10) == 0
        # the call that never ran has a result in the next request (an API rejects a call without one)
        messages = server.chat_requests[-1].body["messages"]
        calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        assert len(calls) == 1
        assert "stopped" in results[calls[0]]

        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            _, again = await load(agent, sid, project)
            assert again[:3] == replayed
            assert [u["content"]["text"] for u in again[3:]] == ["again", "Back again."]
