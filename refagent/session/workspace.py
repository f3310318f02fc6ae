"""What a session's tools work with: the sandbox, the backends chosen from the client's capabilities,
and the tool runner that ties them to the session's permissions.

Backends: text reads and writes go through the editor's ``fs/*`` when it
advertises them, commands through its ``terminal/*``; otherwise the local disk and local processes.
Everything else (listing, searching, deleting, moving) is always local.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refagent.acp.connection import Peer
from refagent.acp.types import ClientCapabilities
from refagent.editor.backends import choose_files, choose_questions, choose_terminals
from refagent.sandbox.local import Sandbox
from refagent.tools.base import BaseTool, Plan, ToolContext
from refagent.tools.permissions import Permissions
from refagent.tools.runner import ToolRunner


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
    mode: Callable[[], str],
    send_update: Callable[[dict[str, Any]], Awaitable[None]],
    cancel_turn: Callable[[], None],
    before_change: Callable[[str, Plan], None] | None = None,
    permissions: Permissions | None = None,
) -> Workspace:
    """The workspace of a session with roots ``[cwd, *additional]``: its tool context over ``sandbox`` and
    the backends ``capabilities`` offer, and the runner of ``tools`` under ``permissions`` (the user's
    remembered answers; a new session starts with none) and the session's ``mode``."""
    permissions = permissions if permissions is not None else Permissions()
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
        questions=choose_questions(capabilities, peer, session_id, cancel_turn),
    )

    async def request_permission(params: dict[str, Any]) -> Any:
        return await peer.request("session/request_permission", params)

    on_changed = sandbox.watcher.note_own_write if sandbox.watcher is not None else None
    runner = ToolRunner(tools, context, permissions, mode, request_permission, cancel_turn, on_changed, before_change)
    return Workspace(sandbox, context, runner, permissions)
