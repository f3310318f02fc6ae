"""``command_output`` and ``stop_command``: the model's hold on the commands it started with
``run_command`` and ``background: true`` (:mod:`refagent.tools.jobs`).

Neither changes anything the user has: they read or stop a command the model itself started, so neither
asks permission, in any mode.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from refagent.errors import ToolError
from refagent.tools.args import arg_int, arg_str, shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.jobs import BackgroundJobs, Entry
from refagent.tools.shell import capped
from refagent.tools.text import fenced, text_content

MAX_WAIT = 600


def _jobs(ctx: ToolContext) -> BackgroundJobs:
    if ctx.jobs is None:
        raise ToolError("There are no background commands in this session.")
    return ctx.jobs


class CommandOutput(BaseTool):
    name = "command_output"
    description = (
        "Read what a background command (run_command with background: true) printed since you last read it, "
        "and whether it still runs. `wait_seconds` waits up to that long for it to end first (it answers as "
        "soon as it ends). Without `job_id`, lists the background commands."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The id run_command gave, e.g. `job-1`."},
            "wait_seconds": {
                "type": "integer",
                "description": f"Wait up to this long for the command to end (default 0, at most {MAX_WAIT}).",
            },
        },
        "required": [],
        "additionalProperties": False,
    }
    kind = "read"

    def title(self, args: dict[str, Any]) -> str:
        job_id = args.get("job_id")
        return f"Output of {job_id}" if isinstance(job_id, str) and job_id else "Background commands"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        jobs = _jobs(ctx)
        job_id = arg_str(args, "job_id", required=False, kind="name")
        wait = arg_int(args, "wait_seconds", 0, minimum=0, maximum=MAX_WAIT)
        if not job_id:
            return Plan(title="Background commands", execute=lambda: _listing(jobs))
        entry = jobs.get(job_id)

        async def execute() -> ToolResult:
            if wait and entry.running:
                with anyio.move_on_after(wait):
                    await entry.job.wait()
            return await _read(entry)

        return Plan(title=f"Output of {entry.id} (`{shown(entry.command, 80)}`)", execute=execute)


async def _listing(jobs: BackgroundJobs) -> ToolResult:
    entries = jobs.entries()
    if not entries:
        return ToolResult("No background commands have been started in this session.")
    lines = [f"{entry.id} (`{shown(entry.command, 200)}`): {entry.state()}" for entry in entries]
    return ToolResult("\n".join(lines))


async def _read(entry: Entry) -> ToolResult:
    new = (await entry.job.new_output()).rstrip("\n")
    if not entry.running:
        entry.told = True  # it hears the end here
    state = f"{entry.id} (`{shown(entry.command, 200)}`): {entry.state()}."
    body = capped(new) if new.strip() else "(no new output)"
    return ToolResult(f"{state}\n\n{body}", content=[text_content(f"{state}\n\n{fenced(capped(new))}")])


class StopCommand(BaseTool):
    name = "stop_command"
    description = (
        "Stop a background command you started (run_command with background: true): it and everything it "
        "started are killed. Returns what it printed since you last read it."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"job_id": {"type": "string", "description": "The id run_command gave, e.g. `job-1`."}},
        "required": ["job_id"],
        "additionalProperties": False,
    }
    kind = "execute"

    def title(self, args: dict[str, Any]) -> str:
        return f"Stop {args.get('job_id', '')}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        jobs = _jobs(ctx)
        entry = jobs.get(arg_str(args, "job_id", kind="name"))

        async def execute() -> ToolResult:
            await jobs.stop(entry, "model")
            return await _read(entry)

        return Plan(title=f"Stop {entry.id} (`{shown(entry.command, 80)}`)", execute=execute)
