"""The agent's ACP methods, driven through the in-memory editor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ReasoningDelta, TextDelta
from refagent.llm.scripted import Hang, ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import connect

pytestmark = pytest.mark.anyio


def scripted(*responses: Any) -> Settings:
    model = ScriptedModel(list(responses))
    return Settings(make_model=lambda profile: model)


async def test_initialize_negotiates_version_and_advertises(check: Any) -> None:
    async with connect(check=check) as editor:
        result = await editor.request("initialize", {"protocolVersion": 7})
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == "refagent"
    assert result["agentCapabilities"]["promptCapabilities"]["embeddedContext"] is True
    assert result["authMethods"] == []


async def test_prompt_streams_chunks_with_one_message_id(tmp_path: Path, check: Any) -> None:
    async with connect(scripted([ReasoningDelta("hmm"), *text("hello there world")]), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        result = await editor.prompt(sid, "hi")
        assert result == {"stopReason": "end_turn"}
        chunks = [u for u in editor.updates(sid) if u["sessionUpdate"] == "agent_message_chunk"]
        assert "".join(c["content"]["text"] for c in chunks) == "hello there world"
        assert len({c["messageId"] for c in chunks}) == 1
        assert editor.text(sid, "agent_thought_chunk") == "hmm"
        # every update precedes the response
        agent_messages = editor.transcript.sent_by("agent")
        last_update = max(i for i, m in enumerate(agent_messages) if m.get("method") == "session/update")
        response = next(i for i, m in enumerate(agent_messages) if m.get("result") == result)
        assert last_update < response


async def test_cancel_answers_cancelled(tmp_path: Path, check: Any) -> None:
    async with connect(scripted([TextDelta("partial"), Hang()], text("after")), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        results: list[dict[str, Any]] = []

        async def run() -> None:
            results.append(await editor.prompt(sid, "go"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await editor.transcript.wait_for_update("agent_message_chunk")
            await editor.cancel(sid)
        assert results == [{"stopReason": "cancelled"}]
        # the session keeps working, and the history kept the partial answer
        assert await editor.prompt(sid, "again") == {"stopReason": "end_turn"}
        history = editor.agent.sessions[sid].history
        assert history[1] == {"role": "assistant", "content": "partial"}


async def test_errors_have_schema_codes(check: Any) -> None:
    async with connect(check=check) as editor:
        await editor.initialize()
        with pytest.raises(RequestError) as info:
            await editor.request("session/new", {"cwd": "relative", "mcpServers": []})
        assert info.value.code == -32602
        with pytest.raises(RequestError) as info:
            await editor.request("session/new", {"mcpServers": []})
        assert info.value.code == -32602
        assert "'cwd'" in info.value.message
        with pytest.raises(RequestError) as info:
            await editor.request("session/prompt", {"sessionId": "nope", "prompt": []})
        assert info.value.code == -32002
        with pytest.raises(RequestError) as info:
            await editor.request("no/such", {})
        assert info.value.code == -32601


async def test_set_mode_and_config_option_stay_in_sync(tmp_path: Path, check: Any) -> None:
    async with connect(check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = result["sessionId"]
        assert result["modes"]["currentModeId"] == "ask"
        mode_option = next(o for o in result["configOptions"] if o["category"] == "mode")
        assert {o["value"] for o in mode_option["options"]} == {m["id"] for m in result["modes"]["availableModes"]}

        assert await editor.request("session/set_mode", {"sessionId": sid, "modeId": "read-only"}) == {}
        assert editor.updates(sid)[-2:] == [
            {"sessionUpdate": "current_mode_update", "currentModeId": "read-only"},
            {"sessionUpdate": "config_option_update", "configOptions": editor.updates(sid)[-1]["configOptions"]},
        ]
        options = await editor.request(
            "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "full-access"}
        )
        assert next(o for o in options["configOptions"] if o["id"] == "mode")["currentValue"] == "full-access"
        assert editor.updates(sid)[-1] == {"sessionUpdate": "current_mode_update", "currentModeId": "full-access"}

        for bad in (
            ("session/set_mode", {"sessionId": sid, "modeId": "yolo"}),
            ("session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "yolo"}),
            ("session/set_config_option", {"sessionId": sid, "configId": "colour", "value": "red"}),
            ("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "nope"}),
            ("session/set_config_option", {"sessionId": sid, "configId": "mode"}),
        ):
            with pytest.raises(RequestError) as info:
                await editor.request(*bad)
            assert info.value.code == -32602


async def test_updates_about_a_new_session_follow_its_response(tmp_path: Path, check: Any) -> None:
    async with connect(check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        sent = editor.transcript.sent_by("agent")
        response = next(i for i, m in enumerate(sent) if m.get("result", {}).get("sessionId") == sid)
        assert all(i > response for i, m in enumerate(sent) if m.get("params", {}).get("sessionId") == sid)


async def test_a_second_prompt_waits_for_the_first(tmp_path: Path, check: Any) -> None:
    model = ScriptedModel([[TextDelta("first"), Hang()], text("second")])
    async with connect(Settings(make_model=lambda p: model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        results: list[dict[str, Any]] = []

        async def prompt(words: str) -> None:
            results.append(await editor.prompt(sid, words))

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt, "one")
            await editor.transcript.wait_for_update("agent_message_chunk")
            tg.start_soon(prompt, "two")
            await anyio.wait_all_tasks_blocked()
            assert len(model.requests) == 1  # the second waits behind the first
            await editor.cancel(sid)
        # cancel ends the running turn and the one queued behind it
        assert results == [{"stopReason": "cancelled"}, {"stopReason": "cancelled"}]
        assert await editor.prompt(sid, "three") == {"stopReason": "end_turn"}
