"""Runs the model's tool calls and shows each one in the editor (ACP "Tool Calls").

Each call goes ``tool_call`` (``pending``: title, kind, ``rawInput``) -> ``tool_call_update`` with the plan
(locations for follow-along, the diff as preview) -> ``session/request_permission`` when the mode and
the user's earlier choices say so -> ``in_progress`` -> ``completed`` or ``failed`` with ``content`` and
``rawOutput``. Whatever goes wrong, the model gets a result it can act on and the editor sees the call
end; only cancellation propagates (after the call is marked ``failed``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from refagent.acp import updates
from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.ids import new_id
from refagent.llm.protocol import ToolCallRequest, ToolSpec
from refagent.permissions import Permissions
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult

log = logging.getLogger(__name__)

Request = Callable[[dict[str, Any]], Awaitable[Any]]


class ToolRunner:
    """The :class:`refagent.turn.ToolRunner` of a session."""

    def __init__(
        self,
        tools: Sequence[BaseTool] | Callable[[], Sequence[BaseTool]],
        context: ToolContext,
        permissions: Permissions,
        mode: Callable[[], str],
        request_permission: Request,
        cancel_turn: Callable[[], None],
        on_changed: Callable[[str], None] | None = None,
        before_change: Callable[[str, Plan], None] | None = None,
    ) -> None:
        """``on_changed(path)`` after a change (the watcher); ``before_change(kind, plan)`` just before a
        mutating plan runs (the session records what it will change, for ``/undo``)."""
        # A callable gives the current tools (MCP servers come and go, and change their lists).
        self._tools = tools if callable(tools) else (lambda: tools)
        self.tools = {tool.name: tool for tool in self._tools()}
        self.context = context
        self.permissions = permissions
        self.mode = mode
        self.request_permission = request_permission
        self.cancel_turn = cancel_turn
        self.on_changed = on_changed
        self.before_change = before_change

    def specs(self) -> list[ToolSpec]:
        # Once per model request: the calls of its response run against the tools it was offered.
        self.tools = {tool.name: tool for tool in self._tools()}
        return [ToolSpec(t.name, t.description, t.parameters) for t in self.tools.values()]

    async def run(self, call: ToolCallRequest) -> str:
        call_id = new_id("call")
        send = self.context.send_update
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.tools)
            return await self._reject(
                call_id, f"Unknown tool {call.name}", f"There is no tool named {call.name!r}. Available: {known}."
            )
        try:
            args = parse_arguments(call.arguments, tool.parameters)
        except ToolError as exc:
            return await self._reject(call_id, f"{call.name} (invalid arguments)", str(exc), call.arguments)

        announced = not tool.silent
        title = tool.title(args)
        if announced:
            await send(updates.tool_call(call_id, title, tool.kind, raw_input=args))
        try:
            context = dataclasses.replace(self.context, current_call_id=call_id)
            plan = await tool.prepare(args, context)
            if announced and (plan.locations or plan.preview or plan.title != title):
                await send(
                    updates.tool_call_update(
                        call_id, title=plan.title, locations=plan.locations or None, content=plan.preview or None
                    )
                )
            refusal = await self._permit(call_id, tool, args, plan)
            if refusal is not None:
                await self._finish(announced, call_id, ToolResult(refusal, failed=True))
                return f"Not run: {refusal}"
            if announced:
                await send(updates.tool_call_update(call_id, status="in_progress"))
            if plan.mutating and self.before_change is not None:
                self.before_change(plan.kind or tool.kind, plan)  # before the change: the way back survives a crash
            try:
                result = await plan.execute()
            finally:
                if plan.mutating:
                    self._changed(plan)
        except ToolError as exc:
            await self._finish(announced, call_id, ToolResult(f"Error: {exc}", failed=True))
            return f"Error: {exc}"
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self._finish(announced, call_id, ToolResult("Cancelled.", failed=True))
            raise
        except Exception as exc:  # a bug in a tool must not end the turn, let alone the agent
            log.exception("tool %s failed", call.name)
            message = f"Internal error in {call.name}: {type(exc).__name__}: {exc}"
            await self._finish(announced, call_id, ToolResult(message, failed=True))
            return message
        await self._finish(announced, call_id, result)
        return result.output

    def _changed(self, plan: Plan) -> None:
        """Tell the watcher which paths this call changed, so they are not reported back as someone else's."""
        if self.on_changed is None:
            return
        paths = {loc["path"] for loc in plan.locations}
        paths |= {c["path"] for c in plan.preview if c["type"] == "diff"}
        for path in sorted(paths):
            self.on_changed(path)

    async def _permit(self, call_id: str, tool: BaseTool, args: dict[str, Any], plan: Plan) -> str | None:
        """None if the call may run, else the reason it may not (for the model)."""
        kind = plan.kind or tool.kind
        decision, reason = self.permissions.decide(self.mode(), kind, plan)
        if decision == "allow":
            return None
        if decision == "refuse":
            return reason
        title = plan.title + (" (outside the workspace)" if plan.outside and not plan.mutating else "")
        tool_call: dict[str, Any] = {
            "toolCallId": call_id,
            "title": title,
            "kind": kind,
            "status": "pending",
            "rawInput": args,
        }
        if plan.preview:
            tool_call["content"] = plan.preview
        if plan.locations:
            tool_call["locations"] = plan.locations
        params = {
            "sessionId": self.context.session_id,
            "toolCall": tool_call,
            "options": self.permissions.options(plan),
        }
        verdict = await self.permissions.ask(self.request_permission, params, plan)
        if verdict.cancelled:
            self.cancel_turn()
            await anyio.lowlevel.checkpoint()  # the turn's scope is cancelled now: this raises
        return None if verdict.allowed else verdict.reason

    async def _finish(self, announced: bool, call_id: str, result: ToolResult) -> None:
        if not announced:
            return
        content: list[ToolCallContent] = list(result.content)
        if not content and result.output:
            content = [{"type": "content", "content": updates.text(result.output)}]
        await self.context.send_update(
            updates.tool_call_update(
                call_id,
                status="failed" if result.failed else "completed",
                content=content,
                locations=result.locations,
                raw_output=result.raw_output if result.raw_output is not None else {"output": result.output},
            )
        )

    async def _reject(self, call_id: str, title: str, message: str, raw: str | None = None) -> str:
        """A call that cannot even start: show it as failed, and tell the model why."""
        send = self.context.send_update
        await send(
            updates.tool_call(call_id, title, "other", status="failed", raw_input={"arguments": raw} if raw else None)
        )
        await send(updates.tool_call_update(call_id, content=[{"type": "content", "content": updates.text(message)}]))
        return f"Error: {message}"


