"""Running a response's tool calls: in order, but consecutive ``task`` calls at once, every call with a
result in the calls' order, whatever happens."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.session.tool_calls import CANCELLED_RESULT, run_tool_calls
from refagent.tools.base import CANCEL_NOTE

pytestmark = pytest.mark.anyio


class Meeting:
    """Tools whose ``task`` calls each wait until ``expected`` of them run at once (so they finish only if
    they really run together), the later ones finishing first; other calls answer at once."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.running = 0
        self.most = 0
        self.all_in = anyio.Event()
        self.finished: list[str] = []

    def specs(self) -> list[Any]:
        return []

    async def run(self, call: ToolCallRequest) -> str:
        if call.name != "task":
            assert self.running == 0, "a call that is not a task ran beside one"
            self.finished.append(call.id)
            return f"{call.name} {call.id}"
        self.running += 1
        self.most = max(self.most, self.running)
        if self.running == self.expected:
            self.all_in.set()
        await self.all_in.wait()
        for _ in range(int(call.arguments or 0)):  # the later calls finish first
            await anyio.lowlevel.checkpoint()
        self.running -= 1
        self.finished.append(call.id)
        return f"answer {call.id}"


def task(ident: str, delay: int) -> ToolCallRequest:
    return ToolCallRequest(ident, "task", str(delay))


async def test_consecutive_tasks_run_at_once_and_answer_in_order() -> None:
    tools, history = Meeting(expected=3), []
    with anyio.fail_after(5):
        await run_tool_calls(tools, [task("a", 5), task("b", 3), task("c", 0)], history)
    assert tools.most == 3
    assert tools.finished == ["c", "b", "a"]
    assert [(m["tool_call_id"], m["content"]) for m in history] == [
        ("a", "answer a"),
        ("b", "answer b"),
        ("c", "answer c"),
    ]


async def test_another_call_between_tasks_runs_alone() -> None:
    tools, history = Meeting(expected=1), []
    calls = [task("a", 0), ToolCallRequest("r", "read_file", "{}"), task("b", 0)]
    await run_tool_calls(tools, calls, history)
    assert tools.most == 1
    assert tools.finished == ["a", "r", "b"]
    assert [m["tool_call_id"] for m in history] == ["a", "r", "b"]


class CutOff:
    """``task`` calls: ``a`` says what it did when cancelled; ``b`` never began; the turn is cancelled
    once ``a`` runs."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope

    def specs(self) -> list[Any]:
        return []

    async def run(self, call: ToolCallRequest) -> str:
        if call.id == "b":
            await anyio.sleep_forever()
        try:
            self.scope.cancel()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class() as exc:
            exc.add_note(CANCEL_NOTE + "half done")
            raise
        return "never"


async def test_a_cancelled_batch_gives_every_call_a_result_in_order() -> None:
    history: list[dict[str, Any]] = []
    with anyio.CancelScope() as scope:
        await run_tool_calls(CutOff(scope), [task("a", 0), task("b", 0), ToolCallRequest("c", "x", "")], history)
    assert scope.cancelled_caught
    assert [(m["tool_call_id"], m["content"]) for m in history] == [
        ("a", "half done"),
        ("b", CANCELLED_RESULT),
        ("c", CANCELLED_RESULT),
    ]
