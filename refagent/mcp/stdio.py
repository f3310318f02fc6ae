"""The stdio transport: an MCP server as a child process speaking newline-delimited JSON-RPC.

Refagent's own instead of the SDK's ``stdio_client``, for what an agent in an editor needs:

* **Where and with what**: the session's cwd; the environment the hub computed (the agent's own without
  the model's credentials, plus the server's ``env``); stdin and stdout are the protocol.
* **stderr is read, never inherited**: nothing the server prints can reach the agent's protocol stream
  or fill a pipe nobody reads (some editors read the agent's stderr only after it fails). Its lines go
  to the debug log, and the last few KiB are kept for the message when the server fails.
* **Its own process group** (``setsid``), ended as a whole: on close, stdin is closed first (the MCP
  shutdown sequence: a well-behaved server exits), then after ``close_grace`` seconds the group gets
  SIGTERM, then SIGKILL; and the group is ended even when the server exited by itself, so helpers it
  started do not outlive it. This runs shielded from cancellation, so an agent that exits leaves no
  server behind.
* **A line that is not JSON-RPC** (a banner printed to stdout) is logged and skipped.
* :attr:`StdioTransport.closed` is set when the server's stdout ends: the connection learns that the
  server went away even while no call is running.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from refagent.mcp.config import StdioServer
from refagent.mcp.errors import ServerUnavailable
from refagent.sandbox.confine.process import end_group  # one way of ending a process group, shared with commands

if TYPE_CHECKING:  # the SDK names the pair of streams only in a private module: for types alone
    from mcp.client._transport import TransportStreams

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 4096
_LINE_LOG_CHARS = 500


class StdioTransport:
    """An MCP SDK ``Transport`` (an async context manager yielding the read and write streams).

    Raises :class:`ServerUnavailable` on entry when the process cannot be started.
    """

    def __init__(
        self,
        server: StdioServer,
        cwd: str,
        env: Mapping[str, str],
        *,
        close_grace: float = 2.0,
        kill_grace: float = 2.0,
    ) -> None:
        self.server = server
        self.cwd = cwd
        self.env = dict(env)
        self.close_grace = close_grace
        self.kill_grace = kill_grace
        self.pid: int | None = None
        self.returncode: int | None = None
        self.closed = anyio.Event()
        """Set when the server's stdout ended (it exited, or closed the connection)."""
        self._stderr = bytearray()
        self._stack: AsyncExitStack | None = None

    def stderr_tail(self, lines: int = 10) -> str:
        """The last ``lines`` lines the server wrote to stderr (from its last :data:`STDERR_TAIL_BYTES`)."""
        text = self._stderr.decode("utf-8", "replace")
        kept = text.strip().splitlines()
        if len(self._stderr) >= STDERR_TAIL_BYTES and kept:
            kept = kept[1:]  # the first line is probably cut
        return "\n".join(line[:_LINE_LOG_CHARS] for line in kept[-lines:])

    def describe_exit(self, *, stderr: bool = True) -> str:
        """How the process ended ("exited with code 3"), with its last stderr lines: for messages."""
        code = self.returncode
        if code is None:
            what = "closed the connection"
        elif code < 0:
            what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
        tail = self.stderr_tail() if stderr else ""
        return f"{what}; its last output on stderr:\n{tail}" if tail else what

    async def __aenter__(self) -> TransportStreams:
        stack = AsyncExitStack()
        streams = await stack.enter_async_context(self._connect())
        self._stack = stack
        return streams

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        return await stack.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[TransportStreams]:
        process = await self._spawn()
        self.pid = process.pid
        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read_stdout, process, to_session)
                tasks.start_soon(self._write_stdin, process, from_session, to_session)
                tasks.start_soon(self._read_stderr, process)
                try:
                    yield read_stream, write_stream
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(process)
                    tasks.cancel_scope.cancel()
        finally:
            for stream in (to_session, read_stream, write_stream, from_session):
                stream.close()

    async def _spawn(self) -> anyio.abc.Process:
        if not await anyio.Path(self.cwd).is_dir():
            raise ServerUnavailable(f"cannot start it: the session directory {self.cwd} does not exist")
        argv = [self.server.command, *self.server.args]
        # Once spawned, the process must reach the cleanup in _connect: no cancellation in between.
        with anyio.CancelScope(shield=True):
            try:
                process = await anyio.open_process(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise ServerUnavailable(f"cannot start `{self.server.command}`: {reason}") from None
        return process

    async def _read_stdout(
        self, process: anyio.abc.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            async with to_session:
                async for chunk in process.stdout:
                    buffer += chunk
                    *lines, rest = buffer.split(b"\n")
                    buffer = bytearray(rest)
                    for line in lines:
                        message = self._parse(line)
                        if message is not None:
                            await to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # our own shutdown closed a stream, or the session is gone
        finally:
            self.closed.set()

    def _parse(self, line: bytes | bytearray) -> SessionMessage | None:
        text = line.decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
        except ValueError:
            log.warning(
                "MCP server %s wrote a line that is not JSON-RPC: %.*s", self.server.name, _LINE_LOG_CHARS, text
            )
            return None

    async def _write_stdin(
        self,
        process: anyio.abc.Process,
        from_session: MemoryObjectReceiveStream[SessionMessage],
        to_session: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for item in from_session:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the session's side too, so no request waits forever.
            to_session.close()

    async def _read_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        partial = b""
        try:
            async for chunk in process.stderr:
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_BYTES]
                *lines, partial = (partial + chunk).split(b"\n")
                partial = partial[-_LINE_LOG_CHARS:]
                for line in lines:
                    log.debug("MCP server %s: %s", self.server.name, line[:_LINE_LOG_CHARS].decode("utf-8", "replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async def _stop(self, process: anyio.abc.Process) -> None:
        """Close stdin; give the server ``close_grace`` seconds to exit; then end its whole group."""
        if process.stdin is not None:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await process.stdin.aclose()
        await _exited(process, self.close_grace)
        # The group is the server's pid (setsid). Also when the server exited: its helpers may not have.
        await end_group(process.pid, self.kill_grace)
        await _exited(process, 1.0)
        self.returncode = process.returncode
        with anyio.move_on_after(1.0):  # a process that left the group may hold a pipe: don't wait for it
            await process.aclose()


async def _exited(process: anyio.abc.Process, seconds: float) -> bool:
    """Whether the process exited within ``seconds``. Polls the return code: ``wait()`` would also wait
    for the pipes to close, which a helper process that inherited them can delay forever."""
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 - no event says "exited" without the pipes
            await anyio.sleep(0.01)
    return process.returncode is not None