def parse_arguments(raw: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Decode the model's arguments and check them against the tool's schema (top-level properties:
    required, types, enums, no unknown names). Raises ToolError with a message the model can act on."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise ToolError(
            f"The arguments are not valid JSON ({exc}). Send a JSON object matching the tool's schema."
        ) from None
    if not isinstance(args, dict):
        raise ToolError("The arguments must be a JSON object.")
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in args]
    if missing:
        raise ToolError(f"Missing required argument(s): {', '.join(missing)}.")
    if schema.get("additionalProperties") is False:
        unknown = [name for name in args if name not in properties]
        if unknown:
            raise ToolError(f"Unknown argument(s): {', '.join(unknown)}. Known: {', '.join(properties)}.")
    for name, value in args.items():
        spec = properties.get(name)
        if spec is None:
            continue
        problem = _type_problem(value, spec)
        if problem:
            raise ToolError(f"Argument {name!r} {problem}.")
    return args


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_problem(value: Any, spec: dict[str, Any]) -> str:
    expected = spec.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        ok = any(
            isinstance(value, _JSON_TYPES.get(n, (object,)))
            and not (n in ("integer", "number") and isinstance(value, bool))
            for n in names
        )
        if not ok:
            return f"must be of type {' or '.join(names)}, got {type(value).__name__}"
    if "enum" in spec and value not in spec["enum"]:
        return f"must be one of {', '.join(map(repr, spec['enum']))}"
    return ""
