"""``ask_user`` through the in-memory editor: the form (``elicitation/create``) and each of its answers,
the permission dialog for a few choices without forms, "cannot ask here" otherwise, every mode, and
``session/cancel`` while a question is open. Every message the agent sends is checked against the schema."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.editor.questions import EditorQuestions
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import Editor, ElicitationPolicy, FakeClient, PermissionPolicy, connect
from refagent.tools.ask import AskUser, result_of
from refagent.tools.base import Answer
from refagent.tools.runner import parse_arguments
from tests.support.clients import session_client
from tests.support.tool_fakes import Nothing, bare_sandbox, make_ctx

pytestmark = pytest.mark.anyio

FORM = {"elicitation": {"form": {}}}
QUESTION = "Which database should the service use?"
CHOICES = ["PostgreSQL", "SQLite", "MySQL"]


def ask(**args: Any) -> ToolCallRequest:
    return ToolCallRequest(id="model_ask", name="ask_user", arguments=json.dumps(args))


def settings(*responses: Any) -> Settings:
    model = ScriptedModel(list(responses))
    return Settings(
        make_model=lambda profile: model, make_sandbox=OwnSandboxes(bare_sandbox), tools=lambda: [AskUser()]
    )


def answering(result: dict[str, Any]) -> ElicitationPolicy:
    async def policy(params: dict[str, Any]) -> dict[str, Any]:
        return result

    return policy


def tool_results(editor: Editor, sid: str) -> list[str]:
    return [m["content"] for m in editor.agent.sessions[sid].history if m["role"] == "tool"]


def calls(editor: Editor, sid: str) -> list[dict[str, Any]]:
    return [u for u in editor.updates(sid) if "toolCallId" in u]


async def run(
    call: ToolCallRequest,
    *,
    capabilities: dict[str, Any] | None = None,
    elicitation: ElicitationPolicy | None = None,
    permission: PermissionPolicy | None = None,
    mode: str | None = None,
    check: Any,
) -> tuple[Editor, str, dict[str, Any]]:
    """One turn in which the model calls ``call`` and then says "ok"; the editor (still usable for its
    records after the block), the session id and the prompt's result."""
    client = FakeClient(elicitation=elicitation)
    if permission is not None:
        client.permission = permission
    async with connect(settings([call], text("ok")), client=client, check=check) as editor:
        await editor.initialize(capabilities)
        sid = await editor.new_session("/ws")
        if mode is not None:
            await editor.request("session/set_mode", {"sessionId": sid, "modeId": mode})
        result = await editor.prompt(sid, "go")
    return editor, sid, result


# -- the form -------------------------------------------------------------------------------------


async def test_a_choice_through_the_form(check: Any) -> None:
    editor, sid, result = await run(
        ask(question=QUESTION, choices=CHOICES),
        capabilities=FORM,
        elicitation=answering({"action": "accept", "content": {"answer": "SQLite"}}),
        check=check,
    )
    assert result == {"stopReason": "end_turn"}
    [request] = editor.client.elicitation_requests
    announced = calls(editor, sid)[0]
    assert announced["title"] == QUESTION
    assert announced["kind"] == "other"
    assert request == {
        "sessionId": sid,
        "toolCallId": announced["toolCallId"],
        "mode": "form",
        "message": QUESTION,
        "requestedSchema": {
            "type": "object",
            "properties": {"answer": {"type": "string", "title": "Answer", "enum": CHOICES}},
            "required": ["answer"],
        },
    }
    assert tool_results(editor, sid) == ["The user chose: SQLite"]
    assert editor.client.permission_requests == []  # the question needs no permission
    assert calls(editor, sid)[-1]["status"] == "completed"
    assert calls(editor, sid)[-1]["rawOutput"] == {"outcome": "answered", "choice": "SQLite"}


async def test_free_text_through_the_form(check: Any) -> None:
    editor, sid, _ = await run(
        ask(question="What should the new command be called?"),
        capabilities=FORM,
        elicitation=answering({"action": "accept", "content": {"answer": "sync-all"}}),
        check=check,
    )
    [request] = editor.client.elicitation_requests
    assert request["requestedSchema"]["properties"] == {"answer": {"type": "string", "title": "Answer"}}
    assert tool_results(editor, sid) == ["The user answered: sync-all"]


async def test_allow_other_adds_a_free_text_field(check: Any) -> None:
    editor, sid, _ = await run(
        ask(question=QUESTION, choices=CHOICES, allow_other=True),
        capabilities=FORM,
        elicitation=answering({"action": "accept", "content": {"other": "DuckDB"}}),
        check=check,
    )
    [request] = editor.client.elicitation_requests
    schema = request["requestedSchema"]
    assert set(schema["properties"]) == {"answer", "other"}
    assert "required" not in schema  # either field may be the answer
    assert tool_results(editor, sid) == ["The user answered: DuckDB"]


