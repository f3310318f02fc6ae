"""A real ``refagent`` process speaking ACP v2 (``REFAGENT_ACP_V2=1``) over its stdio, as the official ACP
test kit's v2 conformance suite drives one (our own tests of what it checks): version negotiation, JSON-RPC
batches, and a resume with replay that says everything before its response. Every message is checked
against the v2 schemas, strictly (a batch's one by one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refagent.server.v2 import ENV
from tests.support.acp_schema_v2 import validate_agent_message_v2
from tests.support.acp_v2_editor import V2_INIT
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def v2_agent(tmp_path: Path) -> Any:
    env = agent_env(tmp_path / "home", **{ENV: "1"})
    return AgentProcess.start(tmp_path, check=validate_agent_message_v2, env=env)


@pytest.mark.parametrize(("asked", "answered"), [(2, 2), (65535, 2), (1, 1)])
async def test_the_version_is_the_one_asked_for_or_the_latest(tmp_path: Path, asked: int, answered: int) -> None:
    """Version 2 is answered in v2 (its ``info`` required); one the agent does not know, with its latest
    (never echoed); version 1, in v1 (a downgrade is never an error)."""
    env = agent_env(tmp_path / "home", **{ENV: "1"})
    async with AgentProcess.start(tmp_path, env=env) as agent:
        result = await agent.result("initialize", {**V2_INIT, "protocolVersion": asked})
    assert result["protocolVersion"] == answered
    if answered == 2:
        assert result["info"]["name"] == "refagent"
        assert result["info"]["version"]
        validate_agent_message_v2({"jsonrpc": "2.0", "id": 0, "result": result}, "initialize")


async def test_batches(tmp_path: Path) -> None:
    async with v2_agent(tmp_path) as agent:
        await agent.result("initialize", V2_INIT)
        await agent.send_raw(b"[]\n")
        empty = await agent.receive_any()
        assert isinstance(empty, dict)  # a single error, not an array
        assert empty["id"] is None
        assert empty["error"]["code"] == -32600

        await agent.send_raw(b'[{"jsonrpc":"2.0","method":"_tck/notify_only"}]\n')
        await agent.send_raw(b"[17,true,null]\n")
        invalid = await agent.receive_any()  # nothing answers the notifications: this is the next line
        assert isinstance(invalid, list)
        assert [(m["id"], m["error"]["code"]) for m in invalid] == [(None, -32600)] * 3

        lists = [{"jsonrpc": "2.0", "id": name, "method": "session/list", "params": {}} for name in ("a", "b")]
        await agent.send_raw(json.dumps(lists).encode() + b"\n")
        for item in lists:  # the transcript learns what they ask, to check what answers them
            agent.transcript.record("client", json.dumps(item).encode())
        answered = await agent.receive_any()
        assert isinstance(answered, list)
        assert {m["id"]: m["result"] for m in answered} == {"a": {"sessions": []}, "b": {"sessions": []}}

        mixed = [
            {"jsonrpc": "2.0", "id": "c", "method": "_nope/missing", "params": {}},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "sess_none"}},
            "not a message",
        ]
        await agent.send_raw(json.dumps(mixed).encode() + b"\n")
        agent.transcript.record("client", json.dumps(mixed[0]).encode())
        replies = await agent.receive_any()
        assert isinstance(replies, list)
        assert [(m["id"], m["error"]["code"]) for m in replies] == [("c", -32601), (None, -32600)]
        assert (await agent.request("session/list", {}))["result"] == {"sessions": []}  # still usable


async def test_a_resume_says_everything_before_its_answer(tmp_path: Path) -> None:
    """The kit's route: resume the session just made on this connection, after one prompt. With replay,
    the history (whole messages) and then the state come before the response; without, only the state;
    nothing of the session between the response and the answer to a request sent after it."""
    project = tmp_path / "project"
    project.mkdir()
    async with v2_agent(tmp_path) as agent:
        await agent.result("initialize", V2_INIT)
        sid = (await agent.result("session/new", {"cwd": str(project)}))["sessionId"]
        accepted = await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        await agent.wait_for(lambda m: _update(m, sid).get("stopReason") is not None)
        for replay in (True, False):
            params: dict[str, Any] = {"sessionId": sid, "cwd": str(project)}
            if replay:
                params["replayFrom"] = {"type": "start"}
            asked = await agent.send_request("session/resume", params)
            before: list[dict[str, Any]] = []
            while "method" in (message := await agent.wait_for(lambda m: True)) or message.get("id") != asked:
                before.append(_update(message, sid))
            assert "result" in message
            later = await agent.send_request("session/list", {})
            between: list[dict[str, Any]] = []
            while "method" in (message := await agent.wait_for(lambda m: True)) or message.get("id") != later:
                between.append(_update(message, sid))
            assert [u for u in between if u] == []
            kinds = [u.get("sessionUpdate") for u in before if u]
            assert kinds[-1] == "state_update"
            history = [u for u in before if u.get("sessionUpdate") in ("user_message", "agent_message")]
            assert not [k for k in kinds if k.endswith("_chunk")]
            if replay:
                assert history[0]["messageId"] == accepted["messageId"]
                assert history[0]["content"] == [{"type": "text", "text": "hi"}]
                assert history[1]["content"]
            else:
                assert history == []


def _update(message: dict[str, Any], session_id: str) -> dict[str, Any]:
    """The update ``message`` carries for the session; ``{}`` if it is none."""
    params = message.get("params") or {}
    if message.get("method") != "session/update" or params.get("sessionId") != session_id:
        return {}
    update: dict[str, Any] = params["update"]
    return update
