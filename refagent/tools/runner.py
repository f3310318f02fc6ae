"""Runs the model's tool calls and shows each one in the editor (ACP "Tool Calls").

Each call goes ``tool_call`` (``pending``: title, kind, ``rawInput``) -> ``tool_call_update`` with the plan
(locations for follow-along, the diff as preview) -> ``session/request_permission`` when the mode and
the user's earlier choices say so -> ``in_progress`` -> ``completed`` or ``failed`` with ``content`` and
``rawOutput``. Whatever goes wrong, the model gets a result it can act on and the editor sees the call
end; only cancellation propagates (after the call is marked ``failed``).

What a call shows is bounded here, for every tool at once, so that one huge argument (a 20 MB
``write_file``) cannot become a 40 MB notification, permission request and replay line: the content of
one message (diffs, text, images) is at most :data:`MAX_CONTENT_BYTES` as JSON, in order, and what does
not fit is summarised (a diff as a line that gives its size, text cut with a marker); ``rawInput`` and
``rawOutput`` are at most :data:`MAX_RAW_BYTES` each (long strings cut with a marker saying how much was
left out). The tool itself gets its arguments whole, the change is made whole, and the session's
``before_change`` hook (``/undo``) gets the whole plan. The model's result is cut (head and tail) only past
:data:`MAX_RESULT_CHARS`, a net for tools that do not cap their output themselves.

Every title a call shows is one line, its control characters made visible
(:func:`~refagent.acp.text.one_line`), whatever the tool built it from (a model's command, a file name,
an MCP server's tool name): an editor, or a terminal client, shows it as it reads.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio

from refagent.acp import updates
from refagent.acp.awaited import Awaited, watching
from refagent.acp.text import cut, json_size, one_line, shorten, text_length
from refagent.acp.types import ToolCallContent, ToolCallStatus
from refagent.errors import ToolError
from refagent.heartbeat import heartbeat
from refagent.ids import new_id
from refagent.llm.protocol import ToolCallRequest, ToolSpec
from refagent.tools.base import CANCEL_NOTE, BaseTool, Plan, ToolContext, ToolResult, cancel_note
from refagent.tools.permissions import AskPermission, Permissions, runs_later
from refagent.tools.running import RunningCalls
from refagent.tools.text import for_a_person

log = logging.getLogger(__name__)


CANCELLED_WHILE_RUNNING = (
    "The user cancelled this call while it was running: it may have been partly done. Check before retrying."
)
ALIVE_AFTER = 5.0
"""Seconds a tool call runs before its title shows how long it has run (and then every :data:`ALIVE_EVERY`)."""
ALIVE_EVERY = 10.0
MAX_CONTENT_BYTES = 1 << 20
"""The content of one tool call message, as JSON: 1 MiB (a diff of a 500 KB file, before and after)."""
MAX_RAW_BYTES = 64 << 10
"""``rawInput`` or ``rawOutput`` of one message, as JSON (for debugging: the diff shows the change)."""
RAW_STRING_CHARS = 4096
"""What is kept of each long string of a ``rawInput`` or ``rawOutput`` over :data:`MAX_RAW_BYTES`."""
MAX_RESULT_CHARS = 1 << 20
"""What the model reads of one result, at most: the head and the tail (tools cap their own far lower)."""


class Tools(Protocol):
    """What a prompt turn needs of tools (:class:`ToolRunner` is the one implementation; :class:`NoTools`
    has none): the specs to offer the model, and a way to run one call."""

    def specs(self) -> list[ToolSpec]: ...

    async def run(self, call: ToolCallRequest) -> str:
        """Run ``call``, reporting it to the editor; return the result text the model reads.

        Errors the model can fix are returned as text, not raised. Only cancellation propagates.
        """
        ...


class NoTools:
    """No tools: every call is answered with an error the model can read."""

    def specs(self) -> list[ToolSpec]:
        return []

    async def run(self, call: ToolCallRequest) -> str:
        return f"Error: there is no tool named {call.name!r}."


class ToolRunner:
    """A session's :class:`Tools`: its tools (built-in, custom and MCP), its permissions and backends."""

    alive_after = ALIVE_AFTER
    """Seconds a call runs before its title shows its running time (then every :attr:`alive_every`)."""
    alive_every = ALIVE_EVERY

    def __init__(
        self,
        tools: Sequence[BaseTool] | Callable[[], Sequence[BaseTool]],
        context: ToolContext,
        permissions: Permissions,
        mode: Callable[[], str],
        request_permission: AskPermission,
        cancel_turn: Callable[[], None],
        on_changed: Callable[[str], None] | None = None,
        before_change: Callable[[str, Plan], None] | None = None,
    ) -> None:
        """``on_changed(path)`` after a change (the watcher); ``before_change(kind, plan)`` just before a
        mutating plan runs (the session records what it will change, for ``/undo``). :attr:`calls`: the
        calls executing now, each cancellable alone."""
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
        self.calls = RunningCalls()

    def derived(
        self,
        tools: Callable[[], Sequence[BaseTool]],
        *,
        context: ToolContext | None = None,
        request_permission: AskPermission | None = None,
    ) -> ToolRunner:
        """A runner of ``tools`` under this one's permissions, mode, turn and hooks, with ``context`` and
        ``request_permission`` in place of its own when given: a turn's runner with the ``task`` tool
        added, and a subagent's (:mod:`refagent.session.subagents`), share the user's answers this way."""
        derived = ToolRunner(
            tools,
            context or self.context,
            self.permissions,
            self.mode,
            request_permission or self.request_permission,
            self.cancel_turn,
            self.on_changed,
            self.before_change,
        )
        derived.alive_after, derived.alive_every = self.alive_after, self.alive_every
        derived.calls = self.calls  # a child's call is cancelled alone as the session's are (tool_call/cancel)
        return derived

    def available(self) -> list[BaseTool]:
        """The tools as they are now (built-in, custom, and the MCP servers' current ones)."""
        return list(self._tools())

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
            return await self._reject(
                call_id, f"{call.name} (invalid arguments)", str(exc), call.arguments, name=tool.name
            )

        announced = not tool.silent
        restore: str | None = None
        title = one_line(tool.title(args))
        raw_input = bounded_raw(args)
        if announced:
            await send(updates.tool_call(call_id, title, tool.kind, raw_input=raw_input, name=tool.name))
        try:
            context = dataclasses.replace(self.context, current_call_id=call_id)
            plan = await tool.prepare(args, context)
            preview = for_a_person(bounded_content(plan.preview))
            planned = one_line(plan.title)
            if announced and (plan.locations or plan.preview or planned != title):
                await send(
                    updates.tool_call_update(
                        call_id, title=planned, locations=plan.locations or None, content=preview or None
                    )
                )
            refusal = await self._permit(call_id, tool, raw_input, preview, plan)
            if refusal is not None:
                await self._finish(announced, call_id, ToolResult(refusal, failed=True))
                return for_model(f"Not run: {refusal}")
            with self.calls.running(call_id) as alone:  # cancellable on its own from here (tool_call/cancel)
                if announced:
                    await send(updates.tool_call_update(call_id, status="in_progress"))
                if plan.mutating and self.before_change is not None:
                    self.before_change(plan.kind or tool.kind, plan)  # before the change: the way back survives a crash
                try:
                    awaited = Awaited()
                    alive = functools.partial(self._alive, announced, call_id, planned, plan.progress, awaited)
                    async with heartbeat(alive, after=self.alive_after, every=self.alive_every) as running:
                        try:
                            with alone, watching(awaited):
                                result = await plan.execute()
                        finally:  # the title said how long it had run: the call's own title again, at the end
                            restore = planned if running.beats else None
                except anyio.get_cancelled_exc_class() as exc:
                    if cancel_note(exc) is None:  # the tool did not say: say the truth we know
                        exc.add_note(CANCEL_NOTE + CANCELLED_WHILE_RUNNING)
                    raise
                finally:
                    if plan.mutating:
                        self._changed(plan)
            if alone.cancelled_caught:  # this call alone was cancelled: the turn goes on, and the model knows
                result = ToolResult(f"Cancelled. {CANCELLED_WHILE_RUNNING}", failed=True)
        except ToolError as exc:
            await self._finish(announced, call_id, ToolResult(f"Error: {exc}", failed=True), restore)
            return for_model(f"Error: {exc}")
        except anyio.get_cancelled_exc_class() as exc:
            said = cancel_note(exc)
            cancelled = ToolResult(f"Cancelled. {said or ''}".strip(), failed=True)
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self._finish(announced, call_id, cancelled, restore)
            raise
        except Exception as exc:  # a bug in a tool must not end the turn, let alone the agent
            log.exception("tool %s failed", call.name)
            message = f"Internal error in {call.name}: {type(exc).__name__}: {exc}"
            await self._finish(announced, call_id, ToolResult(message, failed=True), restore)
            return for_model(message)
        await self._finish(announced, call_id, result, restore)
        return for_model(result.output)

    async def _alive(
        self,
        announced: bool,
        call_id: str,
        title: str,
        progress: Callable[[], list[ToolCallContent]] | None,
        awaited: Awaited,
        seconds: float,
    ) -> None:
        """Show that a long call is running: its title with the time it has taken so far (and, when the
        editor has left a request of the call's unanswered for a second or more, which and for how long),
        and what it has produced so far (a local command's output), when its plan can say."""
        if not announced:
            return
        running = f"{title} (running, {seconds:.0f} s)"
        waiting = awaited.oldest()
        if waiting is not None and waiting[1] >= 1:
            method, waited = waiting
            running = f"{title} (running, {seconds:.0f} s; waiting on the editor: {method}, {waited:.0f} s)"
        content = bounded_content(progress()) if progress is not None else []
        await self.context.send_update(updates.tool_call_update(call_id, title=running, content=content or None))

    def _changed(self, plan: Plan) -> None:
        """Tell the watcher which paths this call changed, so they are not reported back as someone else's."""
        if self.on_changed is None:
            return
        paths = {loc["path"] for loc in plan.locations}
        paths |= {c["path"] for c in plan.preview if c["type"] == "diff"}
        for path in sorted(paths):
            self.on_changed(path)

    async def _permit(
        self, call_id: str, tool: BaseTool, raw_input: Any, preview: list[ToolCallContent], plan: Plan
    ) -> str | None:
        """None if the call may run, else the reason it may not (for the model). ``raw_input`` and
        ``preview``: the arguments and the plan's preview as shown (bounded)."""
        kind = plan.kind or tool.kind
        plan = runs_later(plan, self.context.roots)
        decision, reason = self.permissions.decide(self.mode(), kind, plan)
        if decision == "allow":
            return None
        if decision == "refuse":
            return reason
        title = one_line(plan.title) + (" (outside the workspace)" if plan.outside and not plan.mutating else "")
        if plan.runs_later:
            title += f" ({plan.runs_later})"
        if reason:  # asked again: a remembered scope no longer covers what the call would do
            title += f" ({reason})"
        tool_call: dict[str, Any] = {
            "toolCallId": call_id,
            "title": title,
            "kind": kind,
            "status": "pending",
            "rawInput": raw_input,
        }
        if preview:
            tool_call["content"] = preview
        if plan.locations:
            tool_call["locations"] = plan.locations
        verdict = await self.permissions.ask(self.request_permission, tool_call, plan)
        if verdict.cancelled:
            self.cancel_turn()
            await anyio.lowlevel.checkpoint()  # the turn's scope is cancelled now: this raises
        return None if verdict.allowed else verdict.reason

    async def _finish(self, announced: bool, call_id: str, result: ToolResult, title: str | None = None) -> None:
        """The call's last update: its status, content, locations and raw output (and ``title``, if given)."""
        if not announced:
            return
        content: list[ToolCallContent] = list(result.content)
        if not content and result.output:
            content = [{"type": "content", "content": updates.text(result.output)}]
        raw_output = result.raw_output if result.raw_output is not None else {"output": result.output}
        status: ToolCallStatus = "in_progress" if result.running else "failed" if result.failed else "completed"
        await self.context.send_update(
            updates.tool_call_update(
                call_id,
                status=status,
                title=title,
                content=bounded_content(content),
                locations=result.locations,
                raw_output=bounded_raw(raw_output),
            )
        )

    async def _reject(
        self, call_id: str, title: str, message: str, raw: str | None = None, *, name: str | None = None
    ) -> str:
        """A call that cannot even start: show it as failed, and tell the model why. ``name``: the tool's,
        when there is such a tool (a call of an unknown one has none to give)."""
        send = self.context.send_update
        raw_input = bounded_raw({"arguments": raw}) if raw else None
        title = cut(one_line(title), 200)
        update = updates.tool_call(call_id, title, "other", status="failed", raw_input=raw_input, name=name)
        await send(update)
        shown: list[ToolCallContent] = [{"type": "content", "content": updates.text(message)}]
        await send(updates.tool_call_update(call_id, content=bounded_content(shown)))
        return for_model(f"Error: {message}")


