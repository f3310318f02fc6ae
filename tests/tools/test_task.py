"""``task``: its arguments checked, its default tools those that only read, its work handed to the
delegate under the call's id, and a prompt too long refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.tools.base import ToolResult
from refagent.tools.runner import parse_arguments
from refagent.tools.task import MAX_PROMPT_CHARS, Task, TaskTool
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio


class Recorder:
    """A delegate that answers with the task it was given."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.given: list[tuple[Task, str]] = []

    def tool_names(self) -> list[str]:
        return self.names

    async def run(self, task: Task, call_id: str) -> ToolResult:
        self.given.append((task, call_id))
        return ToolResult(f"did {task.title}")


async def test_the_default_tools_only_read(tmp_path: Path) -> None:
    delegate = Recorder(["read_file", "glob", "grep", "edit_file", "run_command"])
    result = await call(TaskTool(delegate), make_ctx(str(tmp_path), call_id="call_7"), task="Look", prompt="Find X.")
    assert result.output == "did Look"
    [(task, call_id)] = delegate.given
    assert task == Task("Look", "Find X.", ("read_file", "glob", "grep"))  # no fetch in this session
    assert call_id == "call_7"


async def test_tools_named_are_given_once_each(tmp_path: Path) -> None:
    delegate = Recorder(["read_file", "edit_file"])
    await call(TaskTool(delegate), make_ctx(str(tmp_path)), task="Fix", prompt="p", tools=["edit_file", "edit_file"])
    assert delegate.given[0][0].tools == ("edit_file",)


async def test_an_unknown_tool_is_for_the_model_to_fix(tmp_path: Path) -> None:
    tool = TaskTool(Recorder(["read_file"]))
    with pytest.raises(ToolError, match=r"No such tool for a subagent: run_command\. Available: read_file\."):
        await tool.prepare({"task": "t", "prompt": "p", "tools": ["run_command"]}, make_ctx(str(tmp_path)))


async def test_a_prompt_too_long_is_refused(tmp_path: Path) -> None:
    tool = TaskTool(Recorder([]))
    with pytest.raises(ToolError, match="at most"):
        await tool.prepare({"task": "t", "prompt": "x" * (MAX_PROMPT_CHARS + 1)}, make_ctx(str(tmp_path)))


def test_the_title_is_one_short_line() -> None:
    tool = TaskTool(Recorder([]))
    assert tool.title({"task": "Review\nthe   diff"}) == "Task: Review the diff"
    assert len(tool.title({"task": "x" * 500})) <= len("Task: ") + 80
    assert tool.title({}) == "Task"


def test_the_schema_wants_a_task_and_a_prompt() -> None:
    with pytest.raises(ToolError, match="Missing required argument"):
        parse_arguments('{"task": "t"}', TaskTool.parameters)
    with pytest.raises(ToolError, match="Unknown argument"):
        parse_arguments('{"task": "t", "prompt": "p", "model": "x"}', TaskTool.parameters)
