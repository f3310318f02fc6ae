"""Start-up (refagent.server.boot): what is answered before the event loop, the hand-over to it, and the
order and promptness of answers whichever phase gives them. The phase is decided by the input alone:
these tests drive it by what they write at once."""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.llm.profiles import ModelProfile
from refagent.server import boot
from refagent.server.handshake import Started
from refagent.server.stdio import FdWriter, LineReader
from refagent.settings import Settings
from refagent.testing.memory import connect
from tests.support.acp_schema import validate_agent_message
from tests.support.helpers_process import AgentProcess


def message(msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def request(msg_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps(message(msg_id, method, params)).encode() + b"\n"


def initialize(msg_id: int = 0) -> bytes:
    return request(msg_id, "initialize", {"protocolVersion": 1})


def new_session(msg_id: int, cwd: Path | str) -> bytes:
    return request(msg_id, "session/new", {"cwd": str(cwd), "mcpServers": []})


def prompt(msg_id: int, session_id: str) -> bytes:
    return request(msg_id, "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]})


class Pipes:
    """The editor's two pipes, seen from the agent's side: what the editor wrote, what the agent answered."""

    def __init__(self, written: bytes, *, close: bool = True) -> None:
        self.read_fd, self.input = os.pipe()
        self.output, self.answer_fd = os.pipe()
        os.write(self.input, written)
        if close:
            os.close(self.input)
        self.reader = LineReader(self.read_fd)
        self.writer = FdWriter(self.answer_fd)

    def answers(self) -> list[dict[str, Any]]:
        os.close(self.answer_fd)
        data = b""
        while chunk := os.read(self.output, 1 << 16):
            data += chunk
        os.close(self.output)
        return [json.loads(line) for line in data.splitlines()]


def test_start_up_answers_what_had_arrived_and_leaves_the_rest(tmp_path: Path) -> None:
    """initialize and the session/new requests written with it are answered before the loop, in order; the
    first request start-up does not answer (a prompt), and all after it, are the agent's."""
    pipes = Pipes(
        initialize(0) + new_session(1, tmp_path) + new_session(2, tmp_path) + prompt(3, "s") + new_session(4, "/")
    )
    started = boot.answer_early(pipes.reader, pipes.writer, Settings(store=None))
    assert started.client == {"protocolVersion": 1}
    assert [opened.params.cwd for opened in started.opened] == [str(tmp_path)] * 2
    assert pipes.reader.next_line(wait=True) == prompt(3, "s").strip()  # left for the agent, as it came
    assert pipes.reader.next_line(wait=True) == new_session(4, "/").strip()
    answers = pipes.answers()
    assert [answer["id"] for answer in answers] == [0, 1, 2]
    validate_agent_message(answers[0], "initialize")
    for answer in answers[1:]:
        validate_agent_message(answer, "session/new")
    assert [answer["result"]["sessionId"] for answer in answers[1:]] == [o.session_id for o in started.opened]


def test_start_up_answers_a_few_and_leaves_a_flood_to_the_loop() -> None:
    """A client that writes many requests at once (and may read none) gets EARLY_ANSWERS from start-up,
    whose plain writes cannot be abandoned as the loop's can; the loop answers the rest."""
    pipes = Pipes(b"".join(initialize(n) for n in range(3 * boot.EARLY_ANSWERS)))
    boot.answer_early(pipes.reader, pipes.writer, Settings(store=None))
    assert pipes.reader.next_line(wait=True) == initialize(boot.EARLY_ANSWERS).strip()
    assert [answer["id"] for answer in pipes.answers()] == list(range(boot.EARLY_ANSWERS))


def test_after_initialize_start_up_waits_for_the_next_line_after_a_session_it_does_not(tmp_path: Path) -> None:
    """The line after an ``initialize`` is waited for (an editor always sends one: Neovim's CodeCompanion
    sends a second initialize, then two session/new, each as it reads an answer), so what an editor sends
    as it reads the answers is answered by the same phase, promptly; after a session/new only what has
    arrived is read: the session needs the loop. (The input stays open here: a wait would never end.)"""
    pipes = Pipes(initialize(0), close=False)
    done: list[Started] = []
    thread = threading.Thread(target=lambda: done.append(boot.answer_early(pipes.reader, pipes.writer, Settings())))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the line after initialize, as long as it takes
    os.write(pipes.input, initialize(1))
    thread.join(0.5)
    assert thread.is_alive()  # and after the second
    os.write(pipes.input, new_session(2, tmp_path))
    thread.join(10)
    assert not thread.is_alive()  # a session opened: on to the loop, without waiting
    assert done[0].client is not None
    assert len(done[0].opened) == 1
    os.write(pipes.input, new_session(3, tmp_path))
    assert pipes.reader.next_line(wait=True) == new_session(3, tmp_path).strip()  # the loop's
    os.close(pipes.input)
    assert [answer["id"] for answer in pipes.answers()] == [0, 1, 2]


@pytest.mark.parametrize(
    "first",
    [b"this is not json\n", request(0, "initialize", {}), new_session(0, "/"), request(0, "session/list", {})],
    ids=["garbage", "invalid-initialize", "session-before-initialize", "another-method"],
)
def test_a_first_line_start_up_does_not_answer_is_the_agents(first: bytes, tmp_path: Path) -> None:
    pipes = Pipes(first + initialize(1))
    started = boot.answer_early(pipes.reader, pipes.writer, Settings(store=None))
    assert started.client is None
    assert pipes.reader.next_line(wait=True) == first.strip()
    assert pipes.answers() == []


class BrokenSupport:
    """A fork's sandbox maker whose support() fails unexpectedly."""

    def __call__(self, cwd: str, additional: list[str], private: Sequence[str] = ()) -> Any:
        raise AssertionError("not made before the loop")

    def support(self) -> None:
        raise RuntimeError("boom")


def test_an_unexpected_failure_leaves_the_request_to_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    pipes = Pipes(initialize(0) + new_session(1, "/"))
    with caplog.at_level(logging.ERROR, logger="refagent"):
        started = boot.answer_early(pipes.reader, pipes.writer, Settings(make_sandbox=BrokenSupport(), store=None))
    assert "session/new could not be answered early" in caplog.text
    assert started.opened == []
    assert pipes.reader.next_line(wait=True) == new_session(1, "/").strip()
    assert [answer["id"] for answer in pipes.answers()] == [0]  # the agent answers the other


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
async def test_the_agent_takes_over_what_start_up_answered(
    tmp_path: Path, check: Any, profiles: list[ModelProfile]
) -> None:
    """The sessions start-up opened are the agent's, as its answers said: the agent's own answer to the
    same request is the same but for the id, and the session is built and serves prompts as any other."""
    settings = Settings(profiles=profiles or Settings().profiles, store=None)
    pipes = Pipes(initialize(0) + new_session(1, tmp_path))
    started = await anyio.to_thread.run_sync(boot.answer_early, pipes.reader, pipes.writer, settings)
    _, early = pipes.answers()
    async with connect(settings, check=check, started=started) as editor:
        assert editor.agent.initialized
        own = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert {**own, "sessionId": early["result"]["sessionId"]} == early["result"]
        session = editor.agent.sessions[early["result"]["sessionId"]]
        assert await session.ready() is not None  # its workspace is built, as any new session's
        if not profiles:  # the scripted model answers (the other has no endpoint)
            text = {"sessionId": session.id, "prompt": [{"type": "text", "text": "hi"}]}
            assert await editor.request("session/prompt", text) == {"stopReason": "end_turn"}
        with anyio.fail_after(10):
            await editor.agent.first_session.wait()


@pytest.mark.anyio
@pytest.mark.parametrize("sent", ["with-initialize", "after-its-answer"])
async def test_session_new_requests_sent_together_are_answered_together_in_order(
    tmp_path: Path, check: Any, sent: str
) -> None:
    """Several session/new in one write (Neovim's CodeCompanion sends two at once, and keeps the session
    answered last): each is answered in the order sent, all before anything else the agent says, written
    with initialize or once its answer is read (start-up waits for the line after an initialize). The
    loop's part: test_on_the_loop_session_new_requests_are_answered_in_the_order_sent."""
    requests = [message(i, "session/new", {"cwd": str(tmp_path), "mcpServers": []}) for i in (1, 2, 3)]
    async with AgentProcess.start(tmp_path, check=check) as agent:
        if sent == "with-initialize":
            await agent.send_together([message(0, "initialize", {"protocolVersion": 1}), *requests])
            assert (await agent.receive() or {}).get("id") == 0
        else:
            await agent.initialize()
            await agent.send_together(requests)
        answers = [await agent.receive() for _ in range(3)]
        assert [answer and answer.get("id") for answer in answers] == [1, 2, 3]
        sessions = [answer["result"]["sessionId"] for answer in answers if answer is not None]
        assert len(set(sessions)) == 3
        for n, session_id in enumerate(reversed(sessions)):
            result = await agent.result(
                "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": f"hi {n}"}]}
            )
            assert result == {"stopReason": "end_turn"}


