"""MCP servers given in session/new, end to end through the agent: their tools reach the model, calls
show as tool calls, non-read-only ones ask permission, a broken server is reported, and close stops them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect, select
from tests.support.mcp_servers.harness import stdio_entry
from tests.support.procs import alive

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def call(name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"m_{name}", name=name, arguments=json.dumps(args))


async def test_mcp_tools_in_a_session(tmp_path: Path, check: Any) -> None:
    model = ScriptedModel(
        [
            [call("mcp__demo__echo", text="hello")],
            [call("mcp__demo__write_note", path="n.txt", text="hi")],
            text("done"),
        ]
    )
    client = FakeClient(permission=select("reject_once"))
    settings = Settings(make_model=lambda p: model, store=lambda: SessionStore(tmp_path / "store"))
    async with connect(settings, client=client, check=check) as editor:
        init = await editor.initialize()
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": [stdio_entry("demo")]})
        sid = result["sessionId"]
        with anyio.fail_after(30):
            assert await editor.prompt(sid, "use the tools") == {"stopReason": "end_turn"}
        offered = {t.name for t in model.requests[0].tools}
        assert {"mcp__demo__echo", "mcp__demo__write_note", "read_file"} <= offered
        calls = [u for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        assert [c["kind"] for c in calls] == ["read", "other"]
        # the read-only echo ran without asking; write_note asked and was rejected
        assert [r["toolCall"]["toolCallId"] for r in client.permission_requests] == [calls[1]["toolCallId"]]
        results = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
        assert "hello" in results[0]
        assert "declined" in results[1]
        session = editor.agent.sessions[sid]
        pids = [s.pid for s in session.mcp.status() if s.pid]
        assert pids
        await editor.request("session/close", {"sessionId": sid})
        with anyio.fail_after(10):
            while any(alive(pid) for pid in pids):  # noqa: ASYNC110 - another process: nothing to wait on
                await anyio.sleep(0.02)


async def test_a_broken_server_is_reported_and_the_session_works(tmp_path: Path, check: Any) -> None:
    model = ScriptedModel([text("fine")])
    settings = Settings(make_model=lambda p: model, store=None)
    broken = {"name": "ghost", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": [broken]})
        sid = result["sessionId"]
        with anyio.fail_after(30):
            assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}
            await editor.transcript.wait_for(
                lambda s, m: "MCP server ghost" in json.dumps(m.get("params", {}).get("update", {}))
            )
