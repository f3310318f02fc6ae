"""The real ``refagent`` process over real pipes: protocol, framing, shutdown, and the stdout guard."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.helpers_process import ROOT, AgentProcess, agent_command, agent_env

pytestmark = pytest.mark.anyio

EXIT_WITHIN = 1.0  # seconds from EOF or SIGTERM to exit


def is_response(msg_id: int) -> Any:
    return lambda m: m.get("id") == msg_id and "method" not in m


async def test_initialize_new_prompt_over_pipes(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        result = await agent.initialize({"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False})
        assert result["protocolVersion"] == 1
        assert result["agentInfo"]["name"] == "refagent"
        session_id = await agent.new_session(tmp_path)
        result = await agent.result(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hello over pipes"}]}
        )
        assert result == {"stopReason": "end_turn"}
        assert "hello over pipes" in agent.text(session_id)
        await agent.close_stdin()
        await agent.read_to_eof()  # anything else it writes must be valid too
        assert await agent.wait_exit(EXIT_WITHIN) == 0
    # every message the agent sent was checked against the schema (responses by the method they answer)
    sent = agent.agent_messages()
    assert sum("result" in m for m in sent) == 3
    assert any(m.get("method") == "session/update" for m in sent)


async def test_errors_over_pipes(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.send_raw(b"this is not json\n")
        response = await agent.receive()
        assert response is not None
        assert (response["id"], response["error"]["code"]) == (None, -32700)
        await agent.send_raw(b'{"jsonrpc":"2.0","method":"session/cancel","params":[]}\n')  # never answered
        response = await agent.request("no/such/method", {})
        assert response["error"]["code"] == -32601
        response = await agent.request("session/new", {"cwd": "relative/path", "mcpServers": []})
        assert response["error"]["code"] == -32602


@pytest.mark.slow
async def test_a_10_mb_line_through_the_real_stdio_reader(tmp_path: Path, check: Any) -> None:
    head = "The start of a very long prompt. "
    text = head + "0123456789abcdef" * (10 * 1024 * 1024 // 16)
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.initialize()
        session_id = await agent.new_session(tmp_path)
        msg_id = await agent.send_request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )
        response = await agent.wait_for(is_response(msg_id))
        assert response["result"] == {"stopReason": "end_turn"}
        reply = agent.text(session_id)
        # the offline model quotes the first 200 characters: the line arrived whole and in order
        assert repr(text[:200]) in reply
        assert text[:201] not in reply
        # and the connection still works after it
        assert (await agent.initialize())["protocolVersion"] == 1


async def test_eof_on_stdin_exits_0_quickly(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.initialize()
        started = time.monotonic()
        await agent.close_stdin()
        assert await agent.wait_exit(EXIT_WITHIN) == 0
        assert time.monotonic() - started < EXIT_WITHIN
        assert await agent.read_to_eof() == []


async def _turn_waiting_on_the_editor(agent: AgentProcess, tmp_path: Path) -> None:
    """Start a prompt whose turn waits for our answer to ``fs/read_text_file`` (we never answer)."""
    await agent.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    session_id = await agent.new_session(tmp_path)
    link = {"type": "resource_link", "uri": f"file://{tmp_path}/notes.txt", "name": "notes.txt"}
    await agent.send_request("session/prompt", {"sessionId": session_id, "prompt": [link]})
    request = await agent.wait_for(lambda m: m.get("method") == "fs/read_text_file")
    assert request["params"]["path"] == f"{tmp_path}/notes.txt"


async def test_eof_during_a_turn_exits_0_quickly(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await _turn_waiting_on_the_editor(agent, tmp_path)
        await agent.close_stdin()
        assert await agent.wait_exit(EXIT_WITHIN) == 0
        await agent.read_to_eof()
    assert "Traceback" not in agent.stderr()


async def test_sigterm_exits_0_quickly(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await agent.initialize()
        agent.process.send_signal(signal.SIGTERM)
        assert await agent.wait_exit(EXIT_WITHIN) == 0


async def test_sigterm_during_a_turn_exits_0_quickly(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, check=check) as agent:
        await _turn_waiting_on_the_editor(agent, tmp_path)
        agent.process.send_signal(signal.SIGTERM)
        assert await agent.wait_exit(EXIT_WITHIN) == 0
    assert "Traceback" not in agent.stderr()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "eof"])
def test_exits_even_when_the_client_stops_reading_stdout(tmp_path: Path, how: str) -> None:
    """A client that stopped reading fills the stdout pipe; shutdown must not wait on the blocked write."""
    read_end, write_end = os.pipe()
    capacity = fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ)
    process = subprocess.Popen(
        agent_command(), stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.DEVNULL, env=agent_env(tmp_path)
    )
    os.close(write_end)
    try:
        assert process.stdin is not None
        line = b'{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":1}}\n'
        process.stdin.write(line % 0)
        process.stdin.flush()
        with os.fdopen(os.dup(read_end), "rb", buffering=0) as reader:
            first = b""
            while not first.endswith(b"\n"):  # the signal handler is installed once it answers
                first += reader.read(1)
        assert json.loads(first)["id"] == 0
        process.stdin.write(b"".join(line % n for n in range(1, 3 * capacity // 300)))
        process.stdin.flush()
        # wait until the agent has filled the pipe: from here on its writer is blocked. (Full is not always
        # every byte of the capacity: the kernel counts pages, and a write that does not fit the last one's
        # rest takes a new one.) Nothing more coming for a while, past half of it, is full.
        deadline = time.monotonic() + 10
        last, since = -1, time.monotonic()
        while (now := _bytes_in_pipe(read_end)) != last or now < capacity // 2 or time.monotonic() - since < 0.3:
            assert time.monotonic() < deadline, f"the agent never filled its stdout ({now} bytes of {capacity})"
            if now != last:
                last, since = now, time.monotonic()
            time.sleep(0.005)
        started = time.monotonic()
        if how == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            process.stdin.close()
        assert process.wait(timeout=EXIT_WITHIN + 1) == 0
        assert time.monotonic() - started < EXIT_WITHIN
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(read_end)


def _bytes_in_pipe(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


async def test_stdout_is_only_json_lines_with_debug_logs(tmp_path: Path, check: Any) -> None:
    async with AgentProcess.start(tmp_path, "--log-level", "debug", check=check) as agent:
        await agent.initialize()
        session_id = await agent.new_session(tmp_path)
        await agent.send_raw(b"\n   \n{broken\n")  # blank lines ignored; the broken one answered
        msg_id = await agent.send_request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "say\nsomething"}]}
        )
        await agent.wait_for(is_response(msg_id))
        await agent.close_stdin()
        await agent.read_to_eof()  # the transcript rejects any line that is not a valid ACP message
        assert await agent.wait_exit(EXIT_WITHIN) == 0
    stderr = agent.stderr()
    assert "DEBUG" in stderr or "INFO" in stderr
    assert "client pipe-test 1" in stderr  # logged by initialize, at info level
    assert len(agent.agent_messages()) >= 5


async def test_log_file_receives_the_logs(tmp_path: Path, check: Any) -> None:
    log_file = tmp_path / "agent.log"
    async with AgentProcess.start(tmp_path, "--log-level", "info", "--log-file", str(log_file), check=check) as agent:
        await agent.initialize()
        await agent.close_stdin()
        assert await agent.wait_exit(EXIT_WITHIN) == 0
    assert "client pipe-test 1" in log_file.read_text(encoding="utf-8")
    assert "client pipe-test" not in agent.stderr()


GUARD_SCRIPT = r"""
import json, os, subprocess, sys
from refagent.server.stdio import guard_stdio

