"""Subagents (the ``task`` tool) in a real ``refagent`` process, over real pipes, against the scripted
OpenAI-compatible server, each child's requests following a script of their own (``routes``, by the
child's instructions). A child's permission question reaches the editor named for the child, and is
answered, rejected, or cancelled with the turn; two children run at once; a child over its budget fails
its call and the turn goes on; a client that shows subagents sees the child session; a load replays a turn
with children; ``/undo`` takes back what a child changed. After every turn, no question of the agent's is
left without an answer or a withdrawal. Every message the agent writes is validated against the ACP
schema (the unstable one for the subagent updates)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import KEY, config_path, env_for, load, prompt

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PERMISSION = "session/request_permission"


def task(title: str, prompt_text: str, tools: list[str] | None = None) -> ToolCall:
    args: dict[str, Any] = {"task": title, "prompt": prompt_text}
    if tools is not None:
        args["tools"] = tools
    return ToolCall("task", args)


def edit(path: Path, old: str, new: str) -> Turn:
    return Turn(tool_calls=[ToolCall("edit_file", {"path": str(path), "old_string": old, "new_string": new})])


def project_with(tmp_path: Path, text: str = "helo world\n") -> tuple[Path, Path]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text(text)
    return project, project / "a.txt"


async def start_prompt(agent: AgentProcess, sid: str, text: str) -> int:
    return await agent.send_request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


async def reply(agent: AgentProcess, request: dict[str, Any], option_id: str) -> None:
    outcome = {"outcome": "selected", "optionId": option_id}
    await agent.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})


async def until_answer(agent: AgentProcess, msg_id: int) -> dict[str, Any]:
    response = await agent.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)
    assert "result" in response, f"{response}\n{agent.stderr()[-3000:]}"
    result: dict[str, Any] = response["result"]
    return result


def unanswered(agent: AgentProcess) -> list[dict[str, Any]]:
    """The agent's requests the client neither answered nor was told to forget (``$/cancel_request``)."""
    answered = {m["id"] for m in agent.transcript.sent_by("client") if "id" in m and "method" not in m}
    withdrawn = {m["params"]["requestId"] for m in agent.agent_messages() if m.get("method") == "$/cancel_request"}
    return [m for m in agent.agent_messages() if "method" in m and "id" in m and m["id"] not in answered | withdrawn]


