"""``update_plan``: the model's task lists, shown by the editor (``session/update``) through the session's
plans (:class:`refagent.tools.plans.Plans`: by id to a client that advertises ``plan``, else as the one
whole v1 ``plan``).

The model sends a plan's complete list every time; the editor replaces that plan with it (ACP "Agent Plan").
It may keep several plans apart by ``plan_id``, and removes one by sending it empty. The call itself is
silent (no ``tool_call`` on the wire): the plan is what the user sees.
"""

from __future__ import annotations

from typing import Any, ClassVar

from refagent.acp import updates
from refagent.acp.updates import DEFAULT_PLAN
from refagent.tools.args import plural
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.plans import PRIORITIES, STATUSES, valid_plan_id, validate_entries

__all__ = ["UpdatePlan", "validate_entries"]


class UpdatePlan(BaseTool):
    name = "update_plan"
    description = (
        "Show your plan for the task to the user as a checklist. Send the complete list every time (it "
        "replaces the previous one), each step with a status (pending, in_progress, completed) and a "
        "priority (high, medium, low). Keep one step in_progress while you work on it; mark steps completed "
        "as soon as they are done. For separate pieces of work, keep separate plans with their own plan_id; "
        "send a plan with no entries to remove it when it is replaced or no longer wanted."
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
            "plan_id": {
                "type": "string",
                "description": f"Which plan this is (letters, digits, '_', '.', '-'); default {DEFAULT_PLAN!r}.",
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
        plan_id = valid_plan_id(args.get("plan_id", DEFAULT_PLAN))
        plans = ctx.plans
        if plans is not None:
            plans.check(plan_id, entries)

        async def execute() -> ToolResult:
            if plans is not None:
                await plans.show(plan_id, entries)
            else:  # no board (a context of its own): the one plan, whole
                await ctx.send_update(updates.plan(entries))
            counts = {status: sum(e["status"] == status for e in entries) for status in STATUSES}
            named = "Plan" if plan_id == DEFAULT_PLAN else f"Plan {plan_id!r}"
            if not entries:
                return ToolResult(f"{named} removed.", raw_output={"planId": plan_id, "entries": []})
            summary = (
                f"{named} updated: {plural(len(entries), 'step')} ({counts['completed']} completed, "
                f"{counts['in_progress']} in progress, {counts['pending']} pending)."
            )
            return ToolResult(summary, raw_output={"planId": plan_id, "entries": entries})

        return Plan(title="Update plan", execute=execute)
