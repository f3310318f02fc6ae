"""One MCP server of a session, through the official ``mcp`` SDK: connect, keep the tool list current,
call tools, close.

This is the only module (with :mod:`refagent.mcp.stdio`) that imports the SDK, which takes about a second:
the hub imports it in a worker thread, and only for a session that has MCP servers.

Lifecycle (:meth:`Connection.run`, one task per server, owning the SDK client so that its task groups
and cancel scopes are entered and left in one task):

* ``connecting``: start the transport, negotiate the protocol (the SDK's ``auto`` mode: the 2026
  ``server/discover``, falling back to the ``initialize`` handshake older servers speak), list the tools.
  All within ``connect_timeout`` seconds, else ``failed``.
* ``connected``: tool-list changes are picked up (``notifications/tools/list_changed`` on a handshake-era
  connection, a ``subscriptions/listen`` stream on a 2026 one) and the list fetched again in the background.
* ``closed`` when the hub closes it, or ``lost`` when the server goes away (stdout ended, or a call
  found the connection closed); ``failed`` when it never connected. Calls then fail at once with a
  message saying why. The hub reports ``failed`` and ``lost`` to the user.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from refagent import __version__
from refagent.errors import ToolError
from refagent.mcp.config import HttpServer, Limits, ServerConfig, StdioServer
from refagent.mcp.errors import ServerUnavailable
from refagent.mcp.stdio import StdioTransport

if TYPE_CHECKING:  # the SDK names the pair of streams only in a private module: for types alone
    from mcp.client._transport import TransportStreams

log = logging.getLogger(__name__)

State = Literal["connecting", "connected", "failed", "lost", "closed"]
MAX_TOOL_PAGES = 100
"""A server whose ``tools/list`` pages never end is cut off here."""


class Connection:
    """A server's connection (also the :class:`refagent.mcp.tools.ServerLink` its tools call through)."""

    def __init__(
        self,
        config: ServerConfig,
        name: str,
        cwd: str,
        env: Mapping[str, str],
        limits: Limits,
        on_change: Callable[[Connection], Awaitable[None]],
    ) -> None:
        self.config = config
        self._name = name
        self.cwd = cwd
        self.env = env
        self.limits = limits
        self._on_change = on_change
        self.state: State = "connecting"
        self.problem = ""
        """Why it is ``failed`` or ``lost``, for the user."""
        self.tools: list[dict[str, Any]] = []
        """The server's tools in wire form (MCP ``Tool``), as last listed."""
        self.settled = anyio.Event()
        """Set once it is connected or has failed."""
        self.finished = anyio.Event()
        """Set when :meth:`run` has returned: the transport is closed, a stdio server's process group gone."""
        self.pid: int | None = None
        """A stdio server's process id (it is also its process group id)."""
        self._client: Client | None = None
        self._stdio: StdioTransport | None = None
        self._running = False
        self._stop = anyio.Event()
        self._stale = anyio.Event()
        self._scope: anyio.CancelScope | None = None

    @property
    def name(self) -> str:
        return self._name

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect and serve until closed or lost. Never raises, except cancellation (the transport is
        still closed, shielded)."""
        if self._stop.is_set():  # closed before it started
            self._settle("closed", "")
            self.finished.set()
            return
        self._running = True
        try:
            await self._run()
        except anyio.get_cancelled_exc_class():
            self._settle("closed", "")
            raise
        except Exception as exc:
            self._settle("failed" if self.state == "connecting" else "lost", self._failure(exc))
        finally:
            if self.state == "lost":
                self._explain_loss()
            self._client = None
            self.settled.set()
            self.finished.set()
        if self.state in ("failed", "lost"):
            await self._on_change(self)

    async def close(self) -> None:
        """Close the connection; return once the transport is closed (a stdio server's group is gone)."""
        self._stop.set()
        if not self._running:
            self._settle("closed", "")
            self.finished.set()
            return
        if self.state == "connecting" and self._scope is not None:
            self._scope.cancel()
        bound = self.limits.close_grace * 2 + 3
        with anyio.move_on_after(bound) as waited:
            await self.finished.wait()
        if waited.cancelled_caught and self._scope is not None:
            self._scope.cancel()  # a transport that does not close by itself: cancelling still cleans up
            with anyio.move_on_after(bound):
                await self.finished.wait()

    async def _run(self) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            # One scope over the whole life: the SDK enters task groups while connecting that are left only
            # at the end, so a timeout scope around the connecting alone could not be left first.
            scope.deadline = anyio.current_time() + self.limits.connect_timeout
            client = Client(
                self._transport(),
                mode="auto",
                cache=None,  # the list is fetched again exactly when the server says it changed
                message_handler=self._on_message,
                client_info=mcp_types.Implementation(name="refagent", version=__version__),
            )
            async with client, anyio.create_task_group() as tasks:
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # Subscribe before listing, so that no change can fall between the two.
                    await tasks.start(self._listen, client)
                tools = await self._list_tools(client)
                scope.deadline = math.inf
                self._client, self.tools = client, tools
                self._settle("connected", "")
                log.info("MCP server %s: connected (%s), %d tools", self.name, client.protocol_version, len(tools))
                await self._on_change(self)
                tasks.start_soon(self._refresh_tools, client)
                if self._stdio is not None:
                    tasks.start_soon(self._watch_stdout, self._stdio)
                await self._stop.wait()
                self._client = None
                self._settle("closed", "")  # unless lost
                tasks.cancel_scope.cancel()
        if self.state == "connecting":
            if self._stop.is_set():
                self._settle("closed", "")
            else:
                raise ServerUnavailable(self._timed_out())

    def _transport(self) -> AbstractAsyncContextManager[TransportStreams]:
        config = self.config
        if isinstance(config, StdioServer):
            self._stdio = StdioTransport(
                config, self.cwd, self.env, close_grace=self.limits.close_grace, kill_grace=self.limits.close_grace
            )
            return _with_pid(self._stdio, self)
        headers = dict(config.headers)
        if config.transport == "sse":
            return sse_client(config.url, headers=headers, timeout=self.limits.connect_timeout, sse_read_timeout=3600)
        return _streamable_http(config, headers)

    def _settle(self, state: State, problem: str) -> None:
        if self.state in ("failed", "lost", "closed"):
            return
        self.state, self.problem = state, problem
        if state != "connected":
            self.tools = []
        self.settled.set()

    def _failure(self, exc: BaseException) -> str:
        stdio = self._stdio
        if stdio is not None and stdio.closed.is_set() and not isinstance(exc, ServerUnavailable):
            return stdio.describe_exit()  # "Connection closed" says less than the exit code and stderr
        return describe(exc)

    def _timed_out(self) -> str:
        # Whatever the process did after the deadline (it was stopped then), what went wrong is the silence.
        tail = self._stdio.stderr_tail() if self._stdio is not None else ""
        detail = f"; its last output on stderr:\n{tail}" if tail else ""
        return f"did not answer within {self.limits.connect_timeout:g} s{detail}"

    def _explain_loss(self) -> None:
        """Once the transport is closed, a stdio server's exit code and last words say more than "closed"."""
        if self._stdio is not None and self._stdio.closed.is_set():
            self.problem = f"disconnected: it {self._stdio.describe_exit()}"

    async def _watch_stdout(self, stdio: StdioTransport) -> None:
        await stdio.closed.wait()
        self._lose("the server closed its output")

    def _lose(self, reason: str) -> None:
        if self.state == "connected":
            self._settle("lost", f"disconnected: {reason}")
            log.info("MCP server %s: lost (%s)", self.name, reason)
        self._stop.set()

    # -- tools --------------------------------------------------------------------------------

    async def _list_tools(self, client: Client) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._stale.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport error: %s", self.name, describe(message))

    async def _listen(self, client: Client, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """2026 servers announce changes on a ``subscriptions/listen`` stream, not in notifications.
        Started once the server acknowledged the subscription (or refused it)."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                if not subscription.honored.tools_list_changed:
                    return
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        self._stale.set()
        except Exception as exc:  # no updates then; the tools still work
            log.info("MCP server %s: no tool-list updates: %s", self.name, describe(exc))
            if not started:
                task_status.started()

    async def _refresh_tools(self, client: Client) -> None:
        while True:
            await self._stale.wait()
            self._stale = anyio.Event()  # changes announced while listing trigger one more listing
            try:
                with anyio.fail_after(self.limits.connect_timeout):
                    tools = await self._list_tools(client)
            except Exception as exc:
                log.warning("MCP server %s: listing its changed tools failed: %s", self.name, describe(exc))
                continue
            if self.state == "connected":
                self.tools = tools
                log.info("MCP server %s: tools changed, now %d", self.name, len(tools))
                await self._on_change(self)

    def check_available(self) -> None:
        if self._client is None or self.state != "connected":
            raise ToolError(self.unavailable())

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        """Call ``tool``; its ``CallToolResult`` in wire form. ToolError (for the model) when the server
        is gone, goes away during the call, refuses it, or does not answer within ``call_timeout``."""
        client = self._client
        if client is None or self.state != "connected":
            raise ToolError(self.unavailable())
        with anyio.move_on_after(self.limits.call_timeout):
            try:
                result = await client.call_tool(tool, arguments)
            except MCPError as exc:
                if exc.code == mcp_types.CONNECTION_CLOSED:
                    raise ToolError(await self._lost_during(tool)) from None
                raise ToolError(f"The MCP server {self.name} refused the call: {exc.message}") from None
            except Exception as exc:
                if self._stdio is not None and self._stdio.closed.is_set():
                    raise ToolError(await self._lost_during(tool)) from None
                raise ToolError(f"Calling {tool} on the MCP server {self.name} failed: {describe(exc)}") from None
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)
        raise ToolError(
            f"{tool} on the MCP server {self.name} did not answer within {self.limits.call_timeout:g} s; "
            "the call was cancelled."
        )

    async def _lost_during(self, tool: str) -> str:
        self._lose("the connection closed during a call")
        with anyio.move_on_after(self.limits.close_grace * 2 + 2):
            await self.finished.wait()  # then a stdio server's exit code is known
        stdio = self._stdio
        if stdio is not None and stdio.closed.is_set():
            how = f"it {stdio.describe_exit(stderr=False)}"
        else:
            how = _brief(self.problem)
        return (
            f"The MCP server {self.name} stopped while running {tool} ({how}). "
            "Its tools are unavailable for the rest of this session."
        )

    def unavailable(self) -> str:
        """Why this server's tools cannot be called now (for the model)."""
        if self.state == "connecting":
            return f"The MCP server {self.name} is still starting; try again in a moment."
        state = {"lost": "disconnected", "failed": "unavailable"}.get(self.state, self.state)
        reason = f" ({_brief(self.problem)})" if self.problem else ""
        return f"The MCP server {self.name} is {state}{reason}; its tools cannot be used in this session."


@asynccontextmanager
async def _with_pid(transport: StdioTransport, connection: Connection) -> AsyncIterator[TransportStreams]:
    async with transport as streams:
        connection.pid = transport.pid
        yield streams


@asynccontextmanager
async def _streamable_http(config: HttpServer, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    # No read timeout: a call may stream for longer than any fixed limit; call_timeout bounds calls.
    timeout = httpx2.Timeout(30.0, read=None)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


def _brief(problem: str) -> str:
    """A problem for the model: without the "disconnected: " the state says, and without the stderr lines."""
    return problem.removeprefix("disconnected: ").split("; its last output on stderr")[0]


def describe(exc: BaseException) -> str:
    """A one-line account of an exception, looking inside the exception groups task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerUnavailable | ToolError):
        return str(exc)
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect: {exc}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"the server answered HTTP {exc.response.status_code}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
