"""``ask_user`` in a real ``refagent`` process, over real pipes, against the scripted OpenAI-compatible
server: a client with form elicitation answers a form, one without picks a choice in the permission
dialog, and ``session/cancel`` while a question is open ends the turn ``cancelled`` at once, withdraws
the question and leaves the agent serving the next prompt. Every message the agent writes is validated
against the ACP schema (:class:`~tests.support.helpers_process.AgentProcess` with ``check``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-test-key"
QUESTION = "Which database should the service use?"
CHOICES = ["PostgreSQL", "SQLite", "MySQL"]
FORM = {"elicitation": {"form": {}}}


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    return agent_env(
        tmp_path / "home",
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY=KEY,
        REFAGENT_MODEL="test-model",
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


def asking(**args: Any) -> Turn:
    return Turn(tool_calls=[ToolCall("ask_user", {"question": QUESTION, **args})])


async def send_prompt(agent: AgentProcess, sid: str, text: str) -> int:
    return await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


async def answer(agent: AgentProcess, request: dict[str, Any], result: dict[str, Any]) -> None:
    await agent.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


async def until_response(agent: AgentProcess, msg_id: int) -> dict[str, Any]:
    response = await agent.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)
    assert "result" in response, f"{response}\n{agent.stderr()[-3000:]}"
    result: dict[str, Any] = response["result"]
    return result


def tool_results(server: ScriptedOpenAIServer) -> list[str]:
    """What the model was told of each tool call, from its last request."""
    messages = server.chat_requests[-1].body["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


async def test_a_client_with_forms_answers_through_elicitation(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer([asking(choices=CHOICES), Turn(text="SQLite it is.")], api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize(FORM)
            sid = await agent.new_session(project)
            msg_id = await send_prompt(agent, sid, "Set up the database.")
            request = await agent.wait_for(lambda m: m.get("method") == "elicitation/create")
            params = request["params"]
            assert params["sessionId"] == sid
            assert params["mode"] == "form"
            assert params["message"] == QUESTION
            assert params["requestedSchema"]["properties"]["answer"]["enum"] == CHOICES
            announced = next(u for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "tool_call")
            assert params["toolCallId"] == announced["toolCallId"]
            assert announced["title"] == QUESTION
            await answer(agent, request, {"action": "accept", "content": {"answer": "SQLite"}})
            assert (await until_response(agent, msg_id))["stopReason"] == "end_turn"
            assert agent.text(sid) == "SQLite it is."
            assert not any(m.get("method") == "session/request_permission" for m in agent.agent_messages())
        assert tool_results(server) == ["The user chose: SQLite"]


async def test_a_client_without_forms_picks_in_the_permission_dialog(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [asking(choices=CHOICES), asking(), Turn(text="Noted.")]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"elicitation": {}})  # advertises nothing
            sid = await agent.new_session(project)
            msg_id = await send_prompt(agent, sid, "Set up the database.")
            request = await agent.wait_for(lambda m: m.get("method") == "session/request_permission")
            options = request["params"]["options"]
            assert [o["name"] for o in options] == [*CHOICES, "None of these"]
            assert [o["kind"] for o in options] == ["allow_once"] * 3 + ["reject_once"]
            assert request["params"]["toolCall"]["title"] == QUESTION
            await answer(agent, request, {"outcome": {"outcome": "selected", "optionId": options[2]["optionId"]}})
            assert (await until_response(agent, msg_id))["stopReason"] == "end_turn"
            assert not any(m.get("method") == "elicitation/create" for m in agent.agent_messages())
        chosen, free_text = tool_results(server)
        assert chosen == "The user chose: MySQL"
        assert free_text.startswith("Cannot ask here (this editor cannot show a question with a free-text answer)")


@pytest.mark.parametrize("form", [True, False], ids=["form", "permission"])
async def test_cancel_while_a_question_is_open(tmp_path: Path, check: Any, form: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    method = "elicitation/create" if form else "session/request_permission"
    with ScriptedOpenAIServer([asking(choices=CHOICES), Turn(text="Still here.")], api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize(FORM if form else None)
            sid = await agent.new_session(project)
            msg_id = await send_prompt(agent, sid, "Set up the database.")
            request = await agent.wait_for(lambda m: m.get("method") == method)
            started = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
            withdrawn = await agent.wait_for(lambda m: m.get("method") == "$/cancel_request")
            assert withdrawn["params"] == {"requestId": request["id"]}
            assert (await until_response(agent, msg_id))["stopReason"] == "cancelled"
            assert time.monotonic() - started < 2
            # A late answer to the withdrawn question is ignored; the agent serves the next prompt.
            late = (
                {"action": "accept", "content": {"answer": "SQLite"}} if form else {"outcome": {"outcome": "cancelled"}}
            )
            await answer(agent, request, late)
            next_id = await send_prompt(agent, sid, "Are you there?")
            assert (await until_response(agent, next_id))["stopReason"] == "end_turn"
            assert agent.text(sid) == "Still here."
            ended = [u for u in agent.transcript.updates(sid) if u.get("status") == "failed"]
            assert len(ended) == 1
            assert "while the question was open" in ended[0]["content"][0]["content"]["text"]
        [cancelled] = tool_results(server)
        assert "while the question was open" in cancelled
