"""ACP v2 beside v1 (``REFAGENT_ACP_V2=1``): a client that asks for version 2 is served v2 from the same
session machinery; every message the agent sends it is checked against the v2 draft schema, strictly
(:mod:`tests.support.acp_schema_v2`). Without the flag, or for a v1 client, nothing changes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent import cli
from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.server.v2 import ENV
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, allow_once, connect
from tests.support.acp_schema_v2 import validate_agent_message_v2
from tests.support.acp_v2_editor import V2_INIT, idle, updates
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = pytest.mark.anyio


@pytest.fixture
def v2_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "1")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return path


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def edit_call() -> ToolCallRequest:
    args = {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}
    return ToolCallRequest(id="call_1", name="edit_file", arguments=json.dumps(args))


async def test_without_the_flag_a_v2_client_gets_v1(tmp_path: Path, check: Any) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=check) as editor:
        result = await editor.request("initialize", V2_INIT)
    assert result["protocolVersion"] == 1
    assert "agentCapabilities" in result


async def test_a_v1_client_is_served_v1_with_the_flag(tmp_path: Path, check: Any, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel([text("hi")])), check=check) as editor:
        assert (await editor.initialize())["protocolVersion"] == 1
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}


async def test_a_second_initialize_keeps_the_connections_version(tmp_path: Path, check: Any, v2_on: None) -> None:
    """A second ``initialize`` that asks for the other version is refused: the open sessions, their updates
    and the requests after it stay in the version the connection began with. One in the same version is
    answered as the first was."""
    async with connect(settings(tmp_path, ScriptedModel([text("hi")])), check=check) as editor:
        first = await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        with pytest.raises(RequestError) as refused:
            await editor.request("initialize", V2_INIT)
        assert refused.value.code == -32600
        assert "initialized with protocol version 1" in refused.value.message
        assert await editor.initialize() == first
        assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}


async def test_a_v2_connection_refuses_a_v1_initialize(tmp_path: Path, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        assert (await editor.request("initialize", V2_INIT))["protocolVersion"] == 2
        with pytest.raises(RequestError) as refused:
            await editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert "initialized with protocol version 2" in refused.value.message


async def test_initialize_in_v2(tmp_path: Path, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        result = await editor.request("initialize", V2_INIT)
    assert result["protocolVersion"] == 2
    assert result["info"]["name"] == "refagent"
    session = result["capabilities"]["session"]
    assert session["delete"] == {}
    assert session["mcp"] == {"stdio": {}, "http": {}}
    assert "agentCapabilities" not in result
    # steering where the adapters' clients look, as in v1: on the result, not among the capabilities
    assert result["_meta"] == {"steering": {"supported": True}}
    assert "_meta" not in result["capabilities"]


async def test_a_prompt_turn_in_v2(tmp_path: Path, project: Path, v2_on: None) -> None:
    model = ScriptedModel([[edit_call()], text("Fixed.")])
    asked: list[dict[str, Any]] = []

    async def permission(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return await allow_once(params)

    client = FakeClient(permission=permission)
    async with connect(settings(tmp_path, model), client=client, check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        new = await editor.request("session/new", {"cwd": str(project), "mcpServers": []})
        sid = new["sessionId"]
        assert {o["configId"] for o in new["configOptions"]} >= {"mode", "model"}
        assert "modes" not in new
        accepted = await editor.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "fix add"}]}
        )
        message_id = accepted["messageId"]
        end = await idle(editor, sid)
        seen = updates(editor, sid)
    assert end == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn", "background": []}
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    kinds = [u["sessionUpdate"] for u in seen]
    assert "tool_call" not in kinds
    assert "current_mode_update" not in kinds
    echo = next(u for u in seen if u["sessionUpdate"] == "user_message")
    assert echo == {
        "sessionUpdate": "user_message",
        "messageId": message_id,
        "content": [{"type": "text", "text": "fix add"}],
    }
    states = [u["state"] for u in seen if u["sessionUpdate"] == "state_update"]
    assert states == ["running", "requires_action", "running", "idle"]
    calls = [u for u in seen if u["sessionUpdate"] == "tool_call_update"]
    assert calls[0]["title"]
    assert calls[0]["kind"] == "edit"  # the first update creates the call, whole
    assert calls[-1]["status"] == "completed"
    executing = next(u for u in calls if u.get("status") == "in_progress")
    assert executing["capabilities"] == {"cancel": {}}  # while it executes, it may be cancelled alone
    assert calls[-1]["capabilities"] is None  # and no longer once it has ended
    diffs = [c for u in calls for c in u.get("content") or [] if c["type"] == "diff"]
    assert diffs
    assert diffs[-1]["changes"] == [{"operation": "modify", "path": str(project / "calc.py")}]
    patch = diffs[-1]["patch"]["text"]
    assert patch.startswith(f"diff --git a{project}/calc.py b{project}/calc.py\n")
    assert "-    return a - b\n+    return a + b\n" in patch
    (question,) = asked
    assert question["subject"]["type"] == "tool_call"
    assert question["subject"]["toolCall"]["kind"] == "edit"
    assert question["title"] == question["subject"]["toolCall"]["title"]
    assert "toolCall" not in question
    answer = [u for u in seen if u["sessionUpdate"] == "agent_message_chunk"]
    assert "".join(u["content"]["text"] for u in answer) == "Fixed."
    assert all(u["messageId"] for u in answer)


async def test_config_options_and_their_values_in_v2(tmp_path: Path, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(tmp_path)}))["sessionId"]
        result = await editor.request(
            "session/set_config_option", {"sessionId": sid, "configId": "mode", "type": "id", "value": "read-only"}
        )
        mode = next(o for o in result["configOptions"] if o["configId"] == "mode")
        assert mode["currentValue"] == "read-only"
        with pytest.raises(RequestError) as wrong:
            await editor.request(
                "session/set_config_option", {"sessionId": sid, "configId": "mode", "type": "boolean", "value": True}
            )
        assert wrong.value.code == -32602
        with pytest.raises(RequestError) as gone:
            await editor.request("session/set_mode", {"sessionId": sid, "modeId": "ask"})
        assert gone.value.code == -32601  # modes are config options only in v2


@pytest.mark.parametrize("ending", ["session/cancel", "session/close"])
async def test_cancel_and_close_end_the_turn_idle_cancelled(
    tmp_path: Path, project: Path, v2_on: None, ending: str
) -> None:
    """``session/cancel`` (``_meta`` and all) or ``session/close`` during a turn: it ends with one ``idle``
    that says ``cancelled``, and no state follows it."""
    held = anyio.Event()

    async def never(params: dict[str, Any]) -> dict[str, Any]:
        held.set()
        await anyio.sleep_forever()
        raise AssertionError

    client = FakeClient(permission=never)
    model = ScriptedModel([[edit_call()], text("never")])
    async with connect(settings(tmp_path, model), client=client, check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "fix"}]})
        with anyio.fail_after(10):
            await held.wait()
        if ending == "session/cancel":
            await editor.notify("session/cancel", {"sessionId": sid, "_meta": {"why": "test"}})
        else:
            assert await editor.request("session/close", {"sessionId": sid}) == {}
        end = await idle(editor, sid)
        await editor.request("session/list", {})  # what the agent sent before this answer has arrived
        states = [u for u in updates(editor, sid) if u["sessionUpdate"] == "state_update"]
    assert end["stopReason"] == "cancelled"
    assert states[-1] is end
    assert (project / "calc.py").read_text().endswith("a - b\n")


def _around_response(editor: Editor, method: str, session_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The session's updates the agent sent before its answer to the last ``method`` request, and after."""
    messages = [m for sender, m in editor.transcript.messages]
    asked = max(i for i, m in enumerate(messages) if m.get("method") == method and "id" in m)
    request_id = messages[asked]["id"]
    answered = next(i for i, m in enumerate(messages) if i > asked and "method" not in m and m["id"] == request_id)
    ours = [
        (i, m["params"]["update"])
        for i, m in enumerate(messages)
        if i > asked and m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
    return [u for i, u in ours if i < answered], [u for i, u in ours if i > answered]


async def test_resume_replays_whole_messages_then_the_state_before_answering(
    tmp_path: Path, project: Path, v2_on: None
) -> None:
    """A resume with ``replayFrom: start`` replays the history as whole messages (the user's under the id its
    prompt was answered with), then the session's state, all before the response; nothing follows it."""
    model = ScriptedModel([text("Hello there.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        accepted = await editor.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        )
        await idle(editor, sid)
        live = [u for u in updates(editor, sid) if u["sessionUpdate"] == "agent_message_chunk"]
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        listed = await editor.request("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
        resumed = await editor.request(
            "session/resume", {"sessionId": sid, "cwd": str(project), "replayFrom": {"type": "start"}}
        )
        assert "configOptions" in resumed
        assert editor.agent_connection is not None
        await editor.agent_connection.flush()
        before, after = _around_response(editor, "session/resume", sid)
        await editor.request("session/close", {"sessionId": sid})
    assert after == []
    kinds = [u["sessionUpdate"] for u in before]
    assert not [k for k in kinds if k.endswith("_chunk")]
    assert kinds[:2] == ["user_message", "agent_message"]
    assert "available_commands_update" in kinds  # the session's announcements precede the response too
    assert before[-1] == {"sessionUpdate": "state_update", "state": "idle", "background": []}
    assert before[0] == {
        "sessionUpdate": "user_message",
        "messageId": accepted["messageId"],
        "content": [{"type": "text", "text": "hi"}],
    }
    assert len(live) == 2  # streamed in two chunks, replayed as one message under their id
    assert before[1] == {
        "sessionUpdate": "agent_message",
        "messageId": live[0]["messageId"],
        "content": [{"type": "text", "text": "Hello there."}],
    }


async def test_resume_without_replay_sends_the_state_only(tmp_path: Path, project: Path, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel([text("Hi.")])), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        await idle(editor, sid)
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        assert editor.agent_connection is not None
        await editor.agent_connection.flush()
        before, after = _around_response(editor, "session/resume", sid)
    assert after == []
    assert not [u for u in before if "message" in u["sessionUpdate"] or "thought" in u["sessionUpdate"]]
    assert before[-1] == {"sessionUpdate": "state_update", "state": "idle", "background": []}


def test_a_replay_sends_each_message_whole_and_a_late_chunk_after_it() -> None:
    from refagent.server.v2.translate import replayed

    def chunk(kind: str, message_id: str, block: dict[str, Any]) -> dict[str, Any]:
        return {"sessionUpdate": kind, "messageId": message_id, "content": block}

    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    shown = [
        chunk("agent_thought_chunk", "t1", {"type": "text", "text": "Let me "}),
        chunk("agent_thought_chunk", "t1", {"type": "text", "text": "think."}),
        chunk("agent_message_chunk", "m1", {"type": "text", "text": "See "}),
        chunk("agent_message_chunk", "m1", image),
        chunk("agent_message_chunk", "m1", {"type": "text", "text": "this."}),
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "title": "Read"},
        chunk("agent_thought_chunk", "t1", {"type": "text", "text": " Again."}),
    ]
    assert replayed(shown) == [
        {"sessionUpdate": "agent_thought", "messageId": "t1", "content": [{"type": "text", "text": "Let me think."}]},
        {
            "sessionUpdate": "agent_message",
            "messageId": "m1",
            "content": [{"type": "text", "text": "See "}, image, {"type": "text", "text": "this."}],
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "title": "Read"},
        chunk("agent_thought_chunk", "t1", {"type": "text", "text": " Again."}),
    ]
    assert shown[0]["content"] == {"type": "text", "text": "Let me "}  # the input is left as it was


async def test_v2_requests_that_cannot_be_answered(tmp_path: Path, v2_on: None) -> None:
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        with pytest.raises(RequestError) as unknown:
            await editor.request(
                "session/prompt", {"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "x"}]}
            )
        assert unknown.value.code == -32002
        with pytest.raises(RequestError) as empty:
            await editor.request("session/prompt", {"sessionId": "sess_nope", "prompt": []})
        assert empty.value.code == -32602
        sid = (await editor.request("session/new", {"cwd": str(tmp_path)}))["sessionId"]
        for bad in ([{"text": "no type"}], ["text"], [{"type": "text"}] * 2 + [7]):
            with pytest.raises(RequestError) as malformed:
                await editor.request("session/prompt", {"sessionId": sid, "prompt": bad})
            assert malformed.value.code == -32602
        with pytest.raises(RequestError) as long_id:
            await editor.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}], "messageId": "m" * 201}
            )
        assert long_id.value.code == -32602
        assert not [
            n for n in editor.client.notifications if n["params"]["update"].get("sessionUpdate") == "state_update"
        ]
        with pytest.raises(RequestError) as load:
            await editor.request("session/load", {"sessionId": "x", "cwd": str(tmp_path), "mcpServers": []})
        assert load.value.code == -32601
        with pytest.raises(RequestError) as replay:
            await editor.request(
                "session/resume", {"sessionId": "x", "cwd": str(tmp_path), "replayFrom": {"type": "end"}}
            )
        assert replay.value.code == -32602
        with pytest.raises(RequestError) as login:
            await editor.request("auth/login", {"methodId": "nope"})
        assert login.value.code == -32602


@pytest.mark.slow
async def test_a_real_agent_process_speaks_v2_from_its_first_answer(tmp_path: Path) -> None:
    """The CLI answers a v1 ``initialize`` before its loop starts; a v2 one is left to the agent, in v2."""
    env = agent_env(tmp_path / "home", **{ENV: "1"})
    async with AgentProcess.start(tmp_path, check=validate_agent_message_v2, env=env) as agent:
        result = await agent.result("initialize", V2_INIT)
        assert result["protocolVersion"] == 2
        new = await agent.result("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert new["sessionId"].startswith("sess_")


def test_diffs_in_v2_say_what_happened_to_the_file() -> None:
    from refagent.server.v2.translate import diff

    made = diff({"type": "diff", "path": "/w/new.txt", "oldText": None, "newText": "one\ntwo"})
    assert made["changes"] == [{"operation": "add", "path": "/w/new.txt"}]
    assert made["patch"]["text"] == (
        "diff --git a/w/new.txt b/w/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/w/new.txt\n"
        "@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n"
    )
    gone = diff({"type": "diff", "path": "/w/old.txt", "oldText": "x\n", "newText": ""}, deleting=True)
    assert gone["changes"] == [{"operation": "delete", "path": "/w/old.txt"}]
    assert "deleted file mode 100644\n--- a/w/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n" in gone["patch"]["text"]
    emptied = diff({"type": "diff", "path": "/w/old.txt", "oldText": "x\n", "newText": ""})
    assert emptied["changes"] == [{"operation": "modify", "path": "/w/old.txt"}]


async def test_set_title_and_fork_in_v2(tmp_path: Path, project: Path, v2_on: None) -> None:
    """The unstable ``session/set_title`` and ``session/fork`` are offered to a v2 client (v1's, answered in
    v2's terms): a fork starts with the history of the session it copies."""
    async with connect(settings(tmp_path, ScriptedModel([text("Noted.")])), check=validate_agent_message_v2) as editor:
        result = await editor.request("initialize", V2_INIT)
        assert result["capabilities"]["session"]["fork"] == {}
        assert result["capabilities"]["session"]["title"] == {}
        assert result["capabilities"]["session"]["systemPrompt"] == {"mode": {"override": {}}}
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "remember"}]})
        await idle(editor, sid)
        assert await editor.request("session/set_title", {"sessionId": sid, "title": "  Notes  "}) == {"title": "Notes"}
        listed = await editor.request("session/list", {})
        assert [(s["sessionId"], s.get("title")) for s in listed["sessions"]] == [(sid, "Notes")]
        assert {"sessionUpdate": "session_info_update", "title": "Notes"} in updates(editor, sid)
        forked = await editor.request("session/fork", {"sessionId": sid, "cwd": str(project)})
        fork = forked["sessionId"]
        assert fork != sid
        assert {o["configId"] for o in forked["configOptions"]} >= {"mode", "model"}
        with pytest.raises(RequestError) as empty:
            await editor.request("session/set_title", {"sessionId": sid, "title": "   "})
        assert empty.value.code == -32602
        with pytest.raises(RequestError) as unknown:
            await editor.request("session/fork", {"sessionId": "sess_nope", "cwd": str(project)})
        assert unknown.value.code == -32002
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        await editor.request(
            "session/resume", {"sessionId": fork, "cwd": str(project), "replayFrom": {"type": "start"}}
        )
        replay = updates(editor, fork)
    said = [u["content"] for u in replay if u["sessionUpdate"] in ("user_message", "agent_message")]
    assert said == [[{"type": "text", "text": "remember"}], [{"type": "text", "text": "Noted."}]]


