"""A session's plans as its client is shown them (:class:`Plans`), and the plan entries the model may send
(:func:`validate_entries`). The tool that fills them is :mod:`refagent.tools.plan`'s ``update_plan``.

A model keeps several plans apart by id (:data:`~refagent.acp.updates.DEFAULT_PLAN` when it names none),
each replaced whole by its next update, and removes one that is finished or replaced by sending it empty.
What the client sees depends on what it advertised:

- with ``clientCapabilities.plan`` (unstable), each plan by its id: ``plan_update`` with its entries, and
  ``plan_removed`` when it is emptied, or when a new turn begins and every step of it is completed (done);
- otherwise the whole v1 ``plan``, as always: the entries of the plans of the moment, one plan after the
  other (with one plan, exactly the list the model sent). A done plan then leaves the list silently when a
  new turn begins: what the client shows stays until the next update replaces it.

A load replays the plans recorded in the form the loading client takes
(:func:`refagent.persistence.replays.plans_for`), and the session's board starts from them
(:meth:`Plans.restore`). Each entry is one line with its control characters made visible
(:func:`~refagent.acp.text.one_line`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from refagent.acp import updates
from refagent.acp.text import one_line
from refagent.acp.types import PlanEntry, PlanEntryPriority, PlanEntryStatus
from refagent.acp.updates import DEFAULT_PLAN
from refagent.errors import ToolError

STATUSES: tuple[PlanEntryStatus, ...] = ("pending", "in_progress", "completed")
PRIORITIES: tuple[PlanEntryPriority, ...] = ("high", "medium", "low")
MAX_ENTRIES = 50
MAX_CONTENT_CHARS = 500
MAX_PLANS = 8
"""Plans kept at once in one session: more is a model gone astray, told to remove one."""
_PLAN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_plan_id(value: Any) -> str:
    """``value`` as a plan id; ToolError unless it is one."""
    if not isinstance(value, str) or not _PLAN_ID.match(value):
        raise ToolError("plan_id must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit")
    return value


class Plans:
    """A session's plans by id, in the order they began, and how its client is shown them (see the module
    docstring): by id when ``by_id`` (the client advertised ``plan``), else as the one whole v1 ``plan``.
    Updates go out through ``send_update`` (the session's: sent and recorded)."""

    def __init__(self, send_update: Callable[[dict[str, Any]], Awaitable[None]], by_id: bool) -> None:
        self.send_update = send_update
        self.by_id = by_id
        self._plans: dict[str, list[PlanEntry]] = {}

    @property
    def plans(self) -> dict[str, list[PlanEntry]]:
        """The plans of the moment, by id (a copy)."""
        return dict(self._plans)

    def check(self, plan_id: str, entries: list[PlanEntry]) -> None:
        """ToolError if ``plan_id`` would be one plan too many."""
        if entries and plan_id not in self._plans and len(self._plans) >= MAX_PLANS:
            raise ToolError(
                f"At most {MAX_PLANS} plans at once ({', '.join(self._plans)}): remove one that is done or "
                "replaced by sending it with no entries, or update one of them."
            )

    async def show(self, plan_id: str, entries: list[PlanEntry]) -> None:
        """Plan ``plan_id`` is now ``entries`` (none: removed), and the client is shown so."""
        known = plan_id in self._plans
        if entries:
            self._plans[plan_id] = entries
        else:
            self._plans.pop(plan_id, None)
        if not self.by_id:
            await self.send_update(updates.plan(self._whole()))
        elif entries:
            await self.send_update(updates.plan_update(plan_id, entries))
        elif known:  # removing a plan the client never saw: nothing to say
            await self.send_update(updates.plan_removed(plan_id))

    async def retire_done(self) -> None:
        """A new turn begins: the plans whose every step is completed are done, and leave (said with
        ``plan_removed`` to a client that takes plans by id; silently otherwise)."""
        done = [i for i, entries in self._plans.items() if all(e["status"] == "completed" for e in entries)]
        for plan_id in done:
            del self._plans[plan_id]
            if self.by_id:
                await self.send_update(updates.plan_removed(plan_id))

    def restore(self, recorded: Iterable[dict[str, Any]]) -> None:
        """Start from the plan updates a loaded session recorded, in order, in either form (a whole v1
        ``plan`` is the plan :data:`DEFAULT_PLAN`). What is not a plan this agent would send is skipped."""
        for update in recorded:
            kind = update.get("sessionUpdate")
            if kind == "plan_removed" and isinstance(update.get("planId"), str):
                self._plans.pop(update["planId"], None)
                continue
            plan = update.get("plan") if kind == "plan_update" else update if kind == "plan" else None
            plan_id = DEFAULT_PLAN if kind == "plan" else plan.get("planId") if isinstance(plan, dict) else None
            if not isinstance(plan, dict) or not isinstance(plan_id, str) or not _PLAN_ID.match(plan_id):
                continue  # as a load reads it from disk: anything can be odd
            try:
                entries = validate_entries(plan.get("entries"))
            except ToolError:
                continue
            if kind == "plan":
                self._plans.clear()
            if entries:
                self._plans[plan_id] = entries
            else:
                self._plans.pop(plan_id, None)

    def _whole(self) -> list[PlanEntry]:
        return [entry for entries in self._plans.values() for entry in entries]


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
