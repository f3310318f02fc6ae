"""``update_plan``: the model's task list, shown by the editor as an ACP ``plan`` (``session/update``).

The model sends the complete list every time; the editor replaces its plan with it (ACP "Agent Plan").
The call itself is silent (no ``tool_call`` on the wire): the plan is what the user sees, each entry one
line with its control characters made visible (:func:`~refagent.acp.text.one_line`).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from refagent.acp import updates
from refagent.acp.text import one_line
from refagent.acp.types import PlanEntry, PlanEntryPriority, PlanEntryStatus
from refagent.errors import ToolError
from refagent.tools.args import plural
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult

STATUSES: tuple[PlanEntryStatus, ...] = ("pending", "in_progress", "completed")
PRIORITIES: tuple[PlanEntryPriority, ...] = ("high", "medium", "low")
MAX_ENTRIES = 50
MAX_CONTENT_CHARS = 500


class UpdatePlan(BaseTool):
    name = "update_plan"
    description = (
        "Show your plan for the task to the user as a checklist. Send the complete list every time (it "
        "replaces the previous one), each step with a status (pending, in_progress, completed) and a "
        "priority (high, medium, low). Keep one step in_progress while you work on it; mark steps completed "
        "as soon as they are done."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "description": "All steps of the plan, in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "What the step does, in a short sentence."},
                        "status": {"type": "string", "enum": list(STATUSES)},
                        "priority": {"type": "string", "enum": list(PRIORITIES)},
                    },
                    "required": ["content", "status", "priority"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["entries"],
        "additionalProperties": False,
    }
    kind = "think"
    silent = True

    def title(self, args: dict[str, Any]) -> str:
        return "Update plan"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        entries = validate_entries(args.get("entries"))

        async def execute() -> ToolResult:
            await ctx.send_update(updates.plan(entries))
            counts = {status: sum(e["status"] == status for e in entries) for status in STATUSES}
            summary = (
                f"Plan updated: {plural(len(entries), 'step')} ({counts['completed']} completed, "
                f"{counts['in_progress']} in progress, {counts['pending']} pending)."
            )
            return ToolResult(summary, raw_output={"entries": entries})

        return Plan(title="Update plan", execute=execute)


def validate_entries(value: Any) -> list[PlanEntry]:
    """The entries as wire ``PlanEntry`` dicts; ToolError naming the first problem."""
    if not isinstance(value, list):
        raise ToolError("entries must be a list of {content, status, priority} objects.")
    if len(value) > MAX_ENTRIES:
        raise ToolError(f"A plan has at most {MAX_ENTRIES} entries; merge steps ({len(value)} given).")
    entries: list[PlanEntry] = []
    for index, entry in enumerate(value):
        where = f"entries[{index}]"
        if not isinstance(entry, dict):
            raise ToolError(f"{where} must be an object with content, status and priority.")
        unknown = sorted(set(entry) - {"content", "status", "priority"})
        if unknown:
            raise ToolError(f"{where} has unknown field(s): {', '.join(unknown)}. Use content, status, priority.")
        content = entry.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ToolError(f"{where}.content must be a non-empty string.")
        if len(content) > MAX_CONTENT_CHARS:
            raise ToolError(f"{where}.content is longer than {MAX_CONTENT_CHARS} characters; keep steps short.")
        status = entry.get("status")
        if status not in STATUSES:
            raise ToolError(f"{where}.status must be one of {', '.join(STATUSES)}, got {status!r}.")
        priority = entry.get("priority")
        if priority not in PRIORITIES:
            raise ToolError(f"{where}.priority must be one of {', '.join(PRIORITIES)}, got {priority!r}.")
        entries.append(
            {
                "content": one_line(content),  # shown by the editor as it reads
                "status": cast(PlanEntryStatus, status),
                "priority": cast(PlanEntryPriority, priority),
            }
        )
    return entries