@pytest.mark.parametrize(
    ("answer", "expected", "status"),
    [
        ({"action": "decline"}, "The user declined to answer.", "completed"),
        ({"action": "cancel"}, "The user dismissed the question without answering.", "completed"),
        ({"action": "_snooze"}, "The user dismissed the question without answering (the editor answered", "completed"),
        ({"action": "accept", "content": {}}, "dismissed the question without answering (the form was", "completed"),
        ({"action": "accept", "content": {"answer": "Oracle"}}, "The user answered: Oracle", "completed"),
    ],
)
async def test_each_form_answer_says_what_happened(
    answer: dict[str, Any], expected: str, status: str, check: Any
) -> None:
    editor, sid, result = await run(
        ask(question=QUESTION, choices=CHOICES), capabilities=FORM, elicitation=answering(answer), check=check
    )
    assert result == {"stopReason": "end_turn"}
    [said] = tool_results(editor, sid)
    assert expected in said
    assert calls(editor, sid)[-1]["status"] == status


async def test_an_editor_error_means_cannot_ask_here(check: Any) -> None:
    async def broken(params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError("form renderer crashed")

    editor, sid, result = await run(ask(question=QUESTION), capabilities=FORM, elicitation=broken, check=check)
    assert result == {"stopReason": "end_turn"}
    [said] = tool_results(editor, sid)
    assert said.startswith("Cannot ask here (the editor could not show the question: form renderer crashed)")
    assert "end your turn and ask the question in your message" in said
    assert calls(editor, sid)[-1]["status"] == "failed"


async def test_read_only_mode_still_asks(check: Any) -> None:
    editor, sid, _ = await run(
        ask(question=QUESTION, choices=CHOICES),
        capabilities=FORM,
        elicitation=answering({"action": "accept", "content": {"answer": "MySQL"}}),
        mode="read-only",
        check=check,
    )
    assert len(editor.client.elicitation_requests) == 1
    assert editor.client.permission_requests == []
    assert tool_results(editor, sid) == ["The user chose: MySQL"]


# -- without forms ---------------------------------------------------------------------------------


def pick(option_id: str) -> PermissionPolicy:
    async def policy(params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    return policy


@pytest.mark.parametrize("capabilities", [None, {"elicitation": {}}, {"elicitation": {"form": None, "url": {}}}])
async def test_choices_without_forms_go_through_the_permission_dialog(
    capabilities: dict[str, Any] | None, check: Any
) -> None:
    """``elicitation: {}`` (or a URL mode only) advertises no forms."""
    editor, sid, result = await run(
        ask(question=QUESTION, choices=CHOICES), capabilities=capabilities, permission=pick("choice-2"), check=check
    )
    assert result == {"stopReason": "end_turn"}
    assert editor.client.elicitation_requests == []
    [asked] = editor.client.permission_requests
    call_id = calls(editor, sid)[0]["toolCallId"]
    assert asked["toolCall"]["toolCallId"] == call_id
    assert asked["toolCall"]["title"] == QUESTION
    assert asked["options"] == [
        {"optionId": "choice-1", "name": "PostgreSQL", "kind": "allow_once"},
        {"optionId": "choice-2", "name": "SQLite", "kind": "allow_once"},
        {"optionId": "choice-3", "name": "MySQL", "kind": "allow_once"},
        {"optionId": "decline", "name": "None of these", "kind": "reject_once"},
    ]
    assert tool_results(editor, sid) == ["The user chose: SQLite"]


async def test_none_of_these_is_a_decline(check: Any) -> None:
    editor, sid, _ = await run(ask(question=QUESTION, choices=CHOICES), permission=pick("decline"), check=check)
    assert tool_results(editor, sid)[0].startswith("The user declined to answer.")


async def test_a_cancelled_permission_answer_cancels_the_turn(check: Any) -> None:
    async def cancelled(params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": {"outcome": "cancelled"}}

    editor, sid, result = await run(ask(question=QUESTION, choices=CHOICES), permission=cancelled, check=check)
    assert result == {"stopReason": "cancelled"}
    assert calls(editor, sid)[-1]["status"] == "failed"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"question": "What should the command be called?"}, "free-text answer"),
        ({"question": QUESTION, "choices": [f"option {i}" for i in range(7)]}, "at most 6 choices, not 7"),
    ],
)
async def test_otherwise_it_cannot_ask_here(args: dict[str, Any], why: str, check: Any) -> None:
    editor, sid, result = await run(ask(**args), check=check)
    assert result == {"stopReason": "end_turn"}
    assert editor.client.permission_requests == []
    assert editor.client.elicitation_requests == []
    [said] = tool_results(editor, sid)
    assert said.startswith("Cannot ask here (")
    assert why in said
    assert said.endswith("end your turn and ask the question in your message.")


