"""``ask_user``: the model asks the user a question and waits for the answer.

The question goes out through :attr:`refagent.tools.base.ToolContext.questions`: the editor's form
(``elicitation/create``) when it advertises one, else, for a few choices, its permission dialog with one
option per choice (:class:`refagent.sandbox.editor.questions.EditorQuestions`). Where it cannot be asked (free text
without forms, too many choices, an editor's error), the model is told to end its turn and ask in its
message instead. The result says exactly what happened: the choice, the typed answer, a decline, a
dismissal, or that it could not ask.

The call changes nothing: it needs no permission and runs in every mode, read-only included. Its kind is
``other``: ``think`` is the agent's own reasoning, which clients may fold away, and a question waiting on
the user must stay in sight.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from refagent.acp import updates
from refagent.acp.text import cut
from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.sandbox.editor.questions import question_title
from refagent.tools.args import check_text
from refagent.tools.base import CANCEL_NOTE, Answer, BaseTool, Plan, ToolContext, ToolResult

MAX_QUESTION_CHARS = 2000
MAX_CHOICES = 10
MAX_CHOICE_CHARS = 100
MAX_ANSWER_CHARS = 8000
"""What the model reads of a typed answer, at most."""
CANCELLED_WHILE_ASKING = "The user cancelled the turn while the question was open: it was not answered."


class AskUser(BaseTool):
    name = "ask_user"
    description = (
        "Ask the user a question and wait for the answer. Only for a real ambiguity that blocks the work "
        "(two reasonable readings of the task, a decision only the user can make), not for permission: the "
        "tools ask for that themselves. Give `choices` (2-10 short answers) when the answer is one of a few, "
        "and `allow_other` to let the user type another; without choices the user types the answer. Never "
        "ask for passwords, API keys, tokens or other secrets. If it cannot be asked here, end your turn "
        "and ask in your message."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, short and self-contained."},
            "choices": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 2,
                "maxItems": MAX_CHOICES,
                "description": f"The possible answers, each at most {MAX_CHOICE_CHARS} characters.",
            },
            "allow_other": {
                "type": "boolean",
                "description": "With choices: the user may also type an answer of their own.",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    }
    kind = "other"

    def title(self, args: dict[str, Any]) -> str:
        question = args.get("question")
        return question_title(question) if isinstance(question, str) else "Ask the user"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        question, choices = _question(args.get("question")), _choices(args.get("choices"))
        allow_other = bool(args.get("allow_other")) and bool(choices)
        title = question_title(question)
        preview: list[ToolCallContent] = []
        if title != question:  # the title shows only the first line, or the start of a long one
            preview.append({"type": "content", "content": updates.text(question)})

        async def execute() -> ToolResult:
            if ctx.questions is None:
                answer = Answer("unavailable", reason="this editor offers no way to ask")
            else:
                try:
                    answer = await ctx.questions.ask(
                        question, choices, allow_other=allow_other, tool_call_id=ctx.current_call_id or None
                    )
                except anyio.get_cancelled_exc_class() as exc:
                    exc.add_note(CANCEL_NOTE + CANCELLED_WHILE_ASKING)
                    raise
            return result_of(answer)

        return Plan(title=title, execute=execute, preview=preview)


def result_of(answer: Answer) -> ToolResult:
    """What the model reads, and the editor shows, of ``answer``."""
    raw: dict[str, Any] = {"outcome": answer.outcome}
    if answer.choice is not None:
        raw["choice"] = answer.choice
    if answer.text is not None:
        raw["text"] = answer.text
    if answer.reason:
        raw["reason"] = answer.reason
    because = f" ({answer.reason})" if answer.reason else ""
    if answer.outcome == "answered":
        typed = cut(answer.text, MAX_ANSWER_CHARS) if answer.text is not None else None
        if answer.choice is not None and typed is not None:
            output = f"The user chose: {answer.choice}\nand wrote: {typed}"
        elif answer.choice is not None:
            output = f"The user chose: {answer.choice}"
        else:
            output = f"The user answered: {typed}"
        return ToolResult(output, raw_output=raw)
    if answer.outcome == "declined":
        return ToolResult(
            "The user declined to answer. Do not ask again: go on with your best judgement, saying what you "
            "assumed, or end your turn.",
            raw_output=raw,
        )
    if answer.outcome == "dismissed":
        return ToolResult(f"The user dismissed the question without answering{because}.", raw_output=raw)
    return ToolResult(
        f"Cannot ask here{because}: end your turn and ask the question in your message.", raw_output=raw, failed=True
    )


def _question(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError("question must be a non-empty string.")
    if len(value) > MAX_QUESTION_CHARS:
        raise ToolError(f"question is longer than {MAX_QUESTION_CHARS} characters; ask something shorter.")
    check_text("question", value)
    return value.strip()


def _choices(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(choice, str) for choice in value):
        raise ToolError("choices must be a list of strings.")
    choices = [choice.strip() for choice in value]
    if len(choices) == 1 or len(choices) > MAX_CHOICES:
        raise ToolError(f"Give 2 to {MAX_CHOICES} choices ({len(choices)} given), or none for a free-text answer.")
    for index, choice in enumerate(choices):
        if not choice:
            raise ToolError(f"choices[{index}] is empty.")
        check_text(f"choices[{index}]", choice)
        if len(choice) > MAX_CHOICE_CHARS or "\n" in choice:
            raise ToolError(
                f"choices[{index}] must be one line of at most {MAX_CHOICE_CHARS} characters; put details in "
                "the question."
            )
    if len(set(choices)) != len(choices):
        raise ToolError("choices must differ from each other.")
    return choices
