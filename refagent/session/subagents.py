"""Subagents: the ``task`` tool's children (:mod:`refagent.tools.task`), each a turn of its own.

A subagent runs the same loop as a session's turn (:class:`refagent.session.turn.Turn`) with its own
conversation (the task's instructions its one user message), its own system prompt (the session's, and
``prompts/subagent.md``) and its own budget (:class:`refagent.config.limits.SubagentLimits`: model requests,
tokens, time), in the session's roots and sandbox, on the session's model. Its tools are those the task
names, run by a runner derived from the turn's (:meth:`refagent.tools.runner.ToolRunner.derived`): the
session's mode and permission memory decide its calls, an "always" answer given to a child holds for the
session, and ``/undo`` and ``/rewind`` take back its changes with the turn's (the session's
``before_change`` records them under the turn).

Every question of a child reaches the editor as the session's would, named for the child (its task in
the title): a permission request, and ``ask_user``'s form or dialog. While one waits, the parent's
``task`` call says so (:class:`refagent.session.subagent_view.ChildView`). A permission answered
``cancelled`` cancels the session's turn, and cancelling the turn cancels every child, whose question the
editor is then told to withdraw: no question outlives its turn.

A child's clock stops while one of its questions waits on the user: the user's time is not its budget.
A child that fails (the model failed, it ran out of requests, tokens or time, it was cut off) ends its
``task`` call ``failed`` with the reason, which the model reads; the turn goes on. Its usage counts in the
session's: each response's cost joins the session's ``usage_update``, and its tokens the turn's ``usage``.

Children nest up to ``max_depth`` (a child at the last level has no ``task`` tool), and at most
``max_running`` children of one turn (or of one child) run at once; the others wait for a place.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from refagent.acp.client import PermissionAnswer, SessionClient
from refagent.acp.types import PermissionOption
from refagent.config.limits import SubagentLimits
from refagent.ids import new_id
from refagent.llm.protocol import ModelClient, Usage
from refagent.sandbox.editor.questions import EditorQuestions, question_title
from refagent.session.subagent_view import ChildView
from refagent.session.subagent_view import shows_subagents as shows
from refagent.session.system_prompt import template
from refagent.session.turn import Turn, run_prompt
from refagent.tools.base import Answer, BaseTool, Questions, ToolResult
from refagent.tools.runner import ToolRunner, Tools
from refagent.tools.task import NAME, Task, TaskTool

if TYPE_CHECKING:
    from refagent.session.state import Session

log = logging.getLogger(__name__)

NOT_FOR_CHILDREN = frozenset({"command_output", "stop_command"})
"""Tools a subagent is never given: it has no background commands (they would outlive it; ``run_command``
with ``background`` tells it so)."""


@dataclasses.dataclass
class Parent:
    """What the children of one turn share with it: the session's model, system prompt, tool runner, client
    (the session's; for a child's children, that child's), usage, and the turn's ``used`` tokens list."""

    model: ModelClient
    system_prompt: str
    runner: ToolRunner
    client: SessionClient
    send_update: Callable[[dict[str, Any]], Awaitable[None]]
    """Where the children's own announcements go: the session's ``send_update`` (to the client, and
    recorded); for a child's children, that child's."""
    usage: Callable[[Usage], dict[str, Any]]
    """The session's ``usage_update`` for a child's response (:meth:`UsageMeter.add_child`)."""
    send_usage: Callable[[dict[str, Any]], Awaitable[None]]
    """How that ``usage_update`` goes out: the session's ``send_update``, at every depth."""
    used: list[Usage]
    """The turn's responses' tokens (its prompt response's ``usage``): the children's join them."""
    reasoning_effort: str | None = None
    record: Callable[[dict[str, Any]], None] | None = None
    """Where a child's session is saved when it ends: the session's record file (None: not saved)."""


class Subagents:
    """Runs the tasks of one turn (``depth`` 1) or of one child (deeper) in children, at most
    ``limits.max_running`` at once: the ``task`` tool's :class:`~refagent.tools.task.Delegate`."""

    def __init__(self, parent: Parent, limits: SubagentLimits, *, depth: int = 1) -> None:
        self.parent = parent
        self.limits = limits
        self.depth = depth
        self.places = anyio.CapacityLimiter(limits.max_running)

    @property
    def session_id(self) -> str:
        return self.parent.client.session_id

    def tool_names(self) -> list[str]:
        names = [t.name for t in self.parent.runner.available() if t.name not in NOT_FOR_CHILDREN | {NAME}]
        if self.depth < self.limits.max_depth:
            names.append(NAME)
        return names

    async def run(self, task: Task, call_id: str) -> ToolResult:
        async with self.places:
            return await self._run(task, call_id)

    async def _run(self, task: Task, call_id: str) -> ToolResult:
        child_id = new_id("sess")
        shows_subagents = shows(self.parent.client)
        child = SessionClient(self.parent.client.peer, child_id, self.parent.client.capabilities)
        view = ChildView(
            title=task.title,
            prompt=task.prompt,
            call_id=call_id,
            child_id=child_id,
            send_parent=self.parent.send_update,
            child=child if shows_subagents else None,
            record=self.parent.record,
        )
        budget = _Budget(self.limits, view)
        await view.opened(self.session_id)
        stop, reason = "cancelled", "the turn was cancelled"
        try:
            history: list[dict[str, Any]] = []
            turn = Turn(
                model=self.parent.model,
                history=history,
                send_update=lambda update: self._send(update, budget),
                system_prompt=f"{self.parent.system_prompt}\n\n{template('subagent.md')}",
                tools=self._tools(task, budget, child, shown=shows_subagents),
                max_requests=self.limits.max_requests,
                usage=lambda used: self._usage(used, budget),
                notices=False,  # a child's waits show in its own thread only
                reasoning_effort=self.parent.reasoning_effort,
                cache_key=child_id,
            )
            with budget.scope:
                stop = await run_prompt(turn, {"role": "user", "content": task.prompt})
            if budget.scope.cancelled_caught:
                stop, reason = "error", budget.spent or f"it ran out of time ({self.limits.max_seconds:g} s)"
            elif turn.failure is not None:
                stop, reason = "error", f"the model failed: {turn.failure.message}"
            else:
                reason = _why(stop, self.limits)
        except Exception as exc:  # a bug: the runner fails the call with it; the child ends as failed
            stop, reason = "error", f"internal error: {type(exc).__name__}: {exc}"
            raise
        finally:
            await view.closed(stop, reason)
        answer = _answer(history)
        if reason:
            said = f"The subagent for {task.title!r} did not finish: {reason}."
            if answer:
                said += f" Its last words:\n{answer}"
            return ToolResult(said, content=view.content(said), failed=True, raw_output={"error": reason})
        answer = answer or "The subagent ended without an answer."
        return ToolResult(answer, content=view.content(answer), raw_output={"answer": answer})

    async def _send(self, update: dict[str, Any], budget: _Budget) -> None:
        """An update of the child's turn: its usage is the session's (and may end its budget); the rest is
        the child's to show."""
        if update.get("sessionUpdate") == "usage_update":
            await self.parent.send_usage(update)
            budget.view.checkpoint()  # one of its model's answers has ended: kept
            if budget.spent:
                budget.scope.cancel()
            return
        await budget.view.show(update)

    def _usage(self, used: Usage, budget: _Budget) -> dict[str, Any]:
        """A child's response: its tokens join the turn's and count against the child's budget; its cost
        joins the session's (the ``usage_update`` the session is sent)."""
        self.parent.used.append(used)
        budget.add(used.prompt_tokens + used.completion_tokens)
        return self.parent.usage(used)

    def _tools(self, task: Task, budget: _Budget, child: SessionClient, *, shown: bool) -> Tools:
        """The child's tools: those ``task`` names, run under the session's mode and permission memory, its
        questions named for it and shown as waited on (asked in the ``child``'s session when the editor
        shows subagents, else in the parent's); with ``task`` itself a level deeper."""
        runner, view = self.parent.runner, budget.view
        chosen: list[BaseTool] = [t for t in runner.available() if t.name in task.tools and t.name != NAME]
        if NAME in task.tools and self.depth < self.limits.max_depth:
            # The grandchildren are the child's: announced on its session, their calls among its own.
            deeper = dataclasses.replace(self.parent, client=child, send_update=view.show)
            chosen.append(TaskTool(Subagents(deeper, self.limits, depth=self.depth + 1)))
        label = f"[{task.title}]"
        questions = runner.context.questions
        if shown:  # the child's own session asks: the editor shows the question there
            questions = EditorQuestions(child, cancel_turn=runner.cancel_turn)
        context = dataclasses.replace(
            runner.context,
            send_update=view.show,
            questions=_NamedQuestions(questions, label, budget) if questions is not None else None,
            jobs=None,
        )
        ask = child.request_permission if shown else runner.request_permission

        async def request_permission(tool_call: dict[str, Any], options: list[PermissionOption]) -> PermissionAnswer:
            named = {**tool_call, "title": f"{label} {tool_call.get('title', '')}".rstrip()}
            await view.asking(str(named.get("toolCallId")), named["title"], named.get("kind"))
            async with budget.waiting(named["title"]):
                return await ask(named, options)

        return runner.derived(lambda: chosen, context=context, request_permission=request_permission)


class _Budget:
    """What one child has spent of its tokens and time, and the scope its budget ends. The time the user
    takes to answer one of its questions is not the child's: its clock stops meanwhile (:meth:`waiting`)."""

    def __init__(self, limits: SubagentLimits, view: ChildView) -> None:
        self.limit = limits.max_tokens
        self.view = view
        self.tokens = 0
        self.spent = ""
        """Why the child's budget is spent (empty: it is not)."""
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + limits.max_seconds)
        self._waits = 0
        self._left = 0.0

    @asynccontextmanager
    async def waiting(self, question: str) -> AsyncIterator[None]:
        """While the child's ``question`` waits on the user: the parent's call says so, and the child's
        clock stops."""
        if self._waits == 0:
            self._left = self.scope.deadline - anyio.current_time()
            self.scope.deadline = math.inf
        self._waits += 1
        try:
            async with self.view.waiting(question):
                yield
        finally:
            self._waits -= 1
            if self._waits == 0:
                self.scope.deadline = anyio.current_time() + self._left

    def add(self, tokens: int) -> None:
        self.tokens += tokens
        if self.tokens > self.limit and not self.spent:
            self.spent = f"it used {self.tokens:,} tokens, over its budget of {self.limit:,}"