def bounded_raw(value: Any) -> Any:
    """``value`` (a ``rawInput`` or ``rawOutput``) as shown: itself if its JSON fits in
    :data:`MAX_RAW_BYTES`; else with its strings cut to :data:`RAW_STRING_CHARS`, each with a marker
    saying how many characters were left out; if even that is too large, a line saying so."""
    try:
        if text_length(value) <= MAX_RAW_BYTES and json_size(value) <= MAX_RAW_BYTES:
            return value
        shortened = shorten(value, RAW_STRING_CHARS)
        size = json_size(shortened)
    except (TypeError, ValueError, RecursionError):  # not JSON: sending it fails and says so
        return value
    if size <= MAX_RAW_BYTES:
        return shortened
    return f"[not shown: {size:,} bytes of JSON even with its long strings cut]"


def bounded_content(content: list[ToolCallContent]) -> list[ToolCallContent]:
    """``content`` as shown: its items in order while they fit in :data:`MAX_CONTENT_BYTES` (as JSON);
    then a diff is replaced by a line that says how large the change is, text is cut to what room is
    left, and anything else (an image, a resource) is described. Terminals are always kept (they are
    small, and the editor shows the command's output through them)."""
    room = MAX_CONTENT_BYTES
    shown: list[ToolCallContent] = []
    for item in content:
        if item.get("type") != "terminal":
            try:
                size = json_size(item) if text_length(item) <= room else room + 1
            except (TypeError, ValueError, RecursionError):
                size = 0  # not JSON: sending it fails and says so
            if size > room:
                item = _summary(item, room)
                size = json_size(item)
            room -= size
        shown.append(item)
    return shown


