"""The agent a terminal client talks to: a child process, its stdio as an ACP :class:`Connection`.

``refagent run``, ``refagent chat`` and ``refagent sessions`` are each an ordinary ACP client, as an
editor is: :func:`open_agent` starts the agent (``python -m refagent`` or ``--agent``), serves the
client's ``handler`` on the connection while the caller works, and on the way out closes the agent's
stdin (how ACP says "shut down") and kills it if it does not exit within :data:`SHUTDOWN_SECONDS`.

The agent runs in its own process group (``start_new_session``): the terminal's Ctrl-C reaches only
the client, which decides what it means (``session/cancel``, or quit). The agent's stderr (its log) is
the client's stderr, unless the client takes its lines (``log``: ``refagent chat`` draws them above its
live region, which raw writes to the terminal would tear).

:func:`initialize` sends the handshake a terminal client sends: no file system, no terminal (the agent
reads and writes the local disk and runs local processes itself, in its sandbox).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TextIO

import anyio
from anyio.abc import ByteReceiveStream, Process

from refagent import __version__
from refagent.acp.connection import Connection, Handler

SHUTDOWN_SECONDS = 5.0
"""How long the agent may take to exit once its stdin is closed, before it is killed."""
LOG_DRAIN_SECONDS = 1.0
"""How long the last of the agent's stderr may take to arrive once it has exited."""


class AgentStartError(Exception):
    """The agent's command could not be started (``str()`` says which command and why)."""


@contextlib.asynccontextmanager
async def open_agent(
    command: list[str],
    handler: Handler,
    *,
    env: dict[str, str] | None = None,
    transcript: TextIO | None = None,
    exited: Callable[[int], None] | None = None,
    log: Callable[[str], Awaitable[None]] | None = None,
) -> AsyncIterator[Connection]:
    """Start ``command`` and yield the connection to it, with ``handler`` answering the agent's requests.

    ``transcript``: every line each side sends, as JSON lines ``{"from": "client"|"agent", "message"}``
    (``{"line"}`` for one that is not JSON). ``exited``: called with the agent's exit status (negative: the
    signal that killed it) once it has stopped, on the way out; a client that lost the connection says
    with it why. ``log``: called with each line the agent writes to its stderr (without the newline), the
    last ones too (a crash's traceback); without it they go to this process's stderr. Raises
    :class:`AgentStartError` if the command cannot start.
    """
    try:
        process = await anyio.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if log is not None else None,  # else the agent's log goes to our stderr
            env=env,
            start_new_session=True,  # the terminal's Ctrl-C is ours to handle, not the agent's
        )
    except OSError as exc:
        raise AgentStartError(f"cannot start the agent ({' '.join(command)}): {exc}") from exc
    assert process.stdin is not None
    assert process.stdout is not None
    stdin = process.stdin

    async def write(data: bytes) -> None:
        _record(transcript, "client", data)
        await stdin.send(data)

    drained = anyio.Event()
    connection = Connection(_lines(process.stdout, transcript, drained), write)
    async with anyio.create_task_group() as readers:
        if log is not None and process.stderr is not None:
            readers.start_soon(_forward_log, process.stderr, log, drained)
        else:
            drained.set()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(connection.serve, handler)
                try:
                    yield connection
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, drained)
            readers.cancel_scope.cancel()
            if exited is not None and process.returncode is not None:
                exited(process.returncode)


async def initialize(connection: Connection, name: str, title: str, *, notices: bool = False) -> dict[str, Any]:
    """The ``initialize`` request of a terminal client called ``name``; returns the agent's answer.
    ``notices``: the client shows ``notice`` updates (``session.notices``), news about this run of the agent
    (a broken configuration, said as the session opens rather than at the first prompt)."""
    capabilities: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
    if notices:
        capabilities["session"] = {"notices": {}}
    result = await connection.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": capabilities,
            "clientInfo": {"name": name, "title": title, "version": __version__},
        },
    )
    return dict(result) if isinstance(result, dict) else {}


async def _lines(stream: ByteReceiveStream, transcript: TextIO | None, drained: anyio.Event) -> AsyncIterator[bytes]:
    """The agent's stdout, a line at a time. At its end, the connection closes once the agent's stderr has
    been read to the end too (``drained``, briefly): a client that says "the agent stopped" says it after
    what the agent said last, not before."""
    buffer = bytearray()
    async for chunk in _chunks(stream):
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            line = bytes(buffer[start:end])
            _record(transcript, "agent", line)
            yield line
            start = end + 1
        del buffer[:start]
    if buffer.strip():
        _record(transcript, "agent", bytes(buffer))
        yield bytes(buffer)
    with anyio.move_on_after(LOG_DRAIN_SECONDS):
        await drained.wait()


def _record(out: TextIO | None, sender: str, data: bytes) -> None:
    if out is None:
        return
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            entry = {"from": sender, "message": json.loads(line)}
        except ValueError:
            entry = {"from": sender, "line": line.decode("utf-8", "replace")}
        out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    out.flush()


async def _forward_log(stream: ByteReceiveStream, log: Callable[[str], Awaitable[None]], drained: anyio.Event) -> None:
    """Each line of the agent's stderr to ``log``, until it ends; then ``drained``."""
    buffer = bytearray()
    try:
        async for chunk in _chunks(stream):
            buffer += chunk
            *lines, rest = bytes(buffer).split(b"\n")
            buffer = bytearray(rest)
            for line in lines:
                await log(line.decode("utf-8", "replace").rstrip("\r"))
        if buffer.strip():
            await log(buffer.decode("utf-8", "replace"))
    finally:
        drained.set()


async def _chunks(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    while True:
        try:
            yield await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


async def _stop(process: Process, drained: anyio.Event) -> None:
    """Close the agent's stdin (how ACP says "shut down"); kill it if it does not exit in time. Then wait,
    briefly, for its stderr to be read to the end (``drained``; a child it left may hold the pipe open)."""
    if process.stdin is not None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.aclose()
    with anyio.move_on_after(SHUTDOWN_SECONDS):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    with anyio.move_on_after(LOG_DRAIN_SECONDS):
        await drained.wait()
    await process.aclose()
