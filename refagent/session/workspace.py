"""What a session's tools work with: the sandbox, the backends chosen from the client's capabilities,
and the tool runner that ties them to the session's permissions.

Backends: text reads and writes go through the editor's ``fs/*`` when it
advertises them, commands through its ``terminal/*``; otherwise the local disk and local processes.
Everything else (listing, searching, deleting, moving) is always local.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from refagent.acp.types import ClientCapabilities
from refagent.sandbox.confinement import Confinement
from refagent.sandbox.editor import choose_files, choose_terminals
from refagent.sandbox.seams import Disk, PathPolicy, ReadTracker, Terminals, Watcher
from refagent.tools.base import BaseTool, Plan, ToolContext
from refagent.tools.permissions import Permissions
from refagent.tools.runner import ToolRunner


class Peer(Protocol):
    async def request(self, method: str, params: dict[str, Any]) -> Any: ...


@dataclass
class Sandbox:
    """The local side of a session: policy, disk, processes, read tracking, and a watcher (optional)."""

    policy: PathPolicy
    disk: Disk
    terminals: Terminals
    reads: ReadTracker
    watcher: Watcher | None = None
    confinement: Confinement | None = None
    """How commands are confined, in local processes and the editor's terminals alike (None: not)."""

    def close(self) -> None:
        """The session is over: remove what its commands left in their private temporary directory."""
        if self.confinement is not None:
            self.confinement.close()


def local_sandbox(cwd: str, additional: list[str]) -> Sandbox:
    from refagent.sandbox.confinement import Confinement, machine_support
    from refagent.sandbox.local_fs import LocalFileSystem
    from refagent.sandbox.policy import RootPolicy
    from refagent.sandbox.process import LocalTerminals
    from refagent.sandbox.tracker import FileTracker
    from refagent.sandbox.watcher import RootWatcher

    confinement = Confinement([cwd, *additional], machine_support())
    return Sandbox(
        policy=RootPolicy(cwd, additional),
        disk=LocalFileSystem(),
        terminals=LocalTerminals(confinement=confinement),
        reads=FileTracker(),
        watcher=RootWatcher([cwd, *additional]),
        confinement=confinement,
    )


def default_tools() -> Sequence[BaseTool]:
    from refagent.tools.registry import default_tools as tools

    return tools()


@dataclass
class Workspace:
    """Built once per session by :func:`build`."""

    sandbox: Sandbox
    context: ToolContext
    runner: ToolRunner
    permissions: Permissions = field(default_factory=Permissions)


def build(
    *,
    session_id: str,
    cwd: str,
    additional: list[str],
    capabilities: ClientCapabilities,
    peer: Peer,
    sandbox: Sandbox,
    tools: Sequence[BaseTool] | Callable[[], Sequence[BaseTool]],
    permissions: Permissions,
    mode: Callable[[], str],
    send_update: Callable[[dict[str, Any]], Awaitable[None]],
    cancel_turn: Callable[[], None],
    on_applied: Callable[[str, Plan], None] | None = None,
) -> Workspace:
    context = ToolContext(
        session_id=session_id,
        cwd=cwd,
        roots=[cwd, *additional],
        policy=sandbox.policy,
        files=choose_files(capabilities, peer, session_id, sandbox.disk, sandbox.policy),
        disk=sandbox.disk,
        terminals=choose_terminals(capabilities, peer, session_id, sandbox.terminals, sandbox.confinement),
        reads=sandbox.reads,
        send_update=send_update,
    )

    async def request_permission(params: dict[str, Any]) -> Any:
        return await peer.request("session/request_permission", params)

    on_changed = sandbox.watcher.note_own_write if sandbox.watcher is not None else None
    runner = ToolRunner(tools, context, permissions, mode, request_permission, cancel_turn, on_changed, on_applied)
    return Workspace(sandbox, context, runner, permissions)
