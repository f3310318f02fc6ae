"""``task``: the model hands a task to a subagent, a child with its own conversation, and reads its answer.

The model names the task in a few words (the title everyone sees, the permission questions of the
subagent included), writes the instructions, and may list the tools the subagent gets: by default the ones
that only read (:data:`READ_ONLY`: ``read_file``, ``glob``, ``grep``, and ``fetch`` where the session has
it). A subagent may be given tools that change files or run commands; each of its calls is then decided
as the session's own would be, by the session's mode and the user's "always" answers, and asked of the
user when they say so.

The tool itself changes nothing and needs no permission. What runs the subagent is a :class:`Delegate`
passed in (:class:`refagent.session.subagents.Subagents`, which holds the model, the budgets and the
display): the tool only checks the arguments and shows the call. Its kind is ``think``: the session's own
work, done by a helper; what the helper does shows in the call (or, to an editor that shows subagents, as
a session of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from refagent.acp.text import one_line
from refagent.errors import ToolError
from refagent.tools.args import arg_str
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult

NAME = "task"
READ_ONLY = ("read_file", "glob", "grep", "fetch")
"""A subagent's tools when the model names none (those of them the session has)."""
TITLE_CHARS = 80
MAX_PROMPT_CHARS = 20_000


@dataclass(frozen=True)
class Task:
    """One task for a subagent: its title, its instructions, and the names of the tools it gets."""

    title: str
    prompt: str
    tools: tuple[str, ...]


class Delegate(Protocol):
    """What runs a :class:`Task` for the ``task`` tool (:class:`refagent.session.subagents.Subagents`)."""

    def tool_names(self) -> list[str]:
        """The tools a subagent may be given, by name."""
        ...

    async def run(self, task: Task, call_id: str) -> ToolResult:
        """Run ``task`` in a subagent, shown under the tool call ``call_id``; its answer, or a failed result
        that says why there is none. Only cancellation propagates."""
        ...


class TaskTool(BaseTool):
    """The ``task`` tool, handing its tasks to ``delegate``."""

    name = NAME
    description = (
        "Hand a self-contained task to a subagent: a helper with its own conversation that works with "
        "tools and answers with a report, so yours stays short. For exploring the code for something, "
        "reviewing a change, running the tests and summarising. Several task calls in one response run at "
        "once. The subagent knows only what `prompt` says: give it everything it needs and say what its "
        "answer must contain. By default it can only read and search; list `tools` to give it others "
        "(the user's permissions apply to its calls as to yours)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task in a few words (shown to the user)."},
            "prompt": {"type": "string", "description": "The instructions: everything the subagent needs."},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The tools the subagent may use, by name (default: read_file, glob, grep, fetch).",
            },
        },
        "required": ["task", "prompt"],
        "additionalProperties": False,
    }
    kind = "think"

    def __init__(self, delegate: Delegate) -> None:
        self.delegate = delegate

    def title(self, args: dict[str, Any]) -> str:
        task = args.get("task")
        return f"Task: {task_title(task)}" if isinstance(task, str) and task.strip() else "Task"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        title = task_title(arg_str(args, "task"))
        prompt = arg_str(args, "prompt")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolError(f"The prompt is {len(prompt):,} characters; at most {MAX_PROMPT_CHARS:,}.")
        task = Task(title, prompt, _tools(args.get("tools"), self.delegate.tool_names()))

        async def execute() -> ToolResult:
            return await self.delegate.run(task, ctx.current_call_id)

        return Plan(title=f"Task: {title}", execute=execute)


def task_title(task: str) -> str:
    """A task as its title: one line, at most :data:`TITLE_CHARS` (cut with an ellipsis)."""
    title = one_line(" ".join(task.split()))
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1].rstrip() + "…"


def _tools(value: Any, available: Sequence[str]) -> tuple[str, ...]:
    """The tools named (or, for none, those of :data:`READ_ONLY` there are); ToolError for a name that is
    not one of ``available``."""
    if value is None:
        return tuple(name for name in READ_ONLY if name in available)
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ToolError("Argument 'tools' must be a list of tool names.")
    unknown = [name for name in value if name not in available]
    if unknown:
        raise ToolError(f"No such tool for a subagent: {', '.join(unknown)}. Available: {', '.join(available)}.")
    return tuple(dict.fromkeys(value))
