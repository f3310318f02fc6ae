"""Questions for the user through the editor (:class:`EditorQuestions`): a form (``elicitation/create``,
when the client advertises ``elicitation.form``), else, for a few choices, ``session/request_permission``
with one option per choice; otherwise it cannot be asked here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from refagent.acp.client import BadAnswer, SessionClient
from refagent.acp.errors import RequestError
from refagent.acp.text import cut
from refagent.acp.types import PermissionOption
from refagent.ids import new_id
from refagent.sandbox.editor.files import reason as _reason
from refagent.sandbox.seams import Answer

log = logging.getLogger(__name__)

MAX_PERMISSION_CHOICES = 6
"""The most choices offered as permission options: past that a dialog of buttons is no longer a choice."""
DECLINE_OPTION = "decline"
TITLE_CHARS = 200


def question_title(question: str) -> str:
    """A question as a tool call's title: its first line, cut to :data:`TITLE_CHARS`."""
    lines = question.strip().splitlines()
    return cut(lines[0], TITLE_CHARS) if lines else "Question"


class EditorQuestions:
    """Questions for the user through the editor.

    Where the client advertised ``elicitation.form``: ``elicitation/create`` in form mode, tied
    to the tool call, with one string field ``answer`` (an ``enum`` of the choices, or free text) and,
    with ``allow_other``, a second free-text field ``other``. Without it: 1 to
    :data:`MAX_PERMISSION_CHOICES` choices go out as ``session/request_permission``, one ``allow_once``
    option per choice and a ``reject_once`` "None of these" (so the user can decline without cancelling
    the turn); free text, or more choices, cannot be asked here.

    ``cancel_turn``: what a permission answer of ``cancelled`` (the turn was cancelled) calls, as the
    tool runner does for any permission.
    """

    def __init__(self, client: SessionClient, *, cancel_turn: Callable[[], None] | None = None) -> None:
        self.client = client
        self.form = client.has_forms
        self.cancel_turn = cancel_turn

    async def ask(
        self, question: str, choices: Sequence[str] = (), *, allow_other: bool = False, tool_call_id: str | None = None
    ) -> Answer:
        choices = list(choices)
        if self.form:
            return await self._form(question, choices, allow_other and bool(choices), tool_call_id)
        if not choices:
            return Answer("unavailable", reason="this editor cannot show a question with a free-text answer")
        if len(choices) > MAX_PERMISSION_CHOICES:
            return Answer(
                "unavailable",
                reason=f"this editor can offer at most {MAX_PERMISSION_CHOICES} choices, not {len(choices)}",
            )
        return await self._permission(question, choices, tool_call_id)

    async def _form(self, question: str, choices: list[str], allow_other: bool, tool_call_id: str | None) -> Answer:
        answer_field: dict[str, Any] = {"type": "string", "title": "Choice" if allow_other else "Answer"}
        if choices:
            answer_field["enum"] = choices
        properties: dict[str, Any] = {"answer": answer_field}
        if allow_other:
            properties["other"] = {"type": "string", "title": "Something else", "description": "Or type your answer"}
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if not allow_other:
            schema["required"] = ["answer"]
        try:
            result = await self.client.elicit_form(question, schema, tool_call_id)
        except BadAnswer as exc:
            log.warning("unreadable answer to elicitation/create: %s", exc.message)
            return Answer("dismissed", reason="the editor's answer had no action")
        except RequestError as exc:
            return Answer("unavailable", reason=f"the editor could not show the question: {_reason(exc)}")
        action = result.action
        if action == "decline":
            return Answer("declined")
        if action == "cancel":
            return Answer("dismissed")
        if action != "accept":
            log.warning("unknown answer to elicitation/create: %.200r", action)
            return Answer("dismissed", reason=f"the editor answered {action[:100]!r}")
        fields = result.content
        answer = _filled(fields.get("answer"))
        other = _filled(fields.get("other")) if allow_other else None
        if answer is not None and choices and answer not in choices:
            # Not one of the choices (a lax form): still what the user gave, so it is passed on as typed.
            answer, other = None, answer if other is None else f"{answer}\n{other}"
        if answer is None and other is None:
            return Answer("dismissed", reason="the form was accepted without an answer")
        if choices:
            return Answer("answered", choice=answer, text=other)
        return Answer("answered", text=answer)

    async def _permission(self, question: str, choices: list[str], tool_call_id: str | None) -> Answer:
        options: list[PermissionOption] = [
            {"optionId": f"choice-{index}", "name": choice, "kind": "allow_once"}
            for index, choice in enumerate(choices, 1)
        ]
        options.append({"optionId": DECLINE_OPTION, "name": "None of these", "kind": "reject_once"})
        tool_call: dict[str, Any] = {
            "toolCallId": tool_call_id or new_id("call"),
            "title": question_title(question),
            "content": [{"type": "content", "content": {"type": "text", "text": question}}],
        }
        try:
            result = await self.client.request_permission(tool_call, options)
        except BadAnswer as exc:
            log.warning("unexpected answer to a question: %s", exc.message)
            return Answer("dismissed", reason="the editor's answer named none of the options")
        except RequestError as exc:
            return Answer("unavailable", reason=f"the editor could not show the question: {_reason(exc)}")
        if result.outcome == "cancelled":
            if self.cancel_turn is not None:
                self.cancel_turn()
                await anyio.lowlevel.checkpoint()  # the turn's scope is cancelled now: this raises
            return Answer("dismissed")
        chosen = result.option_id
        if chosen == DECLINE_OPTION:
            return Answer("declined")
        for index, choice in enumerate(choices, 1):
            if chosen == f"choice-{index}":
                return Answer("answered", choice=choice)
        log.warning("unexpected answer to a question: %.200r", chosen)
        return Answer("dismissed", reason="the editor's answer named none of the options")


def _filled(value: Any) -> str | None:
    """A form field's value as an answer: a string with something in it, else None."""
    return value if isinstance(value, str) and value.strip() else None
