"""A real ``refagent`` process over real pipes, for the integration tests.

The process runs the refagent these tests import (``PYTHONPATH`` points at it) with an environment
that cannot reach a real model: no ``OPENAI_*`` or ``REFAGENT_*`` variables, and ``HOME`` and
``XDG_CONFIG_HOME`` in the test's temporary directory, so no user config file is found. The built-in
scripted model answers.

Every line the agent writes on stdout goes through a :class:`~refagent.testing.transcript.Transcript`
with a check: a line that is not JSON, or a message that is not valid ACP, fails the test.

Waiting is always for a message or for the process to exit, under a deadline that is only a safety net.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

import refagent
from refagent.testing.transcript import Check, Transcript

ROOT = Path(refagent.__file__).resolve().parent.parent
TIMEOUT = 15  # safety net for one wait; a healthy agent answers in milliseconds
MAX_LINE = 64 * 1024 * 1024


def agent_command(*args: str, python_flags: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, *python_flags, "-m", "refagent", *args]


def agent_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an agent under test (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_"))}
    # pytest-xdist's workers set COLUMNS and LINES (80x24), which rich and prompt_toolkit prefer to the size
    # of the terminal they draw on: a client under test on a pseudo-terminal must take that terminal's size.
    for name in ("COLUMNS", "LINES"):
        env.pop(name, None)
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def _create(path: Path) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("wb")


class AgentProcess:
    """Drives a spawned agent: send messages, read its messages until the one wanted arrives."""

    def __init__(self, process: Process, transcript: Transcript, stderr_path: Path) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self.transcript = transcript
        self.stderr_path = stderr_path
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._next_id = 0
        self.eof = False

    @classmethod
    def start(
        cls, tmp_path: Path, *args: str, check: Check | None = None, env: dict[str, str] | None = None
    ) -> AbstractAsyncContextManager[AgentProcess]:
        """Spawn ``refagent *args``; kill it on exit if it is still running."""
        return cls.spawn(tmp_path, agent_command(*args), check=check, env=env)

    @classmethod
    @asynccontextmanager
    async def spawn(
        cls, tmp_path: Path, argv: list[str], *, check: Check | None = None, env: dict[str, str] | None = None
    ) -> AsyncIterator[AgentProcess]:
        """Spawn ``argv``, an ACP agent (refagent, or another such as an example); kill it on exit if it is
        still running."""
        stderr_path = tmp_path / "agent-stderr.log"
        with _create(stderr_path) as stderr:  # a file, so a chatty agent can never block on a full pipe
            process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env or agent_env(tmp_path / "home"),
            )
            try:
                yield cls(process, Transcript(check=check), stderr_path)
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
                    await process.aclose()

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    # -- sending ----------------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")).encode()
        self.transcript.record("client", line)
        await self.send_raw(line + b"\n")

    async def send_together(self, messages: list[dict[str, Any]]) -> None:
        """Send ``messages`` in one write (an editor that writes several at once)."""
        lines = [json.dumps(message, separators=(",", ":")).encode() for message in messages]
        for line in lines:
            self.transcript.record("client", line)
        await self.send_raw(b"".join(line + b"\n" for line in lines))

    async def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send_request(self, method: str, params: dict[str, Any]) -> int:
        msg_id = self._next_id
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    # -- receiving --------------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any] | None:
        """The agent's next message (validated by the transcript), or None at EOF."""
        try:
            with anyio.fail_after(TIMEOUT):
                line = await self._stdout.receive_until(b"\n", MAX_LINE)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            self.eof = True
            return None
        message = self.transcript.record("agent", line)
        assert message is not None
        return message

    async def receive_any(self) -> dict[str, Any] | list[dict[str, Any]]:
        """The agent's next line: a message, or (ACP v2) a batch, each of its messages validated by the
        transcript as if it came alone. Fails at EOF."""
        with anyio.fail_after(TIMEOUT):
            line = await self._stdout.receive_until(b"\n", MAX_LINE)
        if not line.lstrip().startswith(b"["):
            message = self.transcript.record("agent", line)
            assert message is not None
            return message
        batch = json.loads(line)
        assert isinstance(batch, list), line
        assert batch, "the agent sent an empty batch"
        for item in batch:
            assert isinstance(item, dict), f"the agent sent a batch of non-objects: {line[:200]!r}"
            self.transcript.record("agent", json.dumps(item).encode())
        return batch

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read messages until one satisfies ``predicate``; fail at EOF."""
        while True:
            message = await self.receive()
            if message is None:
                raise AssertionError(f"the agent closed stdout first; stderr:\n{self.stderr()[-3000:]}")
            if predicate(message):
                return message

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return the agent's response message (result or error)."""
        msg_id = await self.send_request(method, params)
        return await self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)

    async def result(self, method: str, params: dict[str, Any]) -> Any:
        response = await self.request(method, params)
        assert "result" in response, f"{method} failed: {response}\nstderr:\n{self.stderr()[-3000:]}"
        return response["result"]

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"protocolVersion": 1, "clientInfo": {"name": "pipe-test", "version": "1"}}
        if capabilities is not None:
            params["clientCapabilities"] = capabilities
        result: dict[str, Any] = await self.result("initialize", params)
        return result

    async def new_session(self, cwd: Path) -> str:
        result = await self.result("session/new", {"cwd": str(cwd), "mcpServers": []})
        session_id: str = result["sessionId"]
        return session_id

    async def read_to_eof(self) -> list[dict[str, Any]]:
        messages = []
        while (message := await self.receive()) is not None:
            messages.append(message)
        return messages

    async def wait_exit(self, within: float) -> int:
        """The exit code, which must come within ``within`` seconds."""
        with anyio.fail_after(within):
            return await self.process.wait()

    def agent_messages(self) -> list[dict[str, Any]]:
        return self.transcript.sent_by("agent")

    def text(self, session_id: str) -> str:
        return "".join(
            u["content"].get("text", "")
            for u in self.transcript.updates(session_id)
            if u["sessionUpdate"] == "agent_message_chunk"
        )
