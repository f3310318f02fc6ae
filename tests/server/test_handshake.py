"""The first exchanges, answered before the event loop: reading the first lines, the initialize answer,
the first session/new answer, and what happens when the lines are something else."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent import cli
from refagent.acp.errors import AuthRequired, InvalidParams
from refagent.llm.profiles import ModelProfile
from refagent.server.handshake import answer_initialize, answer_new_session, read_first_line, read_line
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import connect
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


def test_the_next_line_within_a_time() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"b":2}\n{"c"')
    assert read_line(read_fd, b'{"a"', 5.0) == (b'{"a"{"b":2}', b'{"c"')
    assert read_line(read_fd, b'{"c"', 0.05) == (None, b'{"c"')  # nothing more came in time
    os.write(write_fd, b":3}\n")
    assert read_line(read_fd, b'{"c"', 5.0) == (b'{"c":3}', b"")
    os.close(write_fd)
    assert read_line(read_fd, b"", 5.0) == (None, b"")  # EOF
    os.close(read_fd)


def test_a_line_past_the_bound_is_left_to_the_agents_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The early reader stops at MAX_LINE_BYTES (made small here) and hands what it read to the agent's
    reader, which drops the line and answers with an error (tests/sandbox/test_process.py)."""
    from refagent.server import handshake

    monkeypatch.setattr(handshake, "MAX_LINE_BYTES", 100_000)
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_fd, b"x" * 150_000), os.close(write_fd)))
    writer.start()
    line, rest = read_line(read_fd, b"", 5.0)
    writer.join()
    assert line is None
    assert 100_000 < len(rest) <= 150_000
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


THINKING = ModelProfile(
    "thinking",
    "Thinking",
    model="o",
    base_url="http://127.0.0.1:9/v1",
    reasoning_efforts=("low", "medium", "high"),
    default_reasoning_effort="medium",
)


@pytest.mark.anyio
@pytest.mark.parametrize("profiles", [[], [THINKING]], ids=["scripted", "with-efforts"])
async def test_the_early_session_new_answer_is_the_agents_own(
    tmp_path: Path, check: Any, profiles: list[ModelProfile]
) -> None:
    # Answered before the loop by the CLI (refagent.cli._open_early), a first session/new must say what the
    # agent says to the same request, and the session it hands the agent must be that session.
    settings = Settings(profiles=profiles or Settings().profiles, store=None)
    params = {"cwd": str(tmp_path), "mcpServers": []}
    answer = await anyio.to_thread.run_sync(answer_new_session, settings, params)
    assert answer is not None
    early, opened = answer
    validate_agent_message({"jsonrpc": "2.0", "id": 1, "result": early}, "session/new")
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        own = await editor.request("session/new", params)
        assert {**own, "sessionId": early["sessionId"]} == early
        assert own["sessionId"] != early["sessionId"]

        after = editor.agent.adopt_session(opened)
        session = editor.agent.sessions[early["sessionId"]]
        assert editor.agent.manager()._state(session, with_id=True) == early
        await after()
        assert await session.ready() is not None  # its workspace is built, as any new session's
        assert editor.agent.first_session.is_set()


def test_what_the_agent_refuses_is_left_to_it() -> None:
    # The CLI leaves the request to the agent, which answers it with the error (and keeps serving).
    with pytest.raises(InvalidParams):
        answer_new_session(Settings(store=None), {"cwd": "relative", "mcpServers": []})
    with pytest.raises(InvalidParams):
        answer_new_session(Settings(store=None), {"cwd": "/"})  # mcpServers is required
    keyless = ModelProfile("remote", "Remote", model="m", base_url="https://example.invalid/v1", api_key_env="K")
    with pytest.raises(AuthRequired):
        answer_new_session(Settings(profiles=[keyless], store=None), {"cwd": "/", "mcpServers": []})


def test_a_sandbox_that_says_nothing_before_it_is_made_leaves_it_to_the_agent() -> None:
    own = OwnSandboxes(lambda cwd, additional: pytest.fail("not made before the loop"))
    assert answer_new_session(Settings(make_sandbox=own, store=None), {"cwd": "/", "mcpServers": []}) is None


@pytest.mark.anyio
async def test_a_session_new_after_the_wait_is_the_agents(tmp_path: Path, check: Any) -> None:
    # Past NEXT_SECONDS the event loop has started: the agent answers, and the session works the same.
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.initialize()
        await anyio.sleep(cli.NEXT_SECONDS + 0.3)
        sid = await agent.new_session(tmp_path)
        result = await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert result == {"stopReason": "end_turn"}


@pytest.mark.anyio
async def test_an_invalid_first_session_new_gets_the_agents_error(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.initialize()
        response = await agent.request("session/new", {"cwd": "relative", "mcpServers": []})
        assert response["error"]["code"] == -32602
        sid = await agent.new_session(tmp_path)  # and it goes on serving
        assert sid.startswith("sess_")


@pytest.mark.anyio
async def test_requests_sent_with_the_first_two_are_answered_in_order(tmp_path: Path, check: Any) -> None:
    # An editor that writes initialize and session/new at once, then a prompt: the first two are answered
    # before the loop, the prompt by the agent once the session is made, after its announcements.
    async with AgentProcess.start(tmp_path, check=check) as agent:
        messages = [
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
        ]
        for message in messages:
            await agent.send(message)
        first = await agent.wait_for(lambda m: m.get("id") == 0)
        assert first["result"]["protocolVersion"] == 1
        created = await agent.wait_for(lambda m: m.get("id") == 1)
        sid = created["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        await agent.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt})
        seen: list[dict[str, Any]] = []
        while not seen or seen[-1].get("id") != 2:
            message = await agent.receive()
            assert message is not None
            seen.append(message)
        assert seen[-1]["result"] == {"stopReason": "end_turn"}
        kinds = [m["params"]["update"]["sessionUpdate"] for m in seen if m.get("method") == "session/update"]
        assert kinds[0] == "available_commands_update"
        assert "agent_message_chunk" in kinds


class BrokenSupport:
    """A fork's sandbox maker whose support() fails unexpectedly."""

    def __call__(self, cwd: str, additional: list[str], private: Sequence[str] = ()) -> Any:
        raise AssertionError("not made before the loop")

    def support(self) -> None:
        raise RuntimeError("boom")


def test_an_unexpected_failure_leaves_the_first_session_new_to_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    read_fd, write_fd = os.pipe()
    line = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}'
    settings = Settings(make_sandbox=BrokenSupport(), store=None)
    with caplog.at_level(logging.ERROR, logger="refagent"):
        assert cli._open_early(line, write_fd, settings) is None
    assert "session/new could not be answered early" in caplog.text
    os.close(write_fd)
    assert os.read(read_fd, 100) == b""  # nothing written: the agent answers it
    os.close(read_fd)