async def test_without_saved_sessions_v2_offers_neither_fork_nor_title(tmp_path: Path, v2_on: None) -> None:
    no_store = Settings(make_model=lambda profile: ScriptedModel(), store=lambda: None)
    async with connect(no_store, check=validate_agent_message_v2) as editor:
        session = (await editor.request("initialize", V2_INIT))["capabilities"]["session"]
        assert not {"fork", "title", "delete"} & session.keys()
        for method, params in (
            ("session/fork", {"sessionId": "s", "cwd": str(tmp_path)}),
            ("session/set_title", {"sessionId": "s", "title": "t"}),
        ):
            with pytest.raises(RequestError) as missing:
                await editor.request(method, params)
            assert missing.value.code == -32601


async def test_plans_in_v2_carry_their_plan_id(tmp_path: Path, v2_on: None) -> None:
    entries = [{"content": "Read the code", "status": "in_progress", "priority": "high"}]
    plan_call = ToolCallRequest(id="call_1", name="update_plan", arguments=json.dumps({"entries": entries}))
    model = ScriptedModel([[plan_call], text("Planned.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(tmp_path)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "plan"}]})
        await idle(editor, sid)
        (update,) = [u for u in updates(editor, sid) if u["sessionUpdate"] == "plan_update"]
    assert update["plan"]["type"] == "items"
    assert update["plan"]["planId"]
    assert update["plan"]["entries"] == entries
    assert not [u for u in updates(editor, sid) if u["sessionUpdate"] == "plan"]


def test_plan_operations_pass_to_v2_by_their_own_ids() -> None:
    from refagent.server.v2.translate import client_capabilities, update

    assert client_capabilities({})["plan"] == {}  # the v1 machinery may send a v2 client plans by id
    items = {"type": "items", "planId": "plan_a", "entries": []}
    assert update("s1", {"sessionUpdate": "plan_update", "plan": items}) == {
        "sessionUpdate": "plan_update",
        "plan": items,
    }
    removed = {"sessionUpdate": "plan_removed", "planId": "plan_a"}
    assert update("s1", removed) == removed
    whole = update("s1", {"sessionUpdate": "plan", "entries": []})
    assert whole == {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "plan_s1", "entries": []}}


async def test_providers_in_v2(tmp_path: Path, v2_on: None) -> None:
    """The unstable ``providers/*`` are v1's, whose params and results are v2's."""
    config = tmp_path / "config.toml"
    config.write_text('[profiles.work]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "k"\nmodel = "m"\n')
    loaded = dataclasses.replace(
        cli.load_settings(cli.build_parser().parse_args(["--config", str(config)])), store=None
    )
    async with connect(loaded, check=validate_agent_message_v2) as editor:
        assert (await editor.request("initialize", V2_INIT))["capabilities"]["providers"] == {}
        (work,) = (await editor.request("providers/list", {}))["providers"]
        assert work["providerId"] == "work"
        route = {"providerId": "work", "apiType": "anthropic", "baseUrl": "http://127.0.0.1:9/gateway"}
        assert await editor.request("providers/set", route) == {}
        (work,) = (await editor.request("providers/list", {}))["providers"]
        assert work["current"] == {"apiType": "anthropic", "baseUrl": "http://127.0.0.1:9/gateway"}
        assert await editor.request("providers/disable", {"providerId": "work"}) == {}
        (work,) = (await editor.request("providers/list", {}))["providers"]
        assert work["current"] is None


async def test_an_unknown_permission_outcome_does_not_run_the_call_and_the_turn_ends(
    tmp_path: Path, project: Path, v2_on: None
) -> None:
    """A ``_``-prefixed outcome (an extension the agent does not know) is no permission: the call is not
    run, and the turn goes on to its end."""

    async def extension(params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": {"outcome": "_vendor/unknown"}}

    model = ScriptedModel([[edit_call()], text("Could not.")])
    client = FakeClient(permission=extension)
    async with connect(settings(tmp_path, model), client=client, check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "fix"}]})
        end = await idle(editor, sid)
    assert end["stopReason"] == "end_turn"
    assert (project / "calc.py").read_text().endswith("a - b\n")


