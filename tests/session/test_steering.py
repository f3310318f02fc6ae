"""Steering (``_session/steering``), as a client built against Claude's and Codex's adapters sees it: advertised
on the ``initialize`` result's own ``_meta``; a message sent during a turn joins it at its next step, is
echoed and recorded in place (``injected``), fails (and says so) when the turn ends first (``failed``), and
with no turn running is left for a prompt (``promptRequired``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session import turn as turns
from refagent.session.steering import MAX_PENDING, Steers
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, allow_once, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import KEY, env_for

pytestmark = pytest.mark.anyio

STEER = "Also add a docstring."


def write_call(path: Path) -> ToolCallRequest:
    return ToolCallRequest(id="call_1", name="write_file", arguments=f'{{"path": "{path}", "content": "x = 1\\n"}}')


class HeldPermission:
    """Answers each permission question once :attr:`go` is set; :attr:`asked` is set when one arrives."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.go = anyio.Event()

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.set()
        await self.go.wait()
        return await allow_once(params)


def steering(sid: str, words: str = STEER) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": words}]}


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def steering_supported(result: dict[str, Any]) -> bool:
    """What a client built against the adapters reads: the result's own ``_meta``, and nothing else."""
    assert "_meta" not in result["agentCapabilities"]  # some such clients insist on it
    meta = result.get("_meta")
    return isinstance(meta, dict) and meta.get("steering", {}).get("supported") is True


async def test_steering_is_advertised_on_the_result_not_in_the_capabilities(tmp_path: Path, check: Any) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=check) as editor:
        result = await editor.initialize()
    assert steering_supported(result)
    assert result["_meta"] == {"steering": {"supported": True}}


