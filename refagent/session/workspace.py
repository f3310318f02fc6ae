"""What a session's tools work with: the sandbox, the backends it joins with the client's, and the tool
runner that ties them to the session's permissions.

Backends: the sandbox decides (:meth:`refagent.sandbox.local.Sandbox.files_with`, ``terminals_with``):
the standard one reads and writes text through the editor's ``fs/*`` when it advertises them, checked by
its path policy, and runs commands in the editor's ``terminal/*`` under its confinement; otherwise its disk
and its own terminals. Everything else (listing, searching, deleting, moving) is the sandbox's alone.
Questions for the user go to the editor (:class:`refagent.sandbox.editor.questions.EditorQuestions`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refagent.acp.client import SessionClient
from refagent.sandbox.editor.questions import EditorQuestions
from refagent.sandbox.local import Sandbox
from refagent.tools.base import BaseTool, Plan, ToolContext
from refagent.tools.jobs import BackgroundJobs
from refagent.tools.permissions import Permissions
from refagent.tools.plans import Plans
from refagent.tools.runner import ToolRunner


@dataclass
class Workspace:
    """Built once per session by :func:`build`."""

    sandbox: Sandbox
    context: ToolContext
    runner: ToolRunner
    permissions: Permissions = field(default_factory=Permissions)
    jobs: BackgroundJobs | None = None
    """The session's background commands (their tasks run in :meth:`BackgroundJobs.serve`)."""


def build(
    *,
    client: SessionClient,
    cwd: str,
    additional: list[str],
    sandbox: Sandbox,
    tools: Sequence[BaseTool] | Callable[[], Sequence[BaseTool]],
    mode: Callable[[], str],
    send_update: Callable[[dict[str, Any]], Awaitable[None]],
    cancel_turn: Callable[[], None],
    before_change: Callable[[str, Plan], None] | None = None,
    permissions: Permissions | None = None,
    show_update: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> Workspace:
    """The workspace of a session with roots ``[cwd, *additional]``: its tool context over ``sandbox`` and
    the backends of the ``client`` it joins, and the runner of ``tools`` under ``permissions`` (the user's
    remembered answers; a new session starts with none) and the session's ``mode``. ``show_update`` shows an
    update without recording it (the frames of a background command's output; default ``send_update``)."""
    permissions = permissions if permissions is not None else Permissions()
    jobs = BackgroundJobs(send_update, show_update or send_update)
    context = ToolContext(
        session_id=client.session_id,
        cwd=cwd,
        roots=[cwd, *additional],
        policy=sandbox.policy,
        files=sandbox.files_with(client),
        disk=sandbox.disk,
        terminals=sandbox.terminals_with(client),
        holding=sandbox.holding,
        reads=sandbox.reads,
        search=sandbox.search,
        send_update=send_update,
        questions=EditorQuestions(client, cancel_turn=cancel_turn),
        jobs=jobs,
        plans=Plans(send_update, by_id=client.takes_plans),
    )

    on_changed = sandbox.watcher.note_own_write if sandbox.watcher is not None else None
    runner = ToolRunner(
        tools, context, permissions, mode, client.request_permission, cancel_turn, on_changed, before_change
    )
    return Workspace(sandbox, context, runner, permissions, jobs)