# -- cancellation ----------------------------------------------------------------------------------


def waiting(asked: anyio.Event) -> Any:
    async def never(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError

    return never


@pytest.mark.parametrize("method", ["elicitation/create", "session/request_permission"])
async def test_session_cancel_ends_an_open_question(method: str, check: Any) -> None:
    asked = anyio.Event()
    client = FakeClient()
    capabilities: dict[str, Any] | None = None
    if method == "elicitation/create":
        client.elicitation, capabilities = waiting(asked), FORM
    else:
        client.permission = waiting(asked)
    async with connect(
        settings([ask(question=QUESTION, choices=CHOICES)], text("next")), client=client, check=check
    ) as editor:
        await editor.initialize(capabilities)
        sid = await editor.new_session("/ws")
        results: list[Any] = []
        answered = anyio.Event()

        async def prompt() -> None:
            results.append(await editor.prompt(sid, "go"))
            answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            with anyio.fail_after(5):
                await asked.wait()
            started = time.monotonic()
            await editor.cancel(sid)
            with anyio.fail_after(2):
                await answered.wait()
        assert time.monotonic() - started < 1
        assert results == [{"stopReason": "cancelled"}]
        sent = editor.transcript.sent_by("agent")
        [question] = [m for m in sent if m.get("method") == method]
        withdrawn = [m for m in sent if m.get("method") == "$/cancel_request"]
        assert [m["params"]["requestId"] for m in withdrawn] == [question["id"]]
        last = calls(editor, sid)[-1]
        assert last["status"] == "failed"
        assert "while the question was open" in last["content"][0]["content"]["text"]
        # the history is whole: the next prompt runs
        assert await editor.prompt(sid, "again") == {"stopReason": "end_turn"}


# -- the pieces --------------------------------------------------------------------------------------


def test_arguments_are_checked() -> None:
    tool = AskUser()
    parse_arguments(json.dumps({"question": "Q?", "choices": ["a", "b"], "allow_other": True}), tool.parameters)
    assert tool.title({}) == "Ask the user"
    assert tool.title({"question": "First line?\nMore detail."}) == "First line?"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"question": "  "}, "non-empty"),
        ({"question": "Q?", "choices": ["only"]}, "Give 2 to 10 choices (1 given)"),
        ({"question": "Q?", "choices": [str(i) for i in range(11)]}, "(11 given)"),
        ({"question": "Q?", "choices": ["a", "a"]}, "differ"),
        ({"question": "Q?", "choices": ["a", ""]}, "choices[1] is empty"),
        ({"question": "Q?", "choices": ["a", "x" * 101]}, "at most 100 characters"),
        ({"question": "Q?", "choices": ["a", 3]}, "list of strings"),
        ({"question": "x" * 2001}, "longer than 2000"),
    ],
)
async def test_bad_arguments_are_refused_before_asking(args: dict[str, Any], error: str, tmp_path: Any) -> None:
    from refagent.errors import ToolError

    with pytest.raises(ToolError, match=error.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        await AskUser().prepare(args, make_ctx(str(tmp_path)))


async def test_no_way_to_ask_means_cannot_ask_here(tmp_path: Any) -> None:
    plan = await AskUser().prepare({"question": "Q?"}, make_ctx(str(tmp_path)))
    assert not plan.mutating
    assert not plan.outside
    result = await plan.execute()
    assert result.failed
    assert result.output.startswith("Cannot ask here (this editor offers no way to ask)")


async def test_a_long_question_shows_whole_in_the_call(tmp_path: Any) -> None:
    question = "Which layout?\nA keeps one module; B splits it in three."
    plan = await AskUser().prepare({"question": question}, make_ctx(str(tmp_path)))
    assert plan.title == "Which layout?"
    assert plan.preview == [{"type": "content", "content": {"type": "text", "text": question}}]
    short = await AskUser().prepare({"question": QUESTION}, make_ctx(str(tmp_path)))
    assert short.title == QUESTION
    assert short.preview == []


def test_a_choice_and_typed_text_both_reach_the_model() -> None:
    assert result_of(Answer("answered", choice="a", text="b")).output == "The user chose: a\nand wrote: b"


def test_questions_read_the_form_capability() -> None:
    peer: Any = Nothing()
    for caps, form in [
        ({}, False),
        ({"elicitation": {}}, False),
        ({"elicitation": {"form": None}}, False),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {"_meta": {}}}}, True),
    ]:
        questions = EditorQuestions(session_client(peer, "s1", caps))  # type: ignore[arg-type]
        assert isinstance(questions, EditorQuestions)
        assert questions.form is form