class _NamedQuestions:
    """A child's questions: named for it, and shown on the parent's call as waited on."""

    def __init__(self, questions: Questions, label: str, budget: _Budget) -> None:
        self.questions = questions
        self.label = label
        self.budget = budget

    async def ask(
        self, question: str, choices: Sequence[str] = (), *, allow_other: bool = False, tool_call_id: str | None = None
    ) -> Answer:
        named = f"{self.label} {question}"
        if tool_call_id is not None:
            await self.budget.view.asking(tool_call_id, question_title(named))
        async with self.budget.waiting(named):
            return await self.questions.ask(named, choices, allow_other=allow_other, tool_call_id=tool_call_id)


def _why(stop: str, limits: SubagentLimits) -> str:
    """Why a child that stopped with ``stop`` did not finish (empty: it did)."""
    if stop == "max_turn_requests":
        return f"it ran out of model requests (its budget is {limits.max_requests})"
    if stop == "max_tokens":
        return "its response was cut off by the model's output limit"
    if stop == "refusal":
        return "the model refused the task"
    return ""


def _answer(history: list[dict[str, Any]]) -> str:
    """The child's last words: the text of its last response that had any."""
    for message in reversed(history):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str) and message["content"]:
            text: str = message["content"]
            return text
    return ""


def with_subagents(session: Session, turn: Turn, limits: SubagentLimits) -> None:
    """Give ``turn`` (of ``session``) the ``task`` tool, its children under ``limits``. Not when subagents
    are off (``max_depth`` 0), the session has no tool runner, or one of its tools is already so named."""
    tools = turn.tools
    if limits.max_depth < 1 or not isinstance(tools, ToolRunner):
        return
    if any(tool.name == NAME for tool in tools.available()):
        log.warning("a tool is named %r: the subagents' tool is left out", NAME)
        return
    parent = Parent(
        model=turn.model,
        system_prompt=turn.system_prompt,
        runner=tools,
        client=session.client,
        send_update=session.send_update,
        usage=functools.partial(session.meter.add_child, profile=session.profile),
        send_usage=session.send_update,
        used=turn.used,
        reasoning_effort=turn.reasoning_effort,
        record=session.log.append if session.log is not None else None,
    )
    task = TaskTool(Subagents(parent, limits))
    turn.tools = tools.derived(lambda: [*tools.available(), task])
