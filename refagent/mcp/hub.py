"""A session's MCP servers (ACP "Session Setup": "agents SHOULD connect to all MCP servers they are given").

:class:`McpHub` is all a session needs:

* ``McpHub(servers, cwd, on_problem=...)``: the ``mcpServers`` of ``session/new`` (or load/resume) as
  the client sent them. The entries are checked here (a broken one is reported once started); nothing
  is imported or started yet.
* ``await hub.start(task_group)`` returns at once. In the background it imports the ``mcp`` SDK (about a
  second, in a worker thread, so the agent keeps answering) and connects to every server concurrently,
  each in its own task of ``task_group``. A server that cannot be used (a broken entry, a command that
  does not exist, a server that exits or does not answer within ``connect_timeout``, one that goes away
  later) is reported through ``on_problem(server_name, message)``; the session works without it.
* ``hub.tools()``: the tools of the servers connected now, as refagent tools (:mod:`refagent.mcp.tools`),
  current with the servers' tool-list changes. Ask again before each model request. ``hub.version``
  changes whenever the list does.
* ``await hub.aclose()``: closes every server and returns once each is closed (a stdio server's whole
  process group gone). Cancelling ``task_group`` (the agent exiting) closes them too. ``await hub.run()``
  is ``start`` with a task group of its own, until cancelled, then ``aclose``.

Environment of stdio servers: the agent's (or ``env``) without the model's credentials
(:func:`refagent.sandbox.confine.process.scrub_env`, the rule commands follow), plus the entry's own ``env``, which
is kept as given even when it names a secret: the user configured it for that server.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from refagent.mcp.config import Limits, ServerConfig, ServerConfigError, StdioServer, parse_server, server_name
from refagent.mcp.tools import ToolNames, make_tool
from refagent.sandbox.confine.process import scrub_env
from refagent.tools.base import BaseTool

if TYPE_CHECKING:
    from refagent.mcp.connection import Connection

log = logging.getLogger(__name__)

ProblemCallback = Callable[[str, str], Awaitable[None] | None]
DEFAULT_MAX_TOOLS = 100
"""OpenAI-compatible APIs take at most 128 functions; this leaves room for refagent's own tools."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    state: str
    """``connecting``, ``connected``, ``failed``, ``lost`` or ``closed`` (``invalid`` for a broken entry)."""
    problem: str
    tools: int
    pid: int | None
    """A stdio server's process id, which is also its process group id."""