def _objects_only(node: Any, where: str = "capabilities") -> list[str]:
    """Where ``node`` (capabilities) holds a marker that is not an object (a boolean, say)."""
    if not isinstance(node, dict):
        return [where]
    return [bad for key, value in node.items() for bad in _objects_only(value, f"{where}.{key}")]


async def test_what_the_kit_checks_of_a_v2_session(tmp_path: Path, project: Path, v2_on: None) -> None:
    """The rows of the ACP test kit's v2 suite that a plain session exercises, in one connection: object
    markers only, no terminal sign-in for a client that did not offer it, ``mcpServers`` optional, distinct
    message ids, a ``resource_link`` and a ``_meta`` taken, ``session/list`` filtered, an unknown session
    deleted silently, extra directories on new and resume, and extensions (a ``_`` request is answered, a
    ``_`` notification is not)."""
    extra = tmp_path / "extra"
    extra.mkdir()
    model = ScriptedModel([text("One."), text("Two.")])
    async with connect(settings(tmp_path, model), check=validate_agent_message_v2) as editor:
        result = await editor.request("initialize", {"protocolVersion": 2, "info": {"name": "kit", "version": "0"}})
        assert [m for m in result.get("authMethods", []) if m["type"] == "terminal"] == []
        assert _objects_only({k: v for k, v in result["capabilities"].items() if k != "_meta"}) == []
        omitted = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        empty = await editor.request(
            "session/new", {"cwd": str(project), "mcpServers": [], "additionalDirectories": [str(extra)]}
        )
        assert omitted != empty["sessionId"]
        link = {"type": "resource_link", "uri": (project / "calc.py").as_uri(), "name": "calc.py"}
        first = await editor.request(
            "session/prompt", {"sessionId": omitted, "prompt": [{"type": "text", "text": "see"}, link], "_meta": {}}
        )
        await idle(editor, omitted)
        second = await editor.request(
            "session/prompt", {"sessionId": omitted, "prompt": [{"type": "text", "text": "see"}]}
        )
        await idle(editor, omitted, 2)
        assert first["messageId"] != second["messageId"]
        assert (await editor.request("session/list", {"cwd": str(tmp_path / "nowhere")})) == {"sessions": []}
        listed = (await editor.request("session/list", {"cwd": str(project)}))["sessions"]
        assert {s["cwd"] for s in listed} == {str(project)}
        assert await editor.request("session/delete", {"sessionId": "never-created"}) == {}
        resumed = await editor.request(
            "session/resume", {"sessionId": omitted, "cwd": str(project), "additionalDirectories": [str(extra)]}
        )
        assert "configOptions" in resumed
        await editor.notify("_kit/notice", {})
        with pytest.raises(RequestError) as extension:
            await editor.request("_kit/ask", {})
        assert extension.value.code == -32601
    replies = [m for sender, m in editor.transcript.messages if sender == "agent" and "method" not in m]
    asked = [m for sender, m in editor.transcript.messages if sender == "client" and "id" in m and "method" in m]
    assert len(replies) == len(asked)  # every request answered once, the notifications not at all


