"""Never a silent wedge, through a real agent process: a model that stops mid-stream or says nothing is
reported while it is waited for and the attempt ends within ``[retry] stall_seconds`` (retried when nothing
was shown yet); a tool call that runs long says so in its title; and ``session/cancel`` ends the turn at
once whatever it waits on: a hanging command (whose call shows its output so far), an MCP server that
never answers, an editor that never answers a read of its file (which the call's title names). (An
editor that never answers a permission request: ``tests/e2e/test_ask_process.py``, cancel while a
question is open.) Every message is checked against the schema."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.mcp_servers.harness import stdio_entry

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTICES = {"session": {"notices": {}}}


def config(tmp_path: Path, server: ScriptedOpenAIServer, retry: str = "") -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(
        f'{retry}\n[profiles.stand-in]\nbase_url = "{server.base_url}"\napi_key = ""\nmodel = "m"\n', encoding="utf-8"
    )
    return agent_env(tmp_path / "home", REFAGENT_CONFIG=str(path))


def update_of(message: dict[str, Any], kind: str) -> dict[str, Any] | None:
    if message.get("method") != "session/update":
        return None
    update: dict[str, Any] = message["params"]["update"]
    return update if update["sessionUpdate"] == kind else None


async def prompt(agent: AgentProcess, sid: str, text: str) -> int:
    return await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


async def ask(agent: AgentProcess, sid: str, text: str) -> dict[str, Any]:
    result: dict[str, Any] = await agent.result(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )
    return result


async def test_a_model_that_stops_mid_stream_is_reported_then_cut_off_within_the_stall_limit(
    tmp_path: Path, check: Any
) -> None:
    stalled = Turn(text=["Hel", "lo ", "there"], chunk_delay=60)  # two chunks, then nothing
    with ScriptedOpenAIServer([stalled, Turn(text="again")]) as server:
        env = config(tmp_path, server, "[retry]\nstall_seconds = 1.0\nattempts = 2")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize(NOTICES)
            sid = await agent.new_session(tmp_path)
            started = time.monotonic()
            msg_id = await prompt(agent, sid, "go")
            waiting = await agent.wait_for(lambda m: update_of(m, "notice") is not None)
            response = await agent.wait_for(lambda m: m.get("id") == msg_id)
            took = time.monotonic() - started
            said = agent.transcript.updates(sid)
            assert (
                await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
            )["stopReason"] == "end_turn"  # the session goes on
    notice = waiting["params"]["update"]
    assert notice["title"] == "Waiting for the model"
    assert "still waiting" in notice["description"]
    assert took < 5  # told at 0.25 s, cut off at 1 s of silence: not retried, part of it was shown
    assert response["result"]["stopReason"] == "end_turn"
    failure = response["result"]["_meta"]["refagent"]["failure"]
    assert "was cut off" in failure["message"]
    assert "timed out" in failure["message"]
    assert "Hel" in "".join(u["content"]["text"] for u in said if u["sessionUpdate"] == "agent_message_chunk")


async def test_a_model_silent_before_it_says_anything_is_asked_again(tmp_path: Path, check: Any) -> None:
    role = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    opening = {**role, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    silent = Turn(raw_chunks=[opening, opening, opening], chunk_delay=60)  # the stream opens, then nothing
    with ScriptedOpenAIServer([silent, Turn(text="here now")]) as server:
        env = config(tmp_path, server, "[retry]\nstall_seconds = 1.0\nattempts = 2\nbase_delay = 0.1")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()  # no notices: the client hears of the wait among the thoughts
            sid = await agent.new_session(tmp_path)
            started = time.monotonic()
            assert (
                await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
            )["stopReason"] == "end_turn"
            took = time.monotonic() - started
            updates = agent.transcript.updates(sid)
    thoughts = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_thought_chunk")
    assert "Nothing from the model for" in thoughts
    assert "retrying in" in thoughts  # the timed-out attempt, said as a retry
    assert "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk") == "here now"
    assert took < 5
    assert len(server.chat_requests) == 2


async def test_a_long_command_says_it_runs_and_cancel_ends_the_turn_at_once(tmp_path: Path, check: Any) -> None:
    hang = Turn(tool_calls=[ToolCall("run_command", {"command": "echo compiling; sleep 600"})])
    with ScriptedOpenAIServer([hang, Turn(text="after")]) as server:
        async with AgentProcess.start(tmp_path, check=check, env=config(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(tmp_path)
            await agent.result("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
            msg_id = await prompt(agent, sid, "go")
            alive = await agent.wait_for(
                lambda m: "(running, " in str((update_of(m, "tool_call_update") or {}).get("title", ""))
            )
            started = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
            response = await agent.wait_for(lambda m: m.get("id") == msg_id)
            took = time.monotonic() - started
    update = alive["params"]["update"]
    assert update["title"].startswith("Run `echo compiling; sleep 600` (running, 5 s)")
    assert "compiling" in update["content"][0]["content"]["text"]  # the output so far (a local process)
    assert response["result"]["stopReason"] == "cancelled"
    assert took < 3


async def test_cancel_ends_the_turn_while_an_mcp_server_never_answers(tmp_path: Path, check: Any) -> None:
    call = Turn(tool_calls=[ToolCall("mcp__demo__slow", {"seconds": 600})])
    with ScriptedOpenAIServer([call, Turn(text="after")]) as server:
        async with AgentProcess.start(tmp_path, check=check, env=config(tmp_path, server)) as agent:
            await agent.initialize()
            new = {"cwd": str(tmp_path), "mcpServers": [stdio_entry("demo")]}
            sid = (await agent.result("session/new", new))["sessionId"]
            await agent.result("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
            msg_id = await prompt(agent, sid, "go")
            await agent.wait_for(lambda m: (update_of(m, "tool_call_update") or {}).get("status") == "in_progress")
            started = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
            response = await agent.wait_for(lambda m: m.get("id") == msg_id)
            took = time.monotonic() - started
    assert response["result"]["stopReason"] == "cancelled"
    assert took < 3


async def test_an_editor_that_never_answers_a_read_is_named_in_the_call_and_cancel_ends_the_turn(
    tmp_path: Path, check: Any
) -> None:
    """The client says it reads files, then leaves ``fs/read_text_file`` unanswered: the call's title says
    it is the editor that is waited on (which request, for how long), not the tool; cancel ends the turn."""
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf-8")
    read = Turn(tool_calls=[ToolCall("read_file", {"path": "notes.txt"})])
    with ScriptedOpenAIServer([read, Turn(text="after")]) as server:
        async with AgentProcess.start(tmp_path, check=check, env=config(tmp_path, server)) as agent:
            await agent.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
            sid = await agent.new_session(tmp_path)
            msg_id = await prompt(agent, sid, "go")
            asked = await agent.wait_for(lambda m: m.get("method") == "fs/read_text_file")
            alive = await agent.wait_for(
                lambda m: "(running, " in str((update_of(m, "tool_call_update") or {}).get("title", ""))
            )
            started = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
            response = await agent.wait_for(lambda m: m.get("id") == msg_id)
            took = time.monotonic() - started
    assert asked["params"]["path"] == str(tmp_path / "notes.txt")
    title = alive["params"]["update"]["title"]
    assert title.startswith("Read notes.txt (running, 5 s; waiting on the editor: fs/read_text_file, ")
    assert response["result"]["stopReason"] == "cancelled"
    assert took < 3