class McpHub:
    """The MCP servers of one session (see the module docstring)."""

    def __init__(
        self,
        servers: Sequence[Any],
        cwd: str,
        *,
        on_problem: ProblemCallback | None = None,
        reserved_names: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        connect_timeout: float = 30.0,
        call_timeout: float = 600.0,
        close_grace: float = 2.0,
        max_tools: int = DEFAULT_MAX_TOOLS,
    ) -> None:
        self.cwd = cwd
        self.limits = Limits(connect_timeout, call_timeout, close_grace)
        self.max_tools = max_tools
        self._on_problem = on_problem
        self._env = env
        self._names = ToolNames(reserved_names)
        self._configs: list[tuple[str, ServerConfig]] = []
        self._invalid: list[tuple[str, str]] = []
        taken: set[str] = set()
        for index, raw in enumerate(servers):
            name = _unique(server_name(raw, index), taken)
            try:
                self._configs.append((name, parse_server(raw)))
            except ServerConfigError as exc:
                self._invalid.append((name, str(exc)))
        self._connections: list[Connection] = []
        self._tools: list[BaseTool] = []
        self._capped: set[str] = set()
        """Servers some of whose tools were left out, to be reported."""
        self._cap_reported: set[str] = set()
        self.version = 0
        """Changes whenever :meth:`tools` would return something else."""
        self._changed = anyio.Event()
        self._launched = anyio.Event()
        self._started = False
        self._closed = False
        self._scope: anyio.CancelScope | None = None

    async def start(self, task_group: TaskGroup) -> None:
        """Start connecting in the background (in ``task_group``); returns at once. Called once."""
        if self._started or self._closed:
            return
        self._started = True
        task_group.start_soon(self._launch, task_group, name="mcp hub")

    async def run(self) -> None:
        """:meth:`start` in a task group of its own, and keep the servers until this task is cancelled;
        then close them. For owners that close things by cancelling a scope (a session's background)."""
        try:
            async with anyio.create_task_group() as tasks:
                await self.start(tasks)
                await anyio.sleep_forever()
        finally:
            await self.aclose()

    def tools(self) -> list[BaseTool]:
        """The tools of the connected servers now (a new list; the tools are shared)."""
        return list(self._tools)

    def status(self) -> list[ServerStatus]:
        """Every server of the session, in the order given."""
        found = {c.name: c for c in self._connections}
        statuses = [ServerStatus(name, "invalid", problem, 0, None) for name, problem in self._invalid]
        for name, _ in self._configs:
            conn = found.get(name)
            if conn is None:
                statuses.append(ServerStatus(name, "closed" if self._closed else "connecting", "", 0, None))
            else:
                statuses.append(ServerStatus(name, conn.state, conn.problem, len(conn.tools), conn.pid))
        return statuses

    async def wait_ready(self) -> None:
        """Return once every server has connected or failed; at once if :meth:`start` was not called.

        Bound it with a timeout if you wait for it (each server gives up after ``connect_timeout``)."""
        if not self._started:
            return
        await self._launched.wait()
        for conn in self._connections:
            await conn.settled.wait()

    async def wait_changed(self, since: int) -> int:
        """Wait until :attr:`version` is not ``since`` any more; return the new version."""
        while self.version == since:
            await self._changed.wait()
        return self.version

    async def aclose(self) -> None:
        """Close every server; returns once they are closed. Safe to call more than once, and shielded
        from cancellation (closing is what makes sure no server outlives the session)."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._scope is not None:
                self._scope.cancel()  # still importing the SDK: connect nothing more
            async with anyio.create_task_group() as closing:
                for conn in self._connections:
                    closing.start_soon(conn.close)
            self._rebuild()

    # -- background ------------------------------------------------------------------------------

    async def _launch(self, task_group: TaskGroup) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                for name, problem in self._invalid:
                    await self._report(name, f"this entry cannot be used: {problem}")
                if not self._configs:
                    return
                # The SDK takes about a second to import: not on the event loop, or every session would wait.
                connection_class = await anyio.to_thread.run_sync(_load_connection, abandon_on_cancel=True)
                if self._closed:
                    return
                base_env = scrub_env(os.environ if self._env is None else self._env)
                for name, config in self._configs:
                    env = base_env | dict(config.env) if isinstance(config, StdioServer) else base_env
                    conn = connection_class(config, name, self.cwd, env, self.limits, self._connection_changed)
                    self._connections.append(conn)
                    task_group.start_soon(conn.run, name=f"mcp server {name}")
        except Exception as exc:  # the SDK is missing or broken: report it, the session goes on without MCP
            log.exception("starting the MCP servers failed")
            for name, _ in self._configs:
                await self._report(name, f"MCP is unavailable: {type(exc).__name__}: {exc}")
        finally:
            self._launched.set()

    async def _connection_changed(self, conn: Connection) -> None:
        self._rebuild()
        if conn.state in ("failed", "lost") and not self._closed:
            await self._report(conn.name, conn.problem)
        for name in sorted(self._capped):
            self._capped.discard(name)
            await self._report(
                name,
                f"the model is offered at most {self.max_tools} MCP tools; "
                "some tools of this server are left out (the model API limits the number of tools).",
            )

    def _rebuild(self) -> None:
        tools: list[BaseTool] = []
        left_out: set[str] = set()
        for conn in self._connections:
            if conn.state != "connected" or self._closed:
                continue
            seen: set[str] = set()
            for spec in conn.tools:
                remote = spec.get("name")
                if not isinstance(remote, str) or not remote or remote in seen:
                    continue  # a nameless or repeated entry would make the model request invalid
                seen.add(remote)
                if len(tools) >= self.max_tools:
                    left_out.add(conn.name)
                    continue
                tools.append(make_tool(conn, spec, self._names.name(conn.name, remote)))
        self._capped |= left_out - self._cap_reported  # reported once per server
        self._cap_reported |= left_out
        self._tools = tools
        self.version += 1
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def _report(self, name: str, message: str) -> None:
        if self._on_problem is None:
            log.warning("MCP server %s: %s", name, message)
            return
        log.info("MCP server %s: %s", name, message)
        try:
            result = self._on_problem(name, message)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("reporting a problem of MCP server %s failed", name)


def _load_connection() -> type[Connection]:
    from refagent.mcp.connection import Connection  # here: the mcp SDK, in a worker thread (start): 326 ms

    return Connection


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name (2)``, ``name (3)``... when a server of that name came before."""
    unique, number = name, 2
    while unique in taken:
        unique = f"{name} ({number})"
        number += 1
    taken.add(unique)
    return unique