async def test_archive_status_and_auth_status_in_v2(tmp_path: Path, project: Path, v2_on: None) -> None:
    """The unstable ``session/archive``, ``session/unarchive``, ``session/status`` and ``auth/status`` are
    offered to a v2 client as v1's are (the same shapes), and a session's status carries the foreground
    state v2 adds: the snapshot of its last ``state_update``."""
    async with connect(settings(tmp_path, ScriptedModel([text("Done.")])), check=validate_agent_message_v2) as editor:
        capabilities = (await editor.request("initialize", V2_INIT))["capabilities"]
        assert (capabilities["session"]["archive"], capabilities["session"]["status"]) == ({}, {})
        assert capabilities["auth"] == {"status": {}}
        assert (await editor.request("auth/status", {}))["state"] in ("authenticated", "not_required")
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        status = await editor.request("session/status", {"sessionId": sid})
        assert (status["status"], status["state"]) == ("open", {"state": "idle", "background": []})
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
        await idle(editor, sid)
        assert await editor.request("session/archive", {"sessionId": sid}) == {}
        assert (await editor.request("session/status", {"sessionId": sid}))["status"] == "saved"  # closed first
        assert (await editor.request("session/list", {}))["sessions"] == []
        listed = await editor.request("session/list", {"archived": "only"})
        assert [(s["sessionId"], s["archived"]) for s in listed["sessions"]] == [(sid, True)]
        assert await editor.request("session/unarchive", {"sessionId": sid}) == {}
        assert [s["sessionId"] for s in (await editor.request("session/list", {}))["sessions"]] == [sid]
        with pytest.raises(RequestError) as unknown:
            await editor.request("session/status", {"sessionId": "sess_nope"})
        assert (unknown.value.code, unknown.value.data) == (-32002, {"sessionId": "sess_nope"})
    no_store = Settings(make_model=lambda profile: ScriptedModel(), store=lambda: None)
    async with connect(no_store, check=validate_agent_message_v2) as editor:
        session = (await editor.request("initialize", V2_INIT))["capabilities"]["session"]
        assert "archive" not in session
        with pytest.raises(RequestError) as missing:
            await editor.request("session/archive", {"sessionId": "s"})
        assert missing.value.code == -32601


