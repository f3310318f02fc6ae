"""``run_command``: a shell command in the editor's terminal or a local process (``ctx.terminals``),
confined at the level the model asks for (``sandbox``: ``workspace`` by default, ``network``, ``none``;
:mod:`refagent.sandbox.confine.confinement`).

The user sees the level: the title names any level above ``workspace`` ("Run `npm install` (network
access)"), the preview says what the sandbox holds and why the model asked for more, and a command this
machine cannot confine as promised says so. ``workspace`` commands that are fully confined are marked
``confined``, which the ``auto`` mode runs without asking. "Always allow" is remembered per level: a
remembered ``workspace`` command does not allow the same command with ``none``.

With an editor terminal, the call embeds it (``{type: "terminal", terminalId}``) as soon as it exists, so
the user watches the output live; the runner gives each call its ``ctx.current_call_id`` for that.

"Always allow" for a command remembers what :mod:`refagent.tools.command_scope` says, per level.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

from refagent.acp import updates
from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.sandbox.seams import LEVELS, Level, WatchOutput
from refagent.tools.args import arg_bool, arg_int, arg_str, shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.command_scope import permission_scope
from refagent.tools.grounds import command_grounds
from refagent.tools.text import fenced, text_content

DEFAULT_TIMEOUT = 120
MAX_TIMEOUT = 600
MAX_BACKGROUND_TIMEOUT = 24 * 3600
"""A background command has no time limit unless it is given one, of at most a day."""
MAX_OUTPUT_CHARS = 30_000
PROGRESS_CHARS = 4000
"""What a running command's tool call shows of its output so far: its last characters."""
"""What the model reads of the output: the head and the tail, the middle elided."""

LEVEL_WORDS: dict[Level, str] = {
    "workspace": "writes only inside the workspace and a private /tmp, no network, no other processes",
    "network": "writes only inside the workspace and a private /tmp, with network access",
    "none": "unconfined: your full access to files, network and processes",
}
LEVEL_TAGS: dict[str, str] = {"network": "network access", "none": "unconfined"}
"""What a title says of a level above ``workspace``."""
BACKGROUND = "in the background"


def _tag(*words: str) -> str:
    """`` (a; b)`` for the words given, ``""`` for none."""
    present = [word for word in words if word]
    return f" ({'; '.join(present)})" if present else ""


