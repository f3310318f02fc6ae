"""The first exchange, answered before the event loop: reading the first line, the initialize answer,
and what happens when the first line is something else."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import InvalidParams
from refagent.llm.profiles import ModelProfile
from refagent.server.handshake import answer_initialize, read_first_line
from refagent.settings import Settings
from tests.support.acp_schema import validate_agent_message
from tests.support.helpers_process import AgentProcess


def pipe_with(data: bytes, close: bool = True) -> int:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    if close:
        os.close(write_fd)
    return read_fd


def test_first_line_and_the_rest() -> None:
    fd = pipe_with(b'{"a":1}\r\n{"b":2}\n{"c"')
    assert read_first_line(fd) == (b'{"a":1}', b'{"b":2}\n{"c"')
    os.close(fd)


def test_eof_before_a_newline() -> None:
    fd = pipe_with(b'{"partial"')
    assert read_first_line(fd) == (None, b'{"partial"')
    os.close(fd)


def test_a_long_first_line_arrives_whole() -> None:
    big = b'{"x":"' + b"y" * (3 << 20) + b'"}'
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_fd, big + b"\n"), os.close(write_fd)))
    writer.start()
    line, rest = read_first_line(read_fd)
    writer.join()
    assert line == big
    assert rest == b""
    os.close(read_fd)


def test_answer_is_valid_and_honest() -> None:
    keyed = ModelProfile("openai", "OpenAI", model="gpt", api_key_env="OPENAI_API_KEY", images=True)
    with_store = answer_initialize(Settings(profiles=[keyed]), True, {"protocolVersion": 2})
    validate_agent_message({"jsonrpc": "2.0", "id": 0, "result": with_store}, "initialize")
    assert with_store["protocolVersion"] == 1
    assert with_store["agentCapabilities"]["loadSession"] is True
    assert with_store["agentCapabilities"]["promptCapabilities"]["image"] is True
    assert with_store["authMethods"][0]["id"] == "api-key"
    without = answer_initialize(Settings(store=None), False, {"protocolVersion": 1})
    assert without["agentCapabilities"]["loadSession"] is False
    session = without["agentCapabilities"]["sessionCapabilities"]
    assert set(session) == {"close", "additionalDirectories", "systemPrompt"}
    # a client's system prompt, appended or in place of the built-in instructions (unstable)
    assert without["agentCapabilities"]["sessionCapabilities"]["systemPrompt"] == {"mode": {"override": {}}}
    assert without["authMethods"] == []
    with pytest.raises(InvalidParams, match="protocolVersion"):
        answer_initialize(Settings(), True, {})


@pytest.mark.anyio
async def test_a_first_line_that_is_not_initialize_goes_to_the_agent(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        response = await agent.request("initialize", {})  # no protocolVersion: the agent's -32602
        assert response["error"]["code"] == -32602
        result = await agent.initialize()
        assert result["protocolVersion"] == 1
        assert await agent.new_session(tmp_path)


@pytest.mark.anyio
async def test_garbage_first_then_a_normal_session(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.send_raw(b"this is not json\n")
        error = await agent.wait_for(lambda m: "error" in m)
        assert error["error"]["code"] == -32700
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        result = await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert result == {"stopReason": "end_turn"}
