"""Subagents in an agent connected in memory: when the ``task`` tool is offered, what a child's clock
does while the user answers it, and what the parent's task call shows of a child."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from refagent.config.limits import SubagentLimits
from refagent.llm.scripted import ScriptedModel, text
from refagent.session.subagent_view import LISTED_CALLS, ChildView
from refagent.session.subagents import _Budget
from refagent.settings import Settings
from refagent.testing.memory import connect
from refagent.tools.base import BaseTool, Plan, ToolContext
from refagent.tools.registry import default_tools

pytestmark = pytest.mark.anyio


class OwnTask(BaseTool):
    """A custom tool that happens to be called ``task``."""

    name = "task"
    description = "the user's own"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        raise NotImplementedError


async def offered(tmp_path: Path, **options: Any) -> list[str]:
    """The tools the model is offered in a session of an agent with ``options`` (its settings)."""
    model = ScriptedModel([text("hi")])
    async with connect(Settings(make_model=lambda profile: model, store=None, **options)) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}
    return [spec.name for spec in model.requests[0].tools]


async def test_task_is_offered_last_by_default(tmp_path: Path) -> None:
    assert (await offered(tmp_path))[-1] == "task"


async def test_no_task_when_subagents_are_off(tmp_path: Path) -> None:
    assert "task" not in await offered(tmp_path, subagents=SubagentLimits(max_depth=0))


async def test_a_tool_of_the_users_named_task_stays_the_only_one(tmp_path: Path) -> None:
    names = await offered(tmp_path, tools=lambda: [*default_tools(), OwnTask()])
    assert names.count("task") == 1


def view(sent: list[dict[str, Any]]) -> ChildView:
    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    return ChildView(title="t", prompt="p", call_id="call_1", child_id="sess_c", send_parent=send, child=None)


async def test_a_childs_clock_stops_while_the_user_answers() -> None:
    sent: list[dict[str, Any]] = []
    budget = _Budget(SubagentLimits(max_seconds=100), view(sent))
    left = budget.scope.deadline - anyio.current_time()
    async with budget.waiting("[t] Edit a.txt"):
        assert budget.scope.deadline == math.inf
        async with budget.waiting("[t] another"):  # a second question meanwhile
            assert budget.scope.deadline == math.inf
            assert sent[-1]["content"][0]["content"]["text"].count("Waiting for your answer") == 2
        assert budget.scope.deadline == math.inf
        assert sent[-1]["content"][0]["content"]["text"] == "Waiting for your answer: [t] Edit a.txt"
    assert 0 < budget.scope.deadline - anyio.current_time() <= left
    assert sent[0]["content"][0]["content"]["text"] == "Waiting for your answer: [t] Edit a.txt"
    assert sent[-1]["content"] == []  # no longer waiting: the call says so


async def test_the_task_call_lists_the_childs_calls_and_its_latest_words() -> None:
    sent: list[dict[str, Any]] = []
    shown = view(sent)
    await shown.show({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a.txt", "status": "pending"})
    await shown.show({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"})
    await shown.show({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "Run tests", "status": "pending"})
    await shown.show({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "failed"})
    chunk = {"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": {"type": "text", "text": "Half"}}
    await shown.show(chunk)
    await shown.show({**chunk, "content": {"type": "text", "text": " done."}})
    await shown.show({"sessionUpdate": "tool_call", "toolCallId": "c3", "title": "Grep\nx", "status": "pending"})
    [listing, words] = sent[-1]["content"]
    assert listing["content"]["text"] == "✓ Read a.txt\n✗ Run tests\n… Grep x"
    assert words["content"]["text"] == "Half done."
    assert len(sent) == 5  # a call began or ended: words alone do not resend the list
    [_, answer] = shown.content("The answer.")
    assert answer["content"]["text"] == "The answer."


async def test_a_long_list_of_calls_shows_the_latest() -> None:
    sent: list[dict[str, Any]] = []
    shown = view(sent)
    for n in range(LISTED_CALLS + 5):
        await shown.show(
            {"sessionUpdate": "tool_call", "toolCallId": f"c{n}", "title": f"Read {n}", "status": "pending"}
        )
    lines = shown.content()[0]["content"]["text"].splitlines()
    assert lines[0] == "(5 earlier calls)"
    assert lines[1] == "… Read 5"
    assert len(lines) == LISTED_CALLS + 1
