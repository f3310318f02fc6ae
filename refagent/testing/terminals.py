"""An editor's terminals, faked with real processes: implements ``terminal/*`` as a client would, so the
agent's :class:`~refagent.sandbox.editor.terminals.EditorTerminals` can be tested against real commands.

Plug it into :class:`refagent.testing.memory.FakeClient` with ``extra=host.handlers()``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process

from refagent.acp.errors import RequestError


@dataclass
class _Terminal:
    process: Process
    output: bytearray = field(default_factory=bytearray)
    limit: int | None = None
    truncated: bool = False
    done: anyio.Event = field(default_factory=anyio.Event)


class FakeTerminalHost:
    """Runs each ``terminal/create`` as a real process group; records what the agent asked for."""

    def __init__(self) -> None:
        self.terminals: dict[str, _Terminal] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.released: set[str] = set()
        self._next = 0
        self._task_group: anyio.abc.TaskGroup | None = None

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "terminal/create": self.create,
            "terminal/output": self.output,
            "terminal/wait_for_exit": self.wait_for_exit,
            "terminal/kill": self.kill,
            "terminal/release": self.release,
        }

    @property
    def live(self) -> list[str]:
        """Terminals created and not released: must be empty after every command."""
        return [t for t in self.terminals if t not in self.released]

    async def create(self, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", params))
        command = [params["command"], *params.get("args", [])]
        process = await anyio.open_process(
            command,
            cwd=params.get("cwd"),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,  # merged, like a terminal
            start_new_session=True,
        )
        self._next += 1
        terminal_id = f"term_{self._next}"
        terminal = self.terminals[terminal_id] = _Terminal(process, limit=params.get("outputByteLimit"))

        async def pump() -> None:
            assert process.stdout is not None
            async for chunk in process.stdout:
                terminal.output += chunk
                if terminal.limit is not None and len(terminal.output) > terminal.limit:
                    del terminal.output[: len(terminal.output) - terminal.limit]  # drop from the beginning
                    terminal.truncated = True
            await process.wait()
            terminal.done.set()

        # A background pump per terminal: a real editor keeps reading while the agent waits.
        self._spawn(pump)
        return {"terminalId": terminal_id}

    def _spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._task_group is None:
            raise RuntimeError("use `async with FakeTerminalHost()`")
        self._task_group.start_soon(fn)

    async def __aenter__(self) -> FakeTerminalHost:
        self._task_group = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for terminal in self.terminals.values():
            _killpg(terminal.process)
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        await self._task_group.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):  # reaped and closed here, not by the garbage collector later
            for terminal in self.terminals.values():
                await terminal.process.aclose()

    def _get(self, params: dict[str, Any]) -> _Terminal:
        terminal_id = params.get("terminalId")
        if terminal_id not in self.terminals or terminal_id in self.released:
            raise RequestError(f"unknown terminal {terminal_id}", code=-32002)
        return self.terminals[terminal_id]

    def _status(self, terminal: _Terminal) -> dict[str, Any]:
        code = terminal.process.returncode
        if code is not None and code < 0:
            return {"exitCode": None, "signal": signal.Signals(-code).name}
        return {"exitCode": code, "signal": None}

    async def output(self, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("output", params))
        terminal = self._get(params)
        result: dict[str, Any] = {
            "output": terminal.output.decode("utf-8", errors="replace"),
            "truncated": terminal.truncated,
        }
        if terminal.done.is_set():
            result["exitStatus"] = self._status(terminal)
        return result

    async def wait_for_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("wait_for_exit", params))
        terminal = self._get(params)
        await terminal.done.wait()
        return self._status(terminal)

    async def kill(self, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("kill", params))
        terminal = self._get(params)
        _killpg(terminal.process)
        with anyio.fail_after(5):
            await terminal.done.wait()
        return {}

    async def release(self, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("release", params))
        terminal = self._get(params)
        _killpg(terminal.process)
        self.released.add(params["terminalId"])
        return {}


def _killpg(process: Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