class RunCommand(BaseTool):
    name = "run_command"
    description = (
        "Run a shell command (`sh -c`) in the workspace; returns its output (long output cut in the middle) "
        "and exit code. No stdin; killed after `timeout_seconds`. Use it for tests, builds and git; prefer "
        "read_file, grep and glob to read and search. `sandbox`: `workspace` (the default) writes only in the "
        "workspace and its private /tmp, sees no other process, and has no network but a loopback of its own. "
        "Ask for `network` only when the command needs it (installs, downloads, a server others must reach), "
        "for `none` only to write outside the workspace, with a short `reason` for the user. `background`: "
        "for servers, watchers and long builds."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, e.g. `pytest -q tests/test_app.py`."},
            "timeout_seconds": {
                "type": "integer",
                "description": f"Kill it after this many seconds (default {DEFAULT_TIMEOUT}, at most {MAX_TIMEOUT}).",
            },
            "cwd": {
                "type": "string",
                "description": "Directory to run in, inside the workspace (default: the working directory).",
            },
            "sandbox": {
                "type": "string",
                "enum": list(LEVELS),
                "description": "How the command is confined (default `workspace`; see above).",
            },
            "reason": {
                "type": "string",
                "description": "Why the command needs `network` or `none`, in a few words for the user.",
            },
            "background": {
                "type": "boolean",
                "description": (
                    "Start it in the background and answer at once with its job id (default false): read its "
                    "output with command_output, stop it with stop_command. It runs until it ends, is stopped "
                    "or the session ends; no time limit unless `timeout_seconds` is given (up to a day)."
                ),
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    kind = "execute"

    def title(self, args: dict[str, Any]) -> str:
        level = args.get("sandbox")
        level_tag = LEVEL_TAGS.get(level, "") if isinstance(level, str) else ""
        background_tag = BACKGROUND if args.get("background") is True else ""
        return f"Run `{shown(args.get('command', ''), 80)}`{_tag(level_tag, background_tag)}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        command = arg_str(args, "command", kind="name")
        if not command.strip():
            raise ToolError("The command is empty.")
        background = arg_bool(args, "background")
        limit: int | None
        if background:
            limit = arg_int(args, "timeout_seconds", 0, minimum=1, maximum=MAX_BACKGROUND_TIMEOUT) or None
        else:
            limit = arg_int(args, "timeout_seconds", DEFAULT_TIMEOUT, minimum=1, maximum=MAX_TIMEOUT)
        level = _level(args)
        reason = (arg_str(args, "reason", required=False, empty=True) or "").strip()
        resolved = ctx.policy.resolve(arg_str(args, "cwd", required=False, kind="name") or ".")
        if not resolved.inside:
            raise ToolError(f"Commands run inside the workspace; {resolved.display} is outside it.")
        if await ctx.disk.kind(resolved.path) != "dir":
            raise ToolError(f"cwd {resolved.display} is not a directory.")
        missing = ctx.holding.missing(level)
        key, label = permission_scope(command)
        if level != "workspace":
            key = key.replace(":", f"@{level}:", 1)
            label += _tag(LEVEL_TAGS[level])
        where = f" in {resolved.display}" if resolved.display not in ("", ".") else ""
        tag = _tag(LEVEL_TAGS.get(level, ""), BACKGROUND if background else "", "not sandboxed here" if missing else "")
        title = f"Run `{shown(command, 80)}`{where}{tag}"
        # The permission request shows exactly what will run, where, and how confined.
        sandbox = f"Sandbox: {level}: {LEVEL_WORDS[level]}."
        if missing:
            sandbox += " This machine cannot confine it from " + ", ".join(missing) + "."
        if reason:
            sandbox += f"\nReason: {shown(reason, 300)}"
        details = f"{fenced(command, 'sh')}\nWorking directory: {resolved.path}\n{sandbox}"
        if background:
            ends = f"after {limit} s, " if limit else ""
            details += f"\nIn the background: it runs until it ends, is stopped, {ends}or the session ends."
        preview: list[ToolCallContent] = [text_content(details)]

        so_far = OutputSoFar()

        async def execute() -> ToolResult:
            if background:
                return await _start(ctx, command, resolved.path, limit, level)
            assert limit is not None
            return await _run(ctx, command, resolved.path, limit, level, so_far.watch)

        confined = level == "workspace" and ctx.holding.confines(level)
        return Plan(
            title=title,
            execute=execute,
            preview=preview,
            mutating=True,
            confined=confined,
            permission_key=key,
            permission_label=label,
            progress=so_far.content,
            # Confined, whatever it runs is held; with more, "always allow" holds for what the user saw.
            grounds=() if confined else command_grounds(command, resolved.path, os.environ.get("PATH", "")),
        )


def capped(output: str) -> str:
    """A command's output as the model reads it: whole up to :data:`MAX_OUTPUT_CHARS`, else its head and
    tail around a marker."""
    if len(output) <= MAX_OUTPUT_CHARS:
        return output
    half = MAX_OUTPUT_CHARS // 2
    return f"{output[:half]}\n[... {len(output) - 2 * half} characters omitted ...]\n{output[-half:]}"


def _level(args: dict[str, Any]) -> Level:
    value = args.get("sandbox", "workspace")
    if value is None:
        return "workspace"
    for level in LEVELS:
        if value == level:
            return level
    raise ToolError(f"`sandbox` must be one of {', '.join(LEVELS)}; got {value!r}.")


async def _start(ctx: ToolContext, command: str, cwd: str, seconds: int | None, level: Level) -> ToolResult:
    """Start ``command`` in the background (:mod:`refagent.tools.jobs`): the model gets its job id at once,
    the call stays ``in_progress`` while it runs."""
    if ctx.jobs is None:
        raise ToolError("Background commands cannot be started here; run the command without `background`.")
    entry = await ctx.jobs.start(
        ctx.terminals, command, cwd, level=level, time_limit=seconds, call_id=ctx.current_call_id
    )
    text = (
        f"Started in the background as {entry.id}. Read what it prints with command_output (job_id "
        f"{entry.id!r}; wait_seconds to wait for more), stop it with stop_command. You will hear when it ends."
    )
    content: list[ToolCallContent]
    if entry.job.terminal_id is not None:
        content = [{"type": "terminal", "terminalId": entry.job.terminal_id}]
    else:
        content = [text_content(f"Running in the background as {entry.id}.")]
    return ToolResult(text, content=content, raw_output={"job": entry.id}, running=True)


class OutputSoFar:
    """A running command's output so far, for the tool call while it runs: the local process's own (an
    editor's terminal shows itself, embedded in the call). The last :data:`PROGRESS_CHARS` characters."""

    def __init__(self) -> None:
        self._read: Callable[[], str] | None = None

    def watch(self, read: Callable[[], str]) -> None:
        self._read = read

    def content(self) -> list[ToolCallContent]:
        text = self._read() if self._read is not None else ""
        if not text.strip():
            return []
        shown = text if len(text) <= PROGRESS_CHARS else "…" + text[-PROGRESS_CHARS:]
        return [text_content(fenced(shown.rstrip("\n"), "") + "\n\n(running)")]


async def _run(
    ctx: ToolContext, command: str, cwd: str, seconds: int, level: Level, watch_output: WatchOutput = None
) -> ToolResult:
    call_id = ctx.current_call_id
    terminals: list[str] = []

    async def on_start(terminal_id: str) -> None:
        terminals.append(terminal_id)
        if call_id:
            embedded: list[ToolCallContent] = [{"type": "terminal", "terminalId": terminal_id}]
            await ctx.send_update(updates.tool_call_update(call_id, content=embedded))

    result = await ctx.terminals.run(
        command, cwd, float(seconds), on_start=on_start, sandbox=level, watch_output=watch_output
    )
    output = result.output
    output = capped(output)
    if result.timed_out:
        status = f"Timed out after {seconds} s; the command was killed."
    elif result.signal:
        status = f"Killed by signal {result.signal}."
    elif result.exit_code is None:
        status = "Exit status unknown."
    else:
        status = f"Exit code: {result.exit_code}"
    notes = " (the output was truncated by the terminal)" if result.truncated else ""
    text = (output.rstrip("\n") if output.strip() else "(no output)") + f"\n\n{status}{notes}"
    failed = result.timed_out or result.signal is not None or result.exit_code != 0
    content: list[ToolCallContent]
    if terminals and call_id:
        content = [{"type": "terminal", "terminalId": terminals[-1]}]
    else:
        content = [text_content(fenced(output.rstrip("\n"), "") + f"\n\n{status}{notes}")]
    raw = {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "output": output,
    }
    return ToolResult(text, content=content, raw_output=raw, failed=failed)
