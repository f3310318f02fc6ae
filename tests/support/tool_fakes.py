"""What the tool tests share: a :class:`ToolContext` on the real sandbox (policy, local disk, tracker,
processes), an editor-buffer stand-in for ``ctx.files``, scripted terminals, and a schema check for every
update and content block a tool produces."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refagent.acp import updates
from refagent.sandbox.confine.confinement import Confinement, machine_support
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.disk.tracker import FileTracker
from refagent.sandbox.holding import Holding
from refagent.sandbox.local import Sandbox
from refagent.sandbox.seams import Level, OnStart, Search, WatchOutput
from refagent.sandbox.search.dispatch import LocalSearch
from refagent.tools.base import BaseTool, CommandResult, Disk, Plan, Terminals, TextFiles, ToolContext, ToolResult
from tests.support.acp_schema import validate_agent_message


def check_update(update: dict[str, Any]) -> None:
    """Validate one ``session/update`` payload against the official schema."""
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}
    validate_agent_message(message, None)


# Load the schema now, from the real disk: pyfakefs hides it from tests that fake the file system.
check_update(updates.plan([]))


@dataclass
class Updates:
    """``ctx.send_update``: records and schema-checks every update."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, update: dict[str, Any]) -> None:
        check_update(update)
        self.sent.append(update)


class EditorFiles:
    """The editor's buffers (``fs/read_text_file``): a dict that shadows the disk, as unsaved buffers do.

    Not the disk object, so tools take the whole-text path (no paged reads)."""

    def __init__(self, disk: Disk, buffers: dict[str, str] | None = None) -> None:
        self.disk = disk
        self.buffers = dict(buffers or {})
        self.writes: list[str] = []

    async def read_text(self, path: str) -> str:
        if path in self.buffers:
            return self.buffers[path]
        return await self.disk.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        self.writes.append(path)
        self.buffers[path] = content
        await self.disk.write_text(path, content)


class DirectPeer:
    """A peer that hands requests straight to a handler (no connection in between)."""

    def __init__(self, handler: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> None:
        self.handler = handler
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.sent.append((method, params))
        return await self.handler(method, params)


@dataclass
class ScriptedTerminals:
    """An editor's terminals without an editor: reports a terminal id, returns a scripted result."""

    result: CommandResult
    calls: list[tuple[str, str, float]] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: OnStart = None,
        *,
        sandbox: Level = "workspace",
        watch_output: WatchOutput = None,
    ) -> CommandResult:
        self.calls.append((command, cwd, time_limit))
        self.levels.append(sandbox)
        if on_start is not None:
            await on_start("term_1")
        return self.result


def confined_terminals(roots: Sequence[str]) -> LocalTerminals:
    """Local processes confined to ``roots`` as far as this machine can (as a session's are)."""
    return LocalTerminals(confinement=Confinement(roots, machine_support()))


def make_ctx(
    cwd: str,
    *,
    additional: Sequence[str] = (),
    files: TextFiles | None = None,
    terminals: Terminals | None = None,
    search: Search | None = None,
    holding: Holding | None = None,
    call_id: str = "call_1",
) -> ToolContext:
    """A tool context over the local disk; ``holding``: how far commands are held (default: as this machine
    holds the default terminals' commands)."""
    disk = LocalFileSystem()
    return ToolContext(
        session_id="s1",
        cwd=cwd,
        roots=[cwd, *additional],
        policy=RootPolicy(cwd, list(additional)),
        files=files if files is not None else disk,
        disk=disk,
        terminals=terminals if terminals is not None else confined_terminals([cwd, *additional]),
        holding=holding if holding is not None else machine_support().holding(),
        reads=FileTracker(),
        search=search if search is not None else LocalSearch(),
        send_update=Updates(),
        current_call_id=call_id,
    )


def sent(ctx: ToolContext) -> list[dict[str, Any]]:
    assert isinstance(ctx.send_update, Updates)
    return ctx.send_update.sent


def check_plan(plan: Plan, kind: str = "edit") -> None:
    """The plan's preview and locations are valid on the wire (as the runner sends them)."""
    check_update(updates.tool_call("call_1", plan.title, kind, locations=plan.locations, content=plan.preview))
    for loc in plan.locations:
        assert loc["path"].startswith("/")
        assert loc.get("line", 1) >= 1


def check_result(result: ToolResult) -> None:
    status = "failed" if result.failed else "completed"
    check_update(
        updates.tool_call_update(
            "call_1", status=status, content=result.content, locations=result.locations, raw_output=result.raw_output
        )
    )


async def call(tool: BaseTool, ctx: ToolContext, **args: Any) -> ToolResult:
    """prepare + execute, checking what goes on the wire."""
    plan = await tool.prepare(args, ctx)
    check_plan(plan, tool.kind)
    result = await plan.execute()
    check_result(result)
    return result


class Nothing:
    """Stands in for a sandbox piece a test's tools never touch: any use of it fails loudly."""


class NoFiles:
    """A disk with nothing on it, for a turn whose tools never touch the disk: the system prompt finds no
    ``AGENTS.md`` and no repository. Anything else a tool would do with it fails loudly."""

    async def read_start(self, path: str, max_bytes: int, *, within: Sequence[str] = ()) -> bytes | None:
        return None


def bare_sandbox(cwd: str, extra: list[str]) -> Sandbox:
    """A sandbox for fake tools: the roots' policy, an empty disk, and nothing else."""
    nothing: Any = Nothing()
    empty: Any = NoFiles()
    return Sandbox(policy=RootPolicy(cwd, extra), disk=empty, terminals=nothing, reads=nothing, search=nothing)