async def test_subagents_are_child_sessions_in_v2(tmp_path: Path, project: Path, v2_on: None) -> None:
    """A subagent is a child session to every v2 client (registering them is a baseline of the draft): it
    is announced with ``subagent_update`` on its parent before anything of its own, its question comes on
    its own session (its state said in the announcement, not in a ``state_update``), and a resume with
    replay sends it again after the parent's history, its messages whole."""
    task = {"task": "Fix add", "prompt": "fix add in calc.py", "tools": ["read_file", "edit_file"]}
    hand = ToolCallRequest(id="call_task", name="task", arguments=json.dumps(task))
    model = ScriptedModel([[hand], [edit_call()], text("Fixed add."), text("All done.")])
    asked: list[dict[str, Any]] = []

    async def permission(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return await allow_once(params)

    client = FakeClient(permission=permission)
    async with connect(settings(tmp_path, model), client=client, check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        sid = (await editor.request("session/new", {"cwd": str(project)}))["sessionId"]
        await editor.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
        await idle(editor, sid)
        announced = [u for u in updates(editor, sid) if u["sessionUpdate"] == "subagent_update"]
        child = announced[0]["sessionId"]
        own = updates(editor, child)
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert announced[0]["title"] == "Fix add"
    assert announced[-1]["state"] == {"state": "idle", "stopReason": "end_turn"}
    assert [params["sessionId"] for params in asked] == [child]
    assert own[0]["sessionUpdate"] == "session_message"
    assert not [u for u in own if u["sessionUpdate"] == "state_update"]
    assert any(u["sessionUpdate"] == "tool_call_update" and u.get("kind") == "edit" for u in own)
    async with connect(settings(tmp_path, ScriptedModel()), check=validate_agent_message_v2) as editor:
        await editor.request("initialize", V2_INIT)
        replay = {"sessionId": sid, "cwd": str(project), "replayFrom": {"type": "start"}}
        await editor.request("session/resume", replay)
        again = [u for u in updates(editor, sid) if u["sessionUpdate"] == "subagent_update"]
        said = [u for u in updates(editor, child) if u["sessionUpdate"] in ("agent_message", "agent_message_chunk")]
    assert [u["sessionId"] for u in again] == [child]
    assert [(u["sessionUpdate"], u["content"]) for u in said] == [
        ("agent_message", [{"type": "text", "text": "Fixed add."}])
    ]
