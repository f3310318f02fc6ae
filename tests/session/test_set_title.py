"""``session/set_title`` (unstable ``sessionCapabilities.title``): a user's title, normalised and stored, for an
open session or a saved one, said in a ``session_info_update``, and never replaced by the agent's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import RequestError
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session.manager import MAX_TITLE_CHARS
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import env_for, prompt

pytestmark = pytest.mark.anyio


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def titles(editor: Editor, sid: str) -> list[Any]:
    return [u.get("title") for u in editor.updates(sid) if u["sessionUpdate"] == "session_info_update"]


async def listed(editor: Editor) -> dict[str, Any]:
    return {s["sessionId"]: s.get("title") for s in (await editor.request("session/list", {}))["sessions"]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


async def test_a_users_title_is_stored_said_and_kept_over_the_agents_own(
    tmp_path: Path, project: Path, check: Any
) -> None:
    model = ScriptedModel([text("one"), text("two")])
    async with connect(settings(tmp_path, model), check=check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]["sessionCapabilities"]
        assert capabilities["title"] == {}
        sid = await editor.new_session(str(project))
        assert await editor.request("session/set_title", {"sessionId": sid, "title": "  Fix\nthe\tcart  "}) == {
            "title": "Fix the cart"
        }
        assert titles(editor, sid) == ["Fix the cart"]
        await editor.prompt(sid, "Please look at the checkout code")  # would have named it
        await editor.prompt(sid, "And the tests")
        assert titles(editor, sid) == ["Fix the cart"]
        assert (await listed(editor))[sid] == "Fix the cart"
    async with connect(settings(tmp_path, ScriptedModel([text("three")])), check=check) as editor:
        await editor.initialize()
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        await editor.prompt(sid, "once more")
        assert (await listed(editor))[sid] == "Fix the cart"
        assert editor.agent.sessions[sid].title == "Fix the cart"


async def test_the_agents_own_title_is_sent_once(tmp_path: Path, project: Path, check: Any) -> None:
    async with connect(settings(tmp_path, ScriptedModel([text("a"), text("b")])), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "Add a test for the parser")
        await editor.prompt(sid, "Now another")
        assert titles(editor, sid) == ["Add a test for the parser"]
        # and a user's replaces it
        await editor.request("session/set_title", {"sessionId": sid, "title": "Parser tests"})
        assert titles(editor, sid) == ["Add a test for the parser", "Parser tests"]


async def test_a_saved_session_not_open_can_be_retitled(tmp_path: Path, project: Path, check: Any) -> None:
    async with connect(settings(tmp_path, ScriptedModel([text("a"), text("b")])), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "Make the build faster")
    async with connect(settings(tmp_path, ScriptedModel([text("c")])), check=check) as editor:
        await editor.initialize()
        long_title = "word " * 100
        stored = (await editor.request("session/set_title", {"sessionId": sid, "title": long_title}))["title"]
        assert len(stored) == MAX_TITLE_CHARS
        assert stored.endswith("…")
        assert (await listed(editor))[sid] == stored
        assert titles(editor, sid) == []  # not open here: nothing to update
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        await editor.settled(sid)
        assert editor.agent.sessions[sid].title == stored
        await editor.prompt(sid, "go on")
        assert (await listed(editor))[sid] == stored


async def test_a_bad_title_or_session_is_refused(tmp_path: Path, project: Path, check: Any) -> None:
    async with connect(settings(tmp_path, ScriptedModel([text("a")])), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        for params, code, message in [
            ({"sessionId": sid, "title": " \n\t "}, -32602, "the title is empty"),
            ({"sessionId": sid}, -32602, "missing required field 'title'"),
            ({"sessionId": sid, "title": None}, -32602, "missing required field 'title'"),
            ({"sessionId": sid, "title": 7}, -32602, "'title' must be a string"),
            ({"sessionId": "sess_unknown", "title": "x"}, -32002, "Session not found"),
        ]:
            with pytest.raises(RequestError, match=message) as refused:
                await editor.request("session/set_title", params)
            assert refused.value.code == code
        assert titles(editor, sid) == []
        assert await editor.prompt(sid, "still here") == {"stopReason": "end_turn"}


async def test_without_saved_sessions_there_is_no_set_title(project: Path, check: Any) -> None:
    settings_ = Settings(make_model=lambda profile: ScriptedModel([text("a")]), store=None)
    async with connect(settings_, check=check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]["sessionCapabilities"]
        assert "title" not in capabilities
        sid = await editor.new_session(str(project))
        with pytest.raises(RequestError) as refused:
            await editor.request("session/set_title", {"sessionId": sid, "title": "x"})
        assert refused.value.code == -32601


@pytest.mark.slow
async def test_an_agent_process_keeps_the_users_title(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer(fallback=Turn(text="ok")) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            assert (await agent.initialize())["agentCapabilities"]["sessionCapabilities"]["title"] == {}
            sid = await agent.new_session(tmp_path)
            assert await agent.result("session/set_title", {"sessionId": sid, "title": "Mine"}) == {"title": "Mine"}
            _, shown = await prompt(agent, sid, "a prompt that would name it")
            listing = await agent.result("session/list", {})
    assert not [u for u in shown if u["sessionUpdate"] == "session_info_update" and "title" in u]
    assert [s["title"] for s in listing["sessions"] if s["sessionId"] == sid] == ["Mine"]