@pytest.mark.anyio
async def test_on_the_loop_session_new_requests_are_answered_in_the_order_sent(tmp_path: Path, check: Any) -> None:
    """The loop's part of the guarantee, in memory (start-up answers nothing there): requests sent at once
    are answered in the order they came, before any session's announcements."""
    async with connect(Settings(store=None), check=check) as editor:
        await editor.initialize()
        params = {"cwd": str(tmp_path), "mcpServers": []}
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(editor.request, "session/new", params)
        for session in list(editor.agent.sessions.values()):
            await session.ready()  # its announcements are sent
        asked = [m["id"] for m in editor.transcript.sent_by("client") if m.get("method") == "session/new"]
        sent = editor.transcript.sent_by("agent")
    answers = [i for i, m in enumerate(sent) if "sessionId" in (m.get("result") or {})]
    assert [sent[i]["id"] for i in answers] == asked
    assert len({sent[i]["result"]["sessionId"] for i in answers}) == 4
    assert max(answers) < min(i for i, m in enumerate(sent) if m.get("method") == "session/update")


@pytest.mark.anyio
async def test_garbage_first_then_a_normal_session(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.send_raw(b"this is not json\n")
        error = await agent.wait_for(lambda m: "error" in m)
        assert error["error"]["code"] == -32700
        response = await agent.request("initialize", {})  # no protocolVersion: the agent's -32602
        assert response["error"]["code"] == -32602
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        result = await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert result == {"stopReason": "end_turn"}


@pytest.mark.anyio
async def test_an_invalid_session_new_gets_the_agents_error(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        invalid = message(1, "session/new", {"cwd": "relative", "mcpServers": []})
        await agent.send_together([message(0, "initialize", {"protocolVersion": 1}), invalid])
        assert (await agent.receive() or {}).get("id") == 0
        response = await agent.receive()
        assert response is not None
        assert response["error"]["code"] == -32602
        sid = await agent.new_session(tmp_path)  # and it goes on serving
        assert sid.startswith("sess_")


@pytest.mark.anyio
@pytest.mark.parametrize("opened", [True, False], ids=["first-session", "none-in-time"])
async def test_the_garbage_collector_comes_back_after_start_up(monkeypatch: pytest.MonkeyPatch, opened: bool) -> None:
    """serve_stdio turns the collector off for start-up; it is back once the first session is open, or
    after START_SECONDS without one."""

    class Opened:
        first_session = anyio.Event()

    monkeypatch.setattr(boot, "START_SECONDS", 0.05)
    if opened:
        Opened.first_session.set()
    gc.disable()
    try:
        with anyio.fail_after(5):
            await boot._collect_after_start(Opened())  # type: ignore[arg-type]
        assert gc.isenabled()
    finally:
        gc.enable()