def _summary(item: ToolCallContent, room: int) -> ToolCallContent:
    """What is shown of a content item too large for the ``room`` left."""
    if item.get("type") == "diff":
        old, new = item.get("oldText"), item.get("newText")
        old, new = (t if isinstance(t, str) else None for t in (old, new))
        text = (
            f"Large change to {item.get('path')}, not shown as a diff: "
            f"before, {_extent(old, 'no file')}; after, {_extent(new, 'deleted')}."
        )
        return {"type": "content", "content": updates.text(text)}
    block: Any = item.get("content")
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return {"type": "content", "content": {**block, "text": _fitted(block["text"], room)}}
    kind = block.get("type") if isinstance(block, dict) else item.get("type")
    mime = f" ({block['mimeType']})" if isinstance(block, dict) and isinstance(block.get("mimeType"), str) else ""
    return {"type": "content", "content": updates.text(f"[{kind}{mime} content not shown: too large]")}


def _extent(text: str | None, missing: str) -> str:
    if text is None:
        return missing
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return f"{lines:,} lines, {len(text.encode('utf-8', 'surrogatepass')):,} bytes"


def _fitted(text: str, room: int) -> str:
    """``text`` cut (with a marker) to what takes at most ``room`` bytes as JSON (escapes count)."""
    keep = max(room, 0)
    while True:
        shown = cut(text, keep)
        size = json_size(shown)
        if size <= room or keep == 0:
            return shown
        keep = keep * max(room, 0) // size


def for_model(output: str) -> str:
    """``output`` as the model reads it: whole up to :data:`MAX_RESULT_CHARS`, else its head and tail."""
    if len(output) <= MAX_RESULT_CHARS:
        return output
    half = MAX_RESULT_CHARS // 2
    return f"{output[:half]}\n[... {len(output) - 2 * half:,} characters omitted ...]\n{output[-half:]}"


def parse_arguments(raw: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Decode the model's arguments and check them against the tool's schema (top-level properties:
    required, types, enums, no unknown names). Raises ToolError with a message the model can act on."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise ToolError(
            f"The arguments are not valid JSON ({exc}). Send a JSON object matching the tool's schema."
        ) from None
    except RecursionError:  # "[[[[...": the parser's stack, not ours to grow
        raise ToolError("The arguments nest too deeply to be read. Send a flat JSON object.") from None
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