fds = guard_stdio()
print("print() after the guard")
sys.stdout.flush()
os.write(1, b"os.write(1) after the guard\n")
child = (
    "import os, sys\n"
    "print('a child print()', flush=True)\n"
    "os.write(1, b'a child os.write(1)\\n')\n"
    "print('child stdin:', repr(sys.stdin.read()), file=sys.stderr)\n"
    "for fd in map(int, sys.argv[1:]):\n"
    "    try:\n"
    "        os.fstat(fd)\n"
    "        print('child inherited', fd, file=sys.stderr)\n"
    "    except OSError:\n"
    "        pass\n"
)
subprocess.run([sys.executable, "-c", child, str(fds.read_fd), str(fds.write_fd)], check=True)
subprocess.run(["sh", "-c", "echo a shell child"], check=True)
protocol_input = os.read(fds.read_fd, 1000).decode()
os.write(fds.write_fd, json.dumps({"stdin": sys.stdin.read(), "protocol": protocol_input}).encode() + b"\n")
"""


def test_stdout_guard_keeps_everything_but_the_protocol_off_stdout(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", GUARD_SCRIPT],
        input=b"the client's line\n",
        capture_output=True,
        timeout=30,
        env=agent_env(tmp_path),
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    # only the line written to the protocol fd reached the real stdout
    assert done.stdout.count(b"\n") == 1
    assert json.loads(done.stdout) == {"stdin": "", "protocol": "the client's line\n"}
    stderr = done.stderr.decode()
    for stray in ("print() after the guard", "os.write(1) after the guard", "a child print()", "a child os.write(1)"):
        assert stray in stderr  # went to stderr instead
    assert "a shell child" in stderr
    assert "child stdin: ''" in stderr  # children read /dev/null, not the protocol stream
    assert "child inherited" not in stderr  # the protocol fds are not inherited


async def test_two_agents_at_once(tmp_path: Path, check: Any) -> None:
    """Two agents at once, each on its own pipes, each answering only its own client."""
    async with (
        AgentProcess.start(tmp_path / "a", check=check) as first,
        AgentProcess.start(tmp_path / "b", check=check) as second,
    ):
        results = await _both(first.initialize(), second.initialize())
        assert all(r["protocolVersion"] == 1 for r in results)


async def _both(*awaitables: Any) -> list[Any]:
    results: list[Any] = [None] * len(awaitables)

    async def run(index: int, awaitable: Any) -> None:
        results[index] = await awaitable

    async with anyio.create_task_group() as tg:
        for index, awaitable in enumerate(awaitables):
            tg.start_soon(run, index, awaitable)
    return results
