"""The agent's ACP methods, driven through the in-memory editor."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.agent import Settings
from refagent.llm.protocol import ReasoningDelta, TextDelta
from refagent.testing.memory import connect
from refagent.testing.scripted_model import Hang, ScriptedModel, text

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


async def test_prompt_streams_chunks_with_one_message_id(check: Any) -> None:
    async with connect(scripted([ReasoningDelta("hmm"), *text("hello there world")]), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/tmp")
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


async def test_cancel_answers_cancelled(check: Any) -> None:
    async with connect(scripted([TextDelta("partial"), Hang()], text("after")), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/tmp")
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