async def test_a_steer_joins_the_turn_after_the_running_tool_call(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([[write_call(project / "a.py")], text("Done, with a docstring.")])
    held = HeldPermission()
    outcome: dict[str, Any] = {}
    async with connect(settings(tmp_path, model), client=FakeClient(permission=held), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        async with anyio.create_task_group() as tg:

            async def run_prompt() -> None:
                outcome["prompt"] = await editor.prompt(sid, "Write a.py")

            async def steer() -> None:
                outcome["steer"] = await editor.request("_session/steering", steering(sid))

            tg.start_soon(run_prompt)
            await held.asked.wait()  # the tool call waits on the user: the steer comes meanwhile
            tg.start_soon(steer)
            await anyio.wait_all_tasks_blocked()  # the steer waits in the queue, the tool call on the user
            held.go.set()
        live = editor.updates(sid)
    assert outcome == {"prompt": {"stopReason": "end_turn"}, "steer": {"outcome": "injected"}}
    # the model's next request has the steer after the tool's result
    second = model.requests[1].messages
    roles = [m["role"] for m in second]
    assert roles[-2:] == ["tool", "user"]
    assert second[-1] == {"role": "user", "content": STEER}
    # echoed where it happened: after the tool call ended, before the answer it led to
    kinds = [(u["sessionUpdate"], u.get("status")) for u in live]
    echo = next(i for i, u in enumerate(live) if u["sessionUpdate"] == "user_message_chunk")
    assert live[echo]["content"]["text"] == STEER
    assert ("tool_call_update", "completed") in kinds[:echo]
    assert any(u["sessionUpdate"] == "agent_message_chunk" for u in live[echo:])

    # a later agent replays it in place, and the model's conversation has it there too
    model_2 = ScriptedModel([text("ok")])
    async with connect(settings(tmp_path, model_2), check=check) as editor:
        await editor.initialize()
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        replayed = editor.updates(sid)
        await editor.prompt(sid, "thanks")
    shown = [
        (u["sessionUpdate"], u["content"].get("text"))
        for u in replayed
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]
    assert [s for s in shown if s[0] == "user_message_chunk"] == [
        ("user_message_chunk", "Write a.py"),
        ("user_message_chunk", STEER),
    ]
    answer = "".join(t or "" for kind, t in shown[shown.index(("user_message_chunk", STEER)) + 1 :])
    assert answer == "Done, with a docstring."
    history = model_2.requests[0].messages
    steer_at = history.index({"role": "user", "content": STEER})
    assert history[steer_at - 1]["role"] == "tool"


async def test_a_steer_with_no_turn_running_asks_for_a_prompt(tmp_path: Path, check: Any) -> None:
    """``promptRequired``, whether the client opted in to it or not: refagent never starts a turn no
    ``session/prompt`` owns (``startedNewTurn``)."""
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([text("hi")])
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        plain = await editor.request("_session/steering", steering(sid))
        opted = {**steering(sid), "_meta": {"steering": {"idleBehavior": "promptRequired"}}}
        opted_in = await editor.request("_session/steering", opted)
        assert plain == opted_in == {"outcome": "promptRequired", "reason": "noRunningTurn"}
        assert model.requests == []  # nothing was taken, no turn started
        assert not any(u["sessionUpdate"] == "user_message_chunk" for u in editor.updates(sid))
        with pytest.raises(RequestError, match="Session not found"):
            await editor.request("_session/steering", steering("sess_nope"))
        with pytest.raises(RequestError, match="prompt") as bad:
            await editor.request("_session/steering", {"sessionId": sid})
        assert bad.value.code == -32602
        assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}  # and the agent goes on


async def test_cancel_fails_the_steers_not_yet_taken(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([[write_call(project / "a.py")], text("never")])
    held = HeldPermission()
    outcome: dict[str, Any] = {}
    async with connect(settings(tmp_path, model), client=FakeClient(permission=held), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        async with anyio.create_task_group() as tg:

            async def run_prompt() -> None:
                outcome["prompt"] = await editor.prompt(sid, "Write a.py")

            async def steer() -> None:
                outcome["steer"] = await editor.request("_session/steering", steering(sid))

            tg.start_soon(run_prompt)
            await held.asked.wait()
            tg.start_soon(steer)
            await anyio.wait_all_tasks_blocked()  # the steer waits in the queue, the tool call on the user
            await editor.cancel(sid)
            held.go.set()
        live = editor.updates(sid)
    assert outcome == {"prompt": {"stopReason": "cancelled"}, "steer": {"outcome": "failed", "reason": "turnEnded"}}
    assert len(model.requests) == 1
    assert not any(u["sessionUpdate"] == "user_message_chunk" for u in live)


async def test_a_slash_command_does_not_steer(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([[write_call(project / "a.py")], text("done")])
    held = HeldPermission()
    async with connect(settings(tmp_path, model), client=FakeClient(permission=held), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        async with anyio.create_task_group() as tg:

            async def run_prompt() -> None:
                await editor.prompt(sid, "Write a.py")

            tg.start_soon(run_prompt)
            await held.asked.wait()
            with pytest.raises(RequestError, match="slash command cannot steer"):
                await editor.request("_session/steering", steering(sid, "/undo"))
            held.go.set()


# -- the turn and the queue, alone ---------------------------------------------------------------------


async def test_a_steer_after_the_models_last_answer_is_one_more_step() -> None:
    model = ScriptedModel([text("first"), text("second")])
    steers = Steers()
    steers.open()
    steer = steers.add([{"type": "text", "text": STEER}], {"role": "user", "content": STEER})
    shown: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        shown.append(update)

    turn = turns.Turn(model=model, history=[], send_update=send, steers=steers)
    assert await turn.run({"role": "user", "content": "hi"}) == "end_turn"
    assert steer.outcome == "injected"
    assert [m["role"] for m in model.requests[1].messages] == ["user", "assistant", "user"]
    assert model.requests[1].messages[-1]["content"] == STEER


def test_the_queue_takes_nothing_when_closed_refuses_when_full_and_fails_the_rest_on_close() -> None:
    steers = Steers()
    assert steers.add([], {}) is None
    steers.open()
    waiting = [steers.add([], {}) for _ in range(MAX_PENDING)]
    with pytest.raises(RequestError, match="Too many"):
        steers.add([], {})
    steers.close()
    assert {s.outcome for s in waiting if s is not None} == {"failed"}
    assert steers.add([], {}) is None


# -- a real agent process --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_agent_process_takes_a_steer_into_its_turn(tmp_path: Path, check: Any) -> None:
    """Over stdio: the steer sent while the agent waits on a permission answer reaches the model's next
    request, and the steering request is answered once it has."""
    project = tmp_path / "project"
    project.mkdir()
    script = [Turn(tool_calls=[ToolCall("write_file", {"path": "a.py", "content": "x = 1\n"})]), Turn(text="Done.")]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            assert steering_supported(await agent.initialize())
            sid = await agent.new_session(project)
            prompt_id = await agent.send_request("session/prompt", steering(sid, "Write a.py"))
            asked = await agent.wait_for(lambda m: m.get("method") == "session/request_permission")
            steer_id = await agent.send_request("_session/steering", steering(sid))
            option = next(o for o in asked["params"]["options"] if o["kind"] == "allow_once")
            answer = {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
            await agent.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            steered = await agent.wait_for(lambda m: m.get("id") == steer_id and "method" not in m)
            done = await agent.wait_for(lambda m: m.get("id") == prompt_id and "method" not in m)
            idle = await agent.request("_session/steering", steering(sid))
    assert steered["result"] == {"outcome": "injected"}
    assert done["result"]["stopReason"] == "end_turn"
    assert server.chat_requests[-1].body["messages"][-1] == {"role": "user", "content": STEER}
    assert idle["result"] == {"outcome": "promptRequired", "reason": "noRunningTurn"}
