"""ACP v2's items that v1 has no word for (``REFAGENT_ACP_V2=1``): a tool call cancelled alone
(``tool_call/cancel``), and a background command shown as a display-only terminal (``terminal_update``),
listed as background work in ``state_update`` and cancelled alone (``terminal/cancel``). Every message
is checked against the v2 schemas, strictly."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.server.v2 import ENV
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect
from tests.support.acp_schema_v2 import validate_agent_message_v2
from tests.support.acp_v2_editor import V2_INIT, idle, until, updates

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def v2_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def run(command: str, **extra: Any) -> ToolCallRequest:
    return ToolCallRequest(id="call_1", name="run_command", arguments=json.dumps({"command": command, **extra}))


async def start(editor: Editor, cwd: Path, words: str) -> str:
    await editor.request("initialize", V2_INIT)
    sid: str = (await editor.request("session/new", {"cwd": str(cwd)}))["sessionId"]
    await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": words}]})
    return sid


def of_kind(editor: Editor, sid: str, kind: str) -> list[dict[str, Any]]:
    return [u for u in updates(editor, sid) if u["sessionUpdate"] == kind]


def output(update: dict[str, Any]) -> str:
    return base64.b64decode(update["output"]["data"], validate=True).decode()


async def test_a_tool_call_cancelled_alone_ends_cancelled_and_the_turn_goes_on(tmp_path: Path) -> None:
    model = ScriptedModel([[run("sleep 30")], text("Understood.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        sid = await start(editor, tmp_path, "wait")

        def cancellable() -> list[dict[str, Any]]:
            return [u for u in of_kind(editor, sid, "tool_call_update") if u.get("capabilities") == {"cancel": {}}]

        await until(lambda: bool(cancellable()))
        call_id = cancellable()[0]["toolCallId"]
        with pytest.raises(RequestError) as unknown:
            await editor.request("tool_call/cancel", {"sessionId": sid, "toolCallId": "call_nope"})
        assert unknown.value.code == -32602
        assert await editor.request("tool_call/cancel", {"sessionId": sid, "toolCallId": call_id}) == {}
        end = await idle(editor, sid)
        with pytest.raises(RequestError) as again:  # it has ended: nothing to cancel
            await editor.request("tool_call/cancel", {"sessionId": sid, "toolCallId": call_id})
        assert again.value.code == -32602
        with pytest.raises(RequestError) as no_session:
            await editor.request("tool_call/cancel", {"sessionId": "sess_nope", "toolCallId": call_id})
        assert no_session.value.code == -32002
    assert end["stopReason"] == "end_turn"  # the turn went on: the model answered
    last = [u for u in of_kind(editor, sid, "tool_call_update") if u["toolCallId"] == call_id][-1]
    assert last["status"] == "cancelled"
    assert last["capabilities"] is None
    (result,) = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert "cancelled" in result
    states = [u["state"] for u in of_kind(editor, sid, "state_update")]
    assert states.count("idle") == 1  # cancelling the call did not end the foreground work by itself


@pytest.mark.slow  # its output is shown once a second
async def test_a_background_command_is_a_terminal_and_background_work(tmp_path: Path) -> None:
    script = "echo started; sleep 0.2; echo more; sleep 60"
    model = ScriptedModel([[run(script, background=True)], text("It runs.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        sid = await start(editor, tmp_path, "serve")
        end = await idle(editor, sid)
        (announced, *_) = of_kind(editor, sid, "terminal_update")
        terminal_id = announced["terminalId"]
        await until(lambda: any("more" in output(u) for u in of_kind(editor, sid, "terminal_update") if "output" in u))
        assert await editor.request("terminal/cancel", {"sessionId": sid, "terminalId": terminal_id}) == {}
        await until(lambda: any("exitStatus" in u for u in of_kind(editor, sid, "terminal_update")))
        await until(lambda: of_kind(editor, sid, "state_update")[-1]["background"] == [])
        with pytest.raises(RequestError) as exited:
            await editor.request("terminal/cancel", {"sessionId": sid, "terminalId": terminal_id})
        assert exited.value.code == -32602
        seen = updates(editor, sid)
    listed = [{"type": "terminal", "terminalId": terminal_id}]
    assert announced == {
        "sessionUpdate": "terminal_update",
        "terminalId": terminal_id,
        "command": script,
        "cwd": str(tmp_path),
        "capabilities": {"cancel": {}},
    }
    first_listing = next(i for i, u in enumerate(seen) if u.get("background") == listed)
    assert seen.index(announced) < first_listing  # announced before it is listed
    assert end["background"] == listed  # the turn ended while it runs: idle, with background work
    calls = [u for u in seen if u["sessionUpdate"] == "tool_call_update"]
    returned = next(u for u in calls if {"type": "terminal", "terminalId": terminal_id} in u.get("content", []))
    assert returned["status"] == "completed"  # it returned control to the model; the terminal lives on
    assert seen.index(announced) < seen.index(returned) < first_listing
    assert {"type": "terminal", "terminalId": terminal_id} in calls[-1]["content"]
    assert "Stopped by the user." in json.dumps(calls[-1]["content"])
    assert "status" not in calls[-1]  # the call ended long ago: the end is the terminal's
    streamed = [u for u in calls[:-1] if "started\\nmore" in json.dumps(u)]
    assert not streamed  # while it ran, its output went to the terminal, not into the call
    exit_update = next(u for u in seen if "exitStatus" in u)
    assert exit_update["capabilities"] is None
    assert "started\nmore\n" in output(exit_update)
    assert seen.index(exit_update) < seen.index(calls[-1]) < len(seen) - 1
    last = seen[-1]
    assert last["sessionUpdate"] == "state_update"
    assert last == {"sessionUpdate": "state_update", "state": "idle", "background": []}  # no new stop reason


async def test_a_question_is_a_form_to_a_v2_client_that_shows_forms(tmp_path: Path) -> None:
    """``ask_user`` to a v2 client that advertises form elicitation: ``elicitation/create`` (the shape v1
    and v2 share), the session ``requires_action`` while it waits; the answer reaches the model."""
    asked: list[dict[str, Any]] = []

    async def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"answer": "SQLite"}}

    question = {"question": "Which database?", "choices": ["PostgreSQL", "SQLite"]}
    ask = ToolCallRequest(id="call_1", name="ask_user", arguments=json.dumps(question))
    model = ScriptedModel([[ask], text("SQLite it is.")])
    client = FakeClient(elicitation=answer)
    forms = {**V2_INIT, "capabilities": {"elicitation": {"form": {}}}}
    async with connect(settings(tmp_path, model), client=client, check=validate_agent_message_v2) as editor:
        await editor.request("initialize", forms)
        sid = (await editor.request("session/new", {"cwd": str(tmp_path)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "pick"}]})
        end = await idle(editor, sid)
        states = [u["state"] for u in of_kind(editor, sid, "state_update")]
    assert end["stopReason"] == "end_turn"
    (form,) = asked
    assert form["mode"] == "form"
    assert form["message"] == "Which database?"
    assert form["requestedSchema"]["properties"]["answer"]["enum"] == ["PostgreSQL", "SQLite"]
    assert states == ["running", "requires_action", "running", "idle"]
    (result,) = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert "SQLite" in result


async def test_without_forms_a_question_is_a_permission_request(tmp_path: Path) -> None:
    chose: list[dict[str, Any]] = []

    async def choose(params: dict[str, Any]) -> dict[str, Any]:
        chose.append(params)
        second = params["options"][1]["optionId"]
        return {"outcome": {"outcome": "selected", "optionId": second}}

    question = {"question": "Which database?", "choices": ["PostgreSQL", "SQLite"]}
    ask = ToolCallRequest(id="call_1", name="ask_user", arguments=json.dumps(question))
    model = ScriptedModel([[ask], text("SQLite it is.")])
    async with connect(
        settings(tmp_path, model), client=FakeClient(permission=choose), check=validate_agent_message_v2
    ) as editor:
        sid = await start(editor, tmp_path, "pick")
        await idle(editor, sid)
    (question_asked,) = chose
    assert [o["name"] for o in question_asked["options"]][:2] == ["PostgreSQL", "SQLite"]
    assert not editor.client.elicitation_requests  # no form to a client that did not offer them
    (result,) = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert "SQLite" in result


async def test_a_resume_ends_the_terminals_of_the_session_it_reopens(tmp_path: Path) -> None:
    """Resumed on the same connection, the session is opened again and its background commands are
    stopped: each terminal says it has exited before the state that no longer lists it."""
    model = ScriptedModel([[run("sleep 60", background=True)], text("It runs.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        sid = await start(editor, tmp_path, "serve")
        end = await idle(editor, sid)
        (listed,) = end["background"]
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        seen = updates(editor, sid)
    exited = next(i for i, u in enumerate(seen) if u.get("terminalId") == listed["terminalId"] and "exitStatus" in u)
    assert seen[-1] == {"sessionUpdate": "state_update", "state": "idle", "background": []}
    assert exited < len(seen) - 1