def task_call(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """The parent's task call, folded from its updates."""
    call: dict[str, Any] = {}
    for update in updates:
        if update.get("sessionUpdate") in ("tool_call", "tool_call_update") and (
            update.get("name") == "task" or update.get("toolCallId") == call.get("toolCallId")
        ):
            call.update(update)
    return call


def folded(updates: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    """The tool call ``call_id`` as the updates of one session leave it."""
    call: dict[str, Any] = {}
    for update in updates:
        if update.get("toolCallId") == call_id:
            call.update(update)
    return call


def tool_results(server: ScriptedOpenAIServer, key: str = "") -> list[str]:
    """What the model was told of each tool call, in the last request (of the conversation whose first
    user message holds ``key``)."""
    requests = [r for r in server.chat_requests if key in r.body["messages"][1]["content"]] if key else None
    body = (requests or server.chat_requests)[-1].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("back", ["/undo", "/rewind 1"])
async def test_a_child_question_answered_reaches_the_editor_named_for_the_child(
    tmp_path: Path, check: Any, back: str
) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix the typo", "CHILD-A: fix the typo in a.txt", ["read_file", "edit_file"])])]
    child = [edit(target, "helo", "hello"), Turn(text="Fixed the typo in a.txt.", usage=(300, 20))]
    with ScriptedOpenAIServer([*script, Turn(text="All done.")], routes={"CHILD-A": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Fix the typo, with a helper.")
            asked = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            assert asked["params"]["sessionId"] == sid
            assert asked["params"]["toolCall"]["title"].startswith("[Fix the typo] ")
            waiting = task_call(agent.transcript.updates(sid))
            assert "Waiting for your answer: [Fix the typo]" in waiting["content"][0]["content"]["text"]
            await reply(agent, asked, "allow")
            result = await until_answer(agent, msg_id)
            assert result["stopReason"] == "end_turn"
            assert target.read_text() == "hello world\n"
            # The call the editor was asked about ends on the session it was asked on.
            asked_id = asked["params"]["toolCall"]["toolCallId"]
            announced = [u for u in agent.transcript.updates(sid) if u.get("toolCallId") == asked_id]
            assert announced[0]["sessionUpdate"] == "tool_call"  # known to the editor before it is asked about
            asked_call = folded(agent.transcript.updates(sid), asked_id)
            assert asked_call["status"] == "completed"
            assert asked_call["title"] == asked["params"]["toolCall"]["title"]
            assert asked_call["kind"] == "edit"
            shown = agent.transcript.updates(sid)
            call = task_call(shown)
            assert call["status"] == "completed"
            assert call["kind"] == "think"
            assert call["title"] == "Task: Fix the typo"
            texts = [c["content"]["text"] for c in call["content"]]
            assert texts[0].startswith("✓ ")
            assert texts[-1] == "Fixed the typo in a.txt."
            assert result["usage"]["inputTokens"] >= 300  # the child's tokens are the turn's
            assert agent.text(sid) == "All done."
            assert not unanswered(agent)

            # /undo and /rewind take back what the child changed, as part of the turn.
            undone, said = await prompt(agent, sid, back)
            assert undone["stopReason"] == "end_turn"
            assert target.read_text() == "helo world\n", said
        assert tool_results(server) == ["Fixed the typo in a.txt."]
        child_system = server.chat_requests[1].body["messages"][0]["content"]
        assert "You are a subagent" in child_system


async def test_a_child_question_rejected(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-R: fix a.txt", ["edit_file"])]), Turn(text="Understood.")]
    child = [edit(target, "helo", "hello"), Turn(text="The user declined the edit.")]
    with ScriptedOpenAIServer(script, routes={"CHILD-R": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Fix it.")
            asked = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            await reply(agent, asked, "reject")
            assert (await until_answer(agent, msg_id))["stopReason"] == "end_turn"
            assert (
                folded(agent.transcript.updates(sid), asked["params"]["toolCall"]["toolCallId"])["status"] == "failed"
            )
            assert target.read_text() == "helo world\n"
            assert task_call(agent.transcript.updates(sid))["status"] == "completed"
            assert not unanswered(agent)
        [declined] = tool_results(server, "CHILD-R")
        assert declined.startswith("Not run: The user declined this call.")
        assert tool_results(server) == ["The user declined the edit."]


@pytest.mark.parametrize("shown", [False, True], ids=["in-the-task-call", "as-a-session"])
async def test_cancel_while_a_child_question_is_open(tmp_path: Path, check: Any, shown: bool) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-C: fix a.txt", ["edit_file"])]), Turn(text="Still here.")]
    child = [edit(target, "helo", "hello")]
    with ScriptedOpenAIServer(script, routes={"CHILD-C": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}} if shown else None)
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Fix it.")
            asked = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            await agent.notify("session/cancel", {"sessionId": sid})
            withdrawn = await agent.wait_for(lambda m: m.get("method") == "$/cancel_request")
            assert withdrawn["params"] == {"requestId": asked["id"]}
            assert (await until_answer(agent, msg_id))["stopReason"] == "cancelled"
            assert task_call(agent.transcript.updates(sid))["status"] == "failed"
            asked_in = asked["params"]["sessionId"]  # the session's, or the child's own
            assert (asked_in != sid) is shown
            assert folded(agent.transcript.updates(asked_in), asked["params"]["toolCall"]["toolCallId"])["status"] == (
                "failed"
            )
            if shown:
                states = [u["state"] for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "subagent_update"]
                assert states[-1] == {"state": "idle", "stopReason": "cancelled"}
            assert not unanswered(agent)
            assert target.read_text() == "helo world\n"
            # The agent serves the next prompt; the model heard the task was cut off.
            result, _ = await prompt(agent, sid, "Are you there?")
            assert result["stopReason"] == "end_turn"
        [cut] = tool_results(server)
        assert "cancelled" in cut


async def test_two_children_run_at_once(tmp_path: Path, check: Any) -> None:
    project, one = project_with(tmp_path, "one\n")
    two = project / "b.txt"
    two.write_text("two\n")
    calls = [task("First", "CHILD-1: change one", ["edit_file"]), task("Second", "CHILD-2: change two", ["edit_file"])]
    routes = {
        "CHILD-1": [edit(one, "one", "ONE"), Turn(text="Changed one.")],
        "CHILD-2": [edit(two, "two", "TWO"), Turn(text="Changed two.")],
    }
    with ScriptedOpenAIServer([Turn(tool_calls=calls), Turn(text="Both done.")], routes=routes, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Change both.")
            # Both children ask before either is answered: they run side by side.
            first = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            second = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            titles = sorted(r["params"]["toolCall"]["title"].split("]")[0] for r in (first, second))
            assert titles == ["[First", "[Second"]
            await reply(agent, second, "allow")
            await reply(agent, first, "allow")
            assert (await until_answer(agent, msg_id))["stopReason"] == "end_turn"
            assert (one.read_text(), two.read_text()) == ("ONE\n", "TWO\n")
            assert not unanswered(agent)
        assert tool_results(server) == ["Changed one.", "Changed two."]  # in the order of the calls


async def test_a_child_over_its_budget_fails_its_call_and_the_turn_goes_on(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    config = config_path(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_text("[subagents]\nmax_requests = 1\nmax_tokens = 1000\nmax_seconds = 1\n")
    calls = [task("Look around", "CHILD-Q: read a.txt"), task("Think hard", "CHILD-T: think"), task("Slow", "CHILD-W")]
    routes = {
        "CHILD-Q": [Turn(tool_calls=[ToolCall("read_file", {"path": str(target)})])],
        "CHILD-T": [Turn(text="A long thought.", usage=(5000, 10))],
        "CHILD-W": [Turn(text="one two three four five six seven eight", chunk_delay=0.5)],
    }
    script = [Turn(tool_calls=calls), Turn(text="The helpers ran out.")]
    with ScriptedOpenAIServer(script, routes=routes, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "Look.")
            assert result["stopReason"] == "end_turn"
            failed = [u for u in shown if u.get("sessionUpdate") == "tool_call_update" and u.get("status") == "failed"]
            assert len(failed) == 3
            assert agent.text(sid) == "The helpers ran out."
        requests, tokens, slow = tool_results(server)
        assert "did not finish: it ran out of model requests (its budget is 1)" in requests
        assert "did not finish: it used 5,010 tokens, over its budget of 1,000" in tokens
        assert "A long thought." in tokens  # its last words are kept
        assert "did not finish: it ran out of time (1 s)" in slow


async def test_a_client_that_shows_subagents_sees_the_child_session(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-S: fix a.txt", ["edit_file"])]), Turn(text="Done.")]
    child = [edit(target, "helo", "hello"), Turn(text="Fixed.")]
    with ScriptedOpenAIServer(script, routes={"CHILD-S": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}})
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Fix it.")
            asked = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            [announced] = [u for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "subagent_update"][:1]
            child_id = announced["sessionId"]
            assert announced["title"] == "Fix it"
            assert announced["state"] == {"state": "running"}
            assert asked["params"]["sessionId"] == child_id  # the child's session asks
            assert asked["params"]["toolCall"]["title"].startswith("[Fix it] ")
            states = [u["state"] for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "subagent_update"]
            assert states[-1] == {"state": "requires_action"}
            await reply(agent, asked, "allow")
            assert (await until_answer(agent, msg_id))["stopReason"] == "end_turn"
            states = [u["state"] for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "subagent_update"]
            assert states[-2:] == [{"state": "running"}, {"state": "idle", "stopReason": "end_turn"}]
            own = agent.transcript.updates(child_id)
            assert own[0]["sessionUpdate"] == "session_message"
            assert own[0]["senderSessionId"] == sid
            assert agent.text(child_id) == "Fixed."
            assert any(u["sessionUpdate"] == "tool_call" and u["name"] == "edit_file" for u in own)
            # The first word of the child comes after its announcement.
            first_child = next(
                i for i, m in enumerate(agent.agent_messages()) if m.get("params", {}).get("sessionId") == child_id
            )
            first_announce = next(
                i
                for i, m in enumerate(agent.agent_messages())
                if m.get("params", {}).get("update", {}).get("sessionUpdate") == "subagent_update"
            )
            assert first_announce < first_child
            assert not unanswered(agent)
            live = [u for u in own if u["sessionUpdate"] != "session_message"]
            [sent] = [u for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "session_message"]
            assert sent["recipientMessageId"] == own[0]["messageId"]
        env = env_for(tmp_path, server)

        # A load by a client that shows subagents: the session's history, then the child announced and its own.
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize({"subagents": {}})
            _, replayed = await load(agent, sid, project)
            [again] = [u for u in replayed if u["sessionUpdate"] == "subagent_update"]
            assert again["sessionId"] == child_id
            assert again["title"] == "Fix it"
            assert again["state"] == {"state": "idle", "stopReason": "end_turn"}
            assert replayed[-2] is again  # after the session's own history
            assert replayed[-1] == sent  # then the instructions, as the session sent them
            own = agent.transcript.updates(child_id)
            assert own[0]["sessionUpdate"] == "session_message"
            assert own[0]["content"] == [{"type": "text", "text": "CHILD-S: fix a.txt"}]
            assert agent.text(child_id) == "Fixed."
            [edit_call] = [u for u in own if u["sessionUpdate"] == "tool_call"]
            assert edit_call["status"] == "completed"  # folded: once, in its final state
            assert edit_call["toolCallId"] in {u.get("toolCallId") for u in live}
            messages = agent.agent_messages()
            announced_at = next(i for i, m in enumerate(messages) if m.get("params", {}).get("update") == again)
            assert all(m["params"]["sessionId"] != child_id for m in messages[:announced_at] if "params" in m)

        # A client that does not: the task call alone.
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            _, replayed = await load(agent, sid, project)
            assert task_call(replayed)["status"] == "completed"
            assert not any(u["sessionUpdate"] == "subagent_update" for u in replayed)
            assert not agent.transcript.updates(child_id)

        # A fork keeps its subagents' sessions as its own, under new ids.
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize({"subagents": {}})
            fork = (await agent.result("session/fork", {"sessionId": sid, "cwd": str(project), "mcpServers": []}))[
                "sessionId"
            ]
            _, replayed = await load(agent, fork, project)
            [copied] = [u for u in replayed if u["sessionUpdate"] == "subagent_update"]
            assert copied["sessionId"] not in (child_id, sid, fork)
            assert copied["title"] == "Fix it"
            own = agent.transcript.updates(copied["sessionId"])
            assert own[0]["senderSessionId"] == fork  # the instructions came from the fork
            assert own[0]["recipientSessionId"] == copied["sessionId"]
            assert agent.text(copied["sessionId"]) == "Fixed."


async def test_a_child_cut_off_by_a_crash_is_replayed_as_far_as_it_went(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-K: fix a.txt", ["read_file", "edit_file"])]), Turn(text="x")]
    read = ToolCall("read_file", {"path": str(target)})
    child = [Turn(text="Looking.", tool_calls=[read]), edit(target, "helo", "hello"), Turn(text="Fixed.")]
    with ScriptedOpenAIServer(script, routes={"CHILD-K": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}})
            sid = await agent.new_session(project)
            await start_prompt(agent, sid, "Fix it.")
            await agent.wait_for(lambda m: m.get("method") == PERMISSION)  # its second step: the edit
            [announced] = [u for u in agent.transcript.updates(sid) if u["sessionUpdate"] == "subagent_update"][:1]
            child_id = announced["sessionId"]
            os.kill(agent.pid, signal.SIGKILL)
            await agent.wait_exit(10)

        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}})
            _, replayed = await load(agent, sid, project)
            [again] = [u for u in replayed if u["sessionUpdate"] == "subagent_update"]
            assert again["sessionId"] == child_id
            assert again["title"] == "Fix it"
            assert again["state"]["state"] == "idle"
            assert again["state"]["stopReason"] == "error"
            assert "cut off" in again["state"]["error"]["message"]
            own = agent.transcript.updates(child_id)
            assert own[0]["content"] == [{"type": "text", "text": "CHILD-K: fix a.txt"}]
            assert agent.text(child_id) == "Looking."
            [read_call] = [u for u in own if u["sessionUpdate"] == "tool_call"]  # the step it finished
            assert read_call["status"] == "completed"
    assert target.read_text() == "helo world\n"


async def test_load_after_a_turn_with_children_replays_the_task(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-L: fix a.txt", ["read_file", "edit_file"])]), Turn(text="Done.")]
    child = [
        Turn(tool_calls=[ToolCall("read_file", {"path": str(target)})]),
        edit(target, "helo", "hello"),
        Turn(text="a.txt says hello world now."),
    ]
    with ScriptedOpenAIServer(script, routes={"CHILD-L": child}, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "Fix a.txt.")  # every permission allowed
            assert result["stopReason"] == "end_turn"
            live = task_call(shown)
            [asked] = [m for m in agent.agent_messages() if m.get("method") == PERMISSION]
            asked_id = asked["params"]["toolCall"]["toolCallId"]
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            _, replayed = await load(agent, sid, project)
            call = task_call(replayed)
            assert call["status"] == "completed"
            assert call["content"] == live["content"]
            texts = [c["content"]["text"] for c in call["content"]]
            assert texts[0].splitlines()[0].startswith("✓ Read")
            assert texts[0].splitlines()[1].startswith("✓ Edit")
            assert texts[-1] == "a.txt says hello world now."
            # The child's call the user was asked about is replayed where it was shown: ended, named for it.
            [again] = [u for u in replayed if u.get("toolCallId") == asked_id]
            assert again["sessionUpdate"] == "tool_call"
            assert again["status"] == "completed"
            assert again["title"].startswith("[Fix it] ")


async def test_a_child_question_to_the_user_reaches_the_editors_form(tmp_path: Path, check: Any) -> None:
    project, _ = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Pick a db", "CHILD-E: ask which db", ["ask_user"])]), Turn(text="Noted.")]
    question = ToolCall("ask_user", {"question": "Which database?", "choices": ["SQLite", "PostgreSQL"]})
    child = [Turn(tool_calls=[question]), Turn(text="The user wants SQLite.")]
    with ScriptedOpenAIServer(script, routes={"CHILD-E": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"elicitation": {"form": {}}})
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Choose.")
            asked = await agent.wait_for(lambda m: m.get("method") == "elicitation/create")
            assert asked["params"]["sessionId"] == sid
            assert asked["params"]["message"] == "[Pick a db] Which database?"
            waiting = task_call(agent.transcript.updates(sid))
            assert "Waiting for your answer: [Pick a db] Which database?" in waiting["content"][0]["content"]["text"]
            await agent.send(
                {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"answer": "SQLite"}}}
            )
            assert (await until_answer(agent, msg_id))["stopReason"] == "end_turn"
            assert not unanswered(agent)
        assert tool_results(server, "CHILD-E") == ["The user chose: SQLite"]
        assert tool_results(server) == ["The user wants SQLite."]


async def test_a_child_works_under_the_sessions_mode(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    script = [Turn(tool_calls=[task("Fix it", "CHILD-M: fix a.txt", ["edit_file"])]), Turn(text="Could not.")]
    child = [edit(target, "helo", "hello"), Turn(text="The edit was refused.")]
    with ScriptedOpenAIServer(script, routes={"CHILD-M": child}, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            await agent.result("session/set_mode", {"sessionId": sid, "modeId": "read-only"})
            result, _ = await prompt(agent, sid, "Fix it.")
            assert result["stopReason"] == "end_turn"
            assert not any(m.get("method") == PERMISSION for m in agent.agent_messages())
            assert target.read_text() == "helo world\n"
        [refused] = tool_results(server, "CHILD-M")
        assert "read-only mode" in refused


def offered(server: ScriptedOpenAIServer, key: str) -> set[str]:
    """The tools offered in the first request of the conversation whose first user message holds ``key``."""
    body = next(r.body for r in server.chat_requests if key in r.body["messages"][1]["content"])
    return {t["function"]["name"] for t in body["tools"]}


@pytest.mark.parametrize(("depth", "shown"), [(1, False), (2, False), (2, True)])
async def test_children_start_children_only_as_deep_as_allowed(
    tmp_path: Path, check: Any, depth: int, shown: bool
) -> None:
    project, _ = project_with(tmp_path)
    config = config_path(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_text(f"[subagents]\nmax_depth = {depth}\n")
    script = [Turn(tool_calls=[task("Delegate", "CHILD-D: hand it on", ["task", "read_file"])]), Turn(text="Done.")]
    routes = {
        "CHILD-D": [Turn(tool_calls=[task("Deeper", "GRAND-D: answer")]), Turn(text="The grandchild said hi.")],
        "GRAND-D": [Turn(text="hi")],
    }
    with ScriptedOpenAIServer(script, routes=routes, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}} if shown else None)
            sid = await agent.new_session(project)
            result, updates = await prompt(agent, sid, "Go.")
            assert result["stopReason"] == "end_turn"
            # Every response's usage is the session's, a grandchild's too.
            assert len([u for u in updates if u["sessionUpdate"] == "usage_update"]) == len(server.chat_requests)
            if shown:  # the grandchild is announced on the child's session, not the session's
                [child] = [u["sessionId"] for u in updates if u["sessionUpdate"] == "subagent_update" and "title" in u]
                grand = [u for u in agent.transcript.updates(child) if u["sessionUpdate"] == "subagent_update"]
                assert grand[0]["title"] == "Deeper"
                assert agent.text(grand[0]["sessionId"]) == "hi"
                assert not any(u["sessionId"] == grand[0]["sessionId"] for u in updates if "sessionId" in u)
        child_results = tool_results(server, "CHILD-D")
        if depth == 1:  # the model named a tool the child cannot have: its call fails, for it to fix
            [refused] = tool_results(server)
            assert "No such tool for a subagent: task" in refused
            assert not [r for r in server.chat_requests if "CHILD-D" in r.body["messages"][1]["content"]]
        else:
            assert offered(server, "CHILD-D") == {"task", "read_file"}
            assert offered(server, "GRAND-D") == {"read_file", "glob", "grep", "fetch"}  # the last level: no task
            assert child_results == ["hi"]
            assert tool_results(server) == ["The grandchild said hi."]


async def test_a_client_that_shows_subagents_hears_how_a_child_failed(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    config = config_path(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_text("[subagents]\nmax_requests = 1\n")
    calls = [task("Broken", "CHILD-F: fail"), task("Busy", "CHILD-B: read")]
    routes = {
        "CHILD-F": [Turn(fault=Fault.status(400, message="This model does not exist."))],
        "CHILD-B": [Turn(tool_calls=[ToolCall("read_file", {"path": str(target)})])],
    }
    with ScriptedOpenAIServer(
        [Turn(tool_calls=calls), Turn(text="Both failed.")], routes=routes, api_key=KEY
    ) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize({"subagents": {}})
            sid = await agent.new_session(project)
            result, shown = await prompt(agent, sid, "Try.")
            assert result["stopReason"] == "end_turn"
            idle = {
                u["sessionId"]: u["state"]
                for u in shown
                if u["sessionUpdate"] == "subagent_update" and u["state"]["state"] == "idle"
            }
            titles = {
                u["sessionId"]: u["title"] for u in shown if u["sessionUpdate"] == "subagent_update" and "title" in u
            }
            by_title = {titles[child]: state for child, state in idle.items()}
            assert by_title["Busy"] == {"state": "idle", "stopReason": "max_turn_requests"}
            assert by_title["Broken"]["stopReason"] == "error"
            assert by_title["Broken"]["error"]["code"] == -32603
            assert "This model does not exist." in by_title["Broken"]["error"]["message"]
        broken, busy = tool_results(server)
        assert "did not finish: the model failed" in broken
        assert "ran out of model requests" in busy


async def test_children_beyond_the_limit_wait_for_a_place(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path)
    config = config_path(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_text("[subagents]\nmax_running = 1\n")
    read = Turn(tool_calls=[ToolCall("read_file", {"path": str(target)})])
    routes = {"CHILD-X": [read, Turn(text="x")], "CHILD-Y": [read, Turn(text="y")]}
    script = [Turn(tool_calls=[task("X", "CHILD-X"), task("Y", "CHILD-Y")]), Turn(text="Both.")]
    with ScriptedOpenAIServer(script, routes=routes, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            result, _ = await prompt(agent, sid, "Both.")
            assert result["stopReason"] == "end_turn"
        children = [r for r in server.chat_requests if "CHILD-" in r.body["messages"][1]["content"]]
        order = [r.body["messages"][1]["content"] for r in children]
        assert order == ["CHILD-X", "CHILD-X", "CHILD-Y", "CHILD-Y"]  # one after the other
        assert children[1].answered <= children[2].received
        assert tool_results(server) == ["x", "y"]


async def test_always_allowed_for_a_child_holds_for_the_session(tmp_path: Path, check: Any) -> None:
    project, target = project_with(tmp_path, "one two\n")
    script = [
        Turn(tool_calls=[task("First edit", "CHILD-1: edit", ["edit_file"])]),
        edit(target, "two", "TWO"),  # the session's own edit, after the child's
        Turn(text="Both edits made."),
    ]
    routes = {"CHILD-1": [edit(target, "one", "ONE"), Turn(text="Done.")]}
    with ScriptedOpenAIServer(script, routes=routes, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            await agent.initialize()
            sid = await agent.new_session(project)
            msg_id = await start_prompt(agent, sid, "Edit twice.")
            asked = await agent.wait_for(lambda m: m.get("method") == PERMISSION)
            await reply(agent, asked, "allow-always")
            assert (await until_answer(agent, msg_id))["stopReason"] == "end_turn"
            assert target.read_text() == "ONE TWO\n"
            assert len([m for m in agent.agent_messages() if m.get("method") == PERMISSION]) == 1
            assert not unanswered(agent)
