"""The agent-side client (:mod:`refagent.acp.client`): every method sends what the schema asks for (each
request and notification checked against the official schema, with its ``id``), and reads the answer into
a typed value; an answer outside the schema's shape is a :class:`BadAnswer`, an error response the
connection's :class:`RequestError`."""

from __future__ import annotations

from typing import Any

import pytest

from refagent.acp.awaited import Awaited, current, watching
from refagent.acp.client import BadAnswer, ExitStatus, PermissionAnswer, SessionClient, TerminalOutput
from refagent.acp.errors import RequestError
from tests.support.acp_schema import validate_agent_message
from tests.support.clients import session_client

pytestmark = pytest.mark.anyio


class Editor:
    """A peer that checks each message against the schema and answers with what a test set."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        validate_agent_message({"jsonrpc": "2.0", "id": len(self.sent), "method": method, "params": params}, None)
        self.sent.append((method, params))
        answer = self.answers.get(method)
        if isinstance(answer, RequestError):
            raise answer
        return answer

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        validate_agent_message({"jsonrpc": "2.0", "method": method, "params": params}, None)
        self.sent.append((method, params))

    async def send_lines(self, data: bytes) -> None:
        raise AssertionError("not used")


def client(**answers: Any) -> tuple[SessionClient, Editor]:
    editor = Editor({method.replace("__", "/"): answer for method, answer in answers.items()})
    return session_client(editor, "sess_1"), editor


TOOL_CALL = {"toolCallId": "call_1", "title": "Write a.txt", "kind": "edit", "status": "pending"}
OPTIONS: Any = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]


async def test_an_update_is_one_session_update_notification() -> None:
    session, editor = client()
    await session.send_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
    assert editor.sent == [
        (
            "session/update",
            {
                "sessionId": "sess_1",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
            },
        )
    ]


async def test_a_permission_answer_is_read_into_its_outcome() -> None:
    session, editor = client(session__request_permission={"outcome": {"outcome": "selected", "optionId": "allow"}})
    assert await session.request_permission(TOOL_CALL, OPTIONS) == PermissionAnswer("selected", "allow")
    assert editor.sent[0][1] == {"sessionId": "sess_1", "toolCall": TOOL_CALL, "options": OPTIONS}
    session, _ = client(session__request_permission={"outcome": {"outcome": "cancelled"}})
    assert await session.request_permission(TOOL_CALL, OPTIONS) == PermissionAnswer("cancelled")
    session, _ = client(session__request_permission={"outcome": {"outcome": "selected", "optionId": 7}})
    assert await session.request_permission(TOOL_CALL, OPTIONS) == PermissionAnswer("selected", None)


@pytest.mark.parametrize("answer", [None, [], "allow", {}, {"outcome": "allow"}, {"outcome": {"outcome": "maybe"}}])
async def test_a_permission_answer_without_an_outcome_is_a_bad_answer(answer: Any) -> None:
    session, _ = client(session__request_permission=answer)
    with pytest.raises(BadAnswer, match="no outcome"):
        await session.request_permission(TOOL_CALL, OPTIONS)


async def test_files_are_read_and_written_through_the_editor() -> None:
    session, editor = client(fs__read_text_file={"content": "text"}, fs__write_text_file=None)
    assert await session.read_text_file("/w/a.txt") == "text"
    await session.write_text_file("/w/a.txt", "new")
    assert editor.sent == [
        ("fs/read_text_file", {"sessionId": "sess_1", "path": "/w/a.txt"}),
        ("fs/write_text_file", {"sessionId": "sess_1", "path": "/w/a.txt", "content": "new"}),
    ]
    for answer in (None, {}, {"content": 3}):
        session, _ = client(fs__read_text_file=answer)
        with pytest.raises(BadAnswer, match="no content"):
            await session.read_text_file("/w/a.txt")


async def test_a_terminal_from_start_to_release() -> None:
    session, editor = client(
        terminal__create={"terminalId": "term_1"},
        terminal__wait_for_exit={"exitCode": 3, "signal": None},
        terminal__output={"output": "out", "truncated": True, "exitStatus": {"exitCode": 3}},
        terminal__kill=None,
        terminal__release={},
    )
    assert await session.create_terminal("/bin/sh", ["-c", "exit 3"], "/w", 1024) == "term_1"
    assert await session.wait_for_terminal_exit("term_1") == ExitStatus(exit_code=3)
    assert await session.terminal_output("term_1") == TerminalOutput("out", True, ExitStatus(exit_code=3))
    await session.kill_terminal("term_1")
    await session.release_terminal("term_1")
    assert [method for method, _ in editor.sent] == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/kill",
        "terminal/release",
    ]
    assert editor.sent[0][1] == {
        "sessionId": "sess_1",
        "command": "/bin/sh",
        "args": ["-c", "exit 3"],
        "cwd": "/w",
        "outputByteLimit": 1024,
    }


async def test_terminal_answers_of_the_wrong_shape() -> None:
    session, _ = client(terminal__create={"terminalId": 1})
    with pytest.raises(BadAnswer, match="terminal id"):
        await session.create_terminal("/bin/sh", [], "/w", 1024)
    session, _ = client(
        terminal__wait_for_exit=None,
        terminal__output={"output": ["x"], "truncated": "yes", "exitStatus": {"exitCode": True, "signal": 9}},
    )
    assert await session.wait_for_terminal_exit("t") == ExitStatus()
    assert await session.terminal_output("t") == TerminalOutput("", False, ExitStatus())


async def test_a_form_and_its_answer() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    session, editor = client(elicitation__create={"action": "accept", "content": {"answer": "yes"}})
    answer = await session.elicit_form("Go on?", schema, "call_1")
    assert (answer.action, answer.content) == ("accept", {"answer": "yes"})
    assert editor.sent[0][1] == {
        "sessionId": "sess_1",
        "mode": "form",
        "message": "Go on?",
        "toolCallId": "call_1",
        "requestedSchema": schema,
    }
    session, _ = client(elicitation__create={"action": "dance"})
    assert (await session.elicit_form("Go on?", schema)).action == "dance"  # the caller judges it
    session, _ = client(elicitation__create={"content": {}})
    with pytest.raises(BadAnswer, match="no action"):
        await session.elicit_form("Go on?", schema)


async def test_an_error_response_is_the_connections_error() -> None:
    session, _ = client(fs__read_text_file=RequestError("no buffer", code=-32002))
    with pytest.raises(RequestError) as raised:
        await session.read_text_file("/w/a.txt")
    assert raised.value.code == -32002
    assert not isinstance(raised.value, BadAnswer)


def test_the_capabilities_say_what_the_client_offers() -> None:
    editor = Editor({})
    nothing = SessionClient(editor, "s", {})
    assert (nothing.reads_files, nothing.writes_files, nothing.has_terminals, nothing.has_forms) == (False,) * 4
    some = SessionClient(editor, "s", {"fs": {"readTextFile": True}, "terminal": True, "elicitation": {"form": {}}})
    assert (some.reads_files, some.writes_files, some.has_terminals, some.has_forms) == (True, False, True, True)
    assert not SessionClient(editor, "s", {"terminal": "yes", "elicitation": {"form": None}}).has_terminals  # type: ignore[typeddict-item]


async def test_the_editors_own_work_is_recorded_while_it_is_awaited_and_only_inside_watching() -> None:
    """Inside :func:`watching`, a request whose answer is the editor's work is recorded as awaited while it
    is (with the time it was sent); a command's run (``terminal/wait_for_exit``) and the user's choice are
    not; outside, nothing is recorded."""
    now = [10.0]
    awaited = Awaited(clock=lambda: now[0])
    seen: list[tuple[str, float] | None] = []

    class Slow(Editor):
        async def request(self, method: str, params: dict[str, Any]) -> Any:
            now[0] += 3
            seen.append(awaited.oldest())
            return await super().request(method, params)

    editor = Slow({"fs/read_text_file": {"content": "x"}, "terminal/wait_for_exit": {"exitCode": 0}})
    session = session_client(editor, "sess_1")
    await session.read_text_file("/a")  # outside watching: not recorded
    with watching(awaited):
        await session.read_text_file("/a")
        await session.wait_for_terminal_exit("term_1")
        assert current() is awaited
    assert current() is None
    assert seen == [None, ("fs/read_text_file", 3.0), None]
    assert awaited.oldest() is None  # answered: no longer awaited
