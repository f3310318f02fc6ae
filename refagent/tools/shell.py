"""``run_command``: a shell command in the editor's terminal or a local process (``ctx.terminals``),
confined at the level the model asks for (``sandbox``: ``workspace`` by default, ``network``, ``none``;
:mod:`refagent.confine.confinement`).

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

import re
from typing import Any, ClassVar

from refagent.acp import updates
from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.seams import LEVELS, Level
from refagent.tools.args import arg_int, arg_str, shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.command_scope import permission_scope
from refagent.tools.text import text_content

DEFAULT_TIMEOUT = 120
MAX_TIMEOUT = 600
MAX_OUTPUT_CHARS = 30_000
"""What the model reads of the output: the head and the tail, the middle elided."""

LEVEL_WORDS: dict[Level, str] = {
    "workspace": "writes only inside the workspace and a private /tmp, no network, no other processes",
    "network": "writes only inside the workspace and a private /tmp, with network access",
    "none": "unconfined: your full access to files, network and processes",
}
LEVEL_TAGS: dict[str, str] = {"network": "network access", "none": "unconfined"}
"""What a title says of a level above ``workspace``."""


def _tag(*words: str) -> str:
    """`` (a; b)`` for the words given, ``""`` for none."""
    present = [word for word in words if word]
    return f" ({'; '.join(present)})" if present else ""


class RunCommand(BaseTool):
    name = "run_command"
    description = (
        "Run a shell command (`sh -c`) in the workspace; returns its output (long output cut in the middle) "
        "and exit code. No stdin; killed after `timeout_seconds`. Use it for tests, builds and git; prefer "
        "read_file, grep and glob to read and search. `sandbox`: `workspace` (the default) may write only "
        "inside the workspace and its private /tmp, has no network (not even localhost) and sees no other "
        "process. Ask for `network` only when the command needs it (installing packages, downloads, local "
        "servers), for `none` only to write outside the workspace; then give a short `reason` for the user."
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
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    kind = "execute"

    def title(self, args: dict[str, Any]) -> str:
        level = args.get("sandbox")
        tag = _tag(LEVEL_TAGS.get(level, "")) if isinstance(level, str) else ""
        return f"Run `{shown(args.get('command', ''), 80)}`{tag}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        command = arg_str(args, "command", kind="name")
        if not command.strip():
            raise ToolError("The command is empty.")
        timeout = arg_int(args, "timeout_seconds", DEFAULT_TIMEOUT, minimum=1, maximum=MAX_TIMEOUT)
        level = _level(args)
        reason = (arg_str(args, "reason", required=False, empty=True) or "").strip()
        resolved = ctx.policy.resolve(arg_str(args, "cwd", required=False, kind="name") or ".")
        if not resolved.inside:
            raise ToolError(f"Commands run inside the workspace; {resolved.display} is outside it.")
        if await ctx.disk.kind(resolved.path) != "dir":
            raise ToolError(f"cwd {resolved.display} is not a directory.")
        missing = ctx.terminals.not_confined(level)
        key, label = permission_scope(command)
        if level != "workspace":
            key = key.replace(":", f"@{level}:", 1)
            label += _tag(LEVEL_TAGS[level])
        where = f" in {resolved.display}" if resolved.display not in ("", ".") else ""
        tag = _tag(LEVEL_TAGS.get(level, ""), "not sandboxed here" if missing else "")
        title = f"Run `{shown(command, 80)}`{where}{tag}"
        # The permission request shows exactly what will run, where, and how confined.
        sandbox = f"Sandbox: {level}: {LEVEL_WORDS[level]}."
        if missing:
            sandbox += " This machine cannot confine it from " + ", ".join(missing) + "."
        if reason:
            sandbox += f"\nReason: {shown(reason, 300)}"
        details = f"{_fenced(command, 'sh')}\nWorking directory: {resolved.path}\n{sandbox}"
        preview: list[ToolCallContent] = [text_content(details)]

        async def execute() -> ToolResult:
            return await _run(ctx, command, resolved.path, timeout, level)

        return Plan(
            title=title,
            execute=execute,
            preview=preview,
            mutating=True,
            confined=level == "workspace" and not missing,
            permission_key=key,
            permission_label=label,
        )


def _level(args: dict[str, Any]) -> Level:
    value = args.get("sandbox", "workspace")
    if value is None:
        return "workspace"
    for level in LEVELS:
        if value == level:
            return level
    raise ToolError(f"`sandbox` must be one of {', '.join(LEVELS)}; got {value!r}.")


async def _run(ctx: ToolContext, command: str, cwd: str, seconds: int, level: Level) -> ToolResult:
    call_id = ctx.current_call_id
    terminals: list[str] = []

    async def on_start(terminal_id: str) -> None:
        terminals.append(terminal_id)
        if call_id:
            embedded: list[ToolCallContent] = [{"type": "terminal", "terminalId": terminal_id}]
            await ctx.send_update(updates.tool_call_update(call_id, content=embedded))

    result = await ctx.terminals.run(command, cwd, float(seconds), on_start=on_start, sandbox=level)
    output = result.output
    if len(output) > MAX_OUTPUT_CHARS:
        half = MAX_OUTPUT_CHARS // 2
        omitted = len(output) - 2 * half
        output = f"{output[:half]}\n[... {omitted} characters omitted ...]\n{output[-half:]}"
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
        content = [text_content(_fenced(output.rstrip("\n"), "") + f"\n\n{status}{notes}")]
    raw = {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "output": output,
    }
    return ToolResult(text, content=content, raw_output=raw, failed=failed)


def _fenced(text: str, language: str) -> str:
    """A Markdown code block whose fence is longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"
