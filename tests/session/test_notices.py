"""Notices (``session/update`` kind ``notice``) through the in-memory editor: what the agent tells about this
run of itself rather than the thread. For a client that advertises ``clientCapabilities.session.notices``:
an MCP server that failed, a custom tool left out, a broken configuration, the sandbox unavailable, a
session that could not be set up, a retried model request; each a notice, never recorded, never replayed.
For a client that does not: the old behaviour (agent messages, a retry as a thought; a broken configuration
told by the built-in model at the first prompt, not when the session opens), and never a notice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.cli import build_parser, load_settings
from refagent.llm.protocol import Retrying
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.sandbox.confine.confinement import DISABLE_ENV, WRITES, machine_support
from refagent.settings import ConfiguredTools, Settings
from refagent.testing.memory import Editor, connect

pytestmark = pytest.mark.anyio

NOTICES: dict[str, Any] = {"session": {"notices": {}}}
LIMIT = 30  # seconds: a safety net for waits (an MCP server's failure arrives in the background)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture(autouse=True)
def no_model_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_settings`` reads the environment: none of the runner's model settings leak in."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REFAGENT_MODEL", "REFAGENT_PROFILE", "REFAGENT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(DISABLE_ENV, raising=False)


@asynccontextmanager
async def agent(settings: Settings, check: Any, capabilities: dict[str, Any] | None) -> AsyncIterator[Editor]:
    async with connect(settings, check=check) as editor:
        await editor.initialize(capabilities)
        yield editor


def stored(sessions_dir: Path, model: ScriptedModel | None = None, **extra: Any) -> Settings:
    model = model or ScriptedModel(fallback=lambda request: text("ok"))
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(sessions_dir), **extra)


def notices(editor: Editor, sid: str) -> list[dict[str, Any]]:
    return [u for u in editor.updates(sid) if u["sessionUpdate"] == "notice"]


def said(editor: Editor, sid: str) -> str:
    return editor.text(sid)


def on_disk(sessions_dir: Path, sid: str) -> bytes:
    """The session's two files, as one (what a later load could replay or read)."""
    return b"".join((sessions_dir / f"{sid}{suffix}").read_bytes() for suffix in (".jsonl", ".replay"))


async def load(editor: Editor, sid: str, cwd: Path) -> list[dict[str, Any]]:
    """``session/load``: the updates it replayed before its response."""
    mark = len(editor.updates(sid))
    await editor.request("session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []})
    return editor.updates(sid)[mark:]


# -- an MCP server that failed ----------------------------------------------------------------------


def ghost(tmp_path: Path) -> dict[str, Any]:
    return {"name": "ghost", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}


async def new_with_servers(editor: Editor, cwd: Path, servers: list[dict[str, Any]]) -> str:
    result = await editor.request("session/new", {"cwd": str(cwd), "mcpServers": servers})
    sid: str = result["sessionId"]
    await editor.settled(sid)
    return sid


@pytest.mark.slow
async def test_a_failed_mcp_server_is_a_notice_that_is_never_recorded(
    project: Path, sessions_dir: Path, tmp_path: Path, check: Any
) -> None:
    async with agent(stored(sessions_dir), check, NOTICES) as editor:
        sid = await new_with_servers(editor, project, [ghost(tmp_path)])
        with anyio.fail_after(LIMIT):
            notice = await editor.transcript.wait_for_update("notice")
            assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}  # the session works
        assert notice["severity"] == "error"
        assert notice["title"] == "MCP server ghost failed"
        assert notice["description"]  # what went wrong, in words
        assert notices(editor, sid) == [notice]
        assert "MCP server" not in said(editor, sid)  # not also a message in the thread
    assert b"ghost" not in on_disk(sessions_dir, sid)

    async with agent(stored(sessions_dir), check, NOTICES) as editor:
        replayed = await load(editor, sid, project)
    assert [u["sessionUpdate"] for u in replayed] == ["user_message_chunk", "agent_message_chunk"]


@pytest.mark.slow
async def test_without_notices_a_failed_mcp_server_is_said_in_the_thread(
    project: Path, sessions_dir: Path, tmp_path: Path, check: Any
) -> None:
    async with agent(stored(sessions_dir), check, {}) as editor:
        sid = await new_with_servers(editor, project, [ghost(tmp_path)])
        with anyio.fail_after(LIMIT):
            await editor.transcript.wait_for(
                lambda sender, m: "MCP server ghost: " in json.dumps(m.get("params", {}).get("update", {}))
            )
            assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}
        assert said(editor, sid).startswith("MCP server ghost: ")
        assert notices(editor, sid) == []


# -- a custom tool left out -------------------------------------------------------------------------


def with_a_missing_tool(sessions_dir: Path) -> Settings:
    tools = ConfiguredTools(["no_such_module_for_refagent:Outline"], [])
    return stored(sessions_dir, tools=tools, problems=tools.problems)


async def test_a_custom_tool_left_out_is_a_notice(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(with_a_missing_tool(sessions_dir), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}
        [notice] = notices(editor, sid)
        assert said(editor, sid) == "ok"  # the model's answer, nothing else
    assert notice["severity"] == "warning"
    assert notice["title"] == "A custom tool was left out"
    assert notice["description"].startswith("custom tool 'no_such_module_for_refagent:Outline' left out: importing")
    assert b"no_such_module_for_refagent" not in on_disk(sessions_dir, sid)


async def test_without_notices_a_custom_tool_left_out_is_a_message(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    async with agent(with_a_missing_tool(sessions_dir), check, {}) as editor:
        sid = await editor.new_session(str(project))
        opening = said(editor, sid)
        assert notices(editor, sid) == []
    assert opening.startswith("custom tool 'no_such_module_for_refagent:Outline' left out: importing")
    assert opening.endswith("\n")


# -- a broken configuration -------------------------------------------------------------------------


def broken_settings(tmp_path: Path) -> Settings:
    """What ``refagent --config broken.toml`` runs with: the built-in model, saying so."""
    path = tmp_path / "broken.toml"
    path.write_text("[profiles.work\nmodel = 'x'\n")  # an unclosed table header
    settings = load_settings(build_parser().parse_args(["--config", str(path)]))
    assert settings.broken is not None
    assert "not valid TOML" in settings.broken
    return settings


async def test_a_broken_configuration_is_a_notice_when_the_session_opens(
    project: Path, tmp_path: Path, check: Any
) -> None:
    async with agent(broken_settings(tmp_path), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        [notice] = notices(editor, sid)  # before any prompt
        assert said(editor, sid) == ""
        response = await editor.prompt(sid, "hi")
        answer = said(editor, sid)
    assert response["stopReason"] == "end_turn"
    assert response["_meta"]["refagent"]["failure"] == {"kind": "config", "message": answer}
    assert notice["severity"] == "error"
    assert notice["title"] == "The configuration is broken"
    assert "broken.toml: not valid TOML" in notice["description"]
    assert "The configuration is broken: " in answer  # the turn says it too, as a failure of kind "config"


async def test_without_notices_a_broken_configuration_is_told_at_the_first_prompt(
    project: Path, tmp_path: Path, check: Any
) -> None:
    async with agent(broken_settings(tmp_path), check, {}) as editor:
        sid = await editor.new_session(str(project))
        opened = [u["sessionUpdate"] for u in editor.updates(sid)]
        response = await editor.prompt(sid, "hi")
        answer = said(editor, sid)
        assert response["_meta"]["refagent"]["failure"] == {"kind": "config", "message": answer}
        assert notices(editor, sid) == []
    assert opened == ["available_commands_update"]  # nothing said when the session opens
    assert "built-in scripted model" in answer
    assert "The configuration is broken: " in answer
    assert "broken.toml: not valid TOML" in answer


# -- the sandbox unavailable ------------------------------------------------------------------------


async def test_an_unconfined_machine_is_a_notice(
    project: Path, sessions_dir: Path, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "namespaces,landlock")
    async with agent(stored(sessions_dir), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        [notice] = notices(editor, sid)
        assert said(editor, sid) == ""
    assert notice["severity"] == "warning"
    assert notice["title"] == "Commands are not fully confined on this machine"
    assert WRITES in notice["description"]
    assert b"not fully confined" not in on_disk(sessions_dir, sid)


async def test_without_notices_an_unconfined_machine_is_a_message(
    project: Path, sessions_dir: Path, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "namespaces,landlock")
    async with agent(stored(sessions_dir), check, {}) as editor:
        sid = await editor.new_session(str(project))
        opening = said(editor, sid)
        assert notices(editor, sid) == []
    assert opening.startswith("Sandbox: commands are not fully confined on this machine (")
    assert WRITES in opening


async def test_a_confined_machine_gets_no_notice(project: Path, sessions_dir: Path, check: Any) -> None:
    if machine_support().missing("workspace"):
        pytest.skip(f"this machine does not confine commands fully: {machine_support().summary()}")
    async with agent(stored(sessions_dir), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        assert notices(editor, sid) == []


async def test_several_pieces_of_news_are_one_notice_each(
    project: Path, tmp_path: Path, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "namespaces,landlock")
    async with agent(broken_settings(tmp_path), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        titles = [n["title"] for n in notices(editor, sid)]
    assert titles == ["The configuration is broken", "Commands are not fully confined on this machine"]


# -- a session that could not be set up -------------------------------------------------------------


def no_tools() -> list[Any]:
    raise RuntimeError("the tools are on strike")


async def test_a_session_that_could_not_be_set_up_is_a_notice(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(stored(sessions_dir, tools=no_tools), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        [notice] = notices(editor, sid)
        assert said(editor, sid) == ""
        with pytest.raises(RequestError) as caught:
            await editor.prompt(sid, "hi")
    assert notice["severity"] == "error"
    assert notice["title"] == "This session could not be set up"
    assert notice["description"] == "RuntimeError: the tools are on strike. Open a new session."
    assert caught.value.code == -32603
    assert "the tools are on strike" in caught.value.message


async def test_without_notices_a_session_that_could_not_be_set_up_is_a_message(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    async with agent(stored(sessions_dir, tools=no_tools), check, {}) as editor:
        sid = await editor.new_session(str(project))
        opening = said(editor, sid)
        assert notices(editor, sid) == []
    assert opening == (
        "This session could not be set up (RuntimeError: the tools are on strike): its prompts will fail. "
        "Open a new one.\n"
    )


# -- a retried model request ------------------------------------------------------------------------


def retried() -> ScriptedModel:
    return ScriptedModel([[Retrying(2, 0.0, "HTTP 429: slow down", 4), *text("made it")]])


async def test_a_retried_request_is_a_notice_that_is_not_replayed(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    async with agent(stored(sessions_dir, retried()), check, NOTICES) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        shown = editor.updates(sid)
    [notice] = [u for u in shown if u["sessionUpdate"] == "notice"]
    assert notice == {
        "sessionUpdate": "notice",
        "severity": "warning",
        "title": "The model request is being retried",
        "description": "HTTP 429: slow down; retrying in 0.0 s (attempt 2 of 4).",
    }
    assert not any(u["sessionUpdate"] == "agent_thought_chunk" for u in shown)
    assert b"slow down" not in on_disk(sessions_dir, sid)

    async with agent(stored(sessions_dir), check, NOTICES) as editor:
        replayed = await load(editor, sid, project)
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in replayed] == [
        ("user_message_chunk", "go"),
        ("agent_message_chunk", "made it"),
    ]


async def test_without_notices_a_retried_request_is_a_thought(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(stored(sessions_dir, retried()), check, {}) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        thought = editor.text(sid, "agent_thought_chunk")
        assert notices(editor, sid) == []
        assert said(editor, sid) == "made it"
    assert "HTTP 429: slow down; retrying in 0.0 s (attempt 2 of 4)." in thought


async def test_a_notices_capability_that_is_not_an_object_is_not_one(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    """``session.notices`` must be an object (``{}``); ``true`` or ``null`` advertise nothing."""
    for value in (True, None):
        async with agent(stored(sessions_dir, retried()), check, {"session": {"notices": value}}) as editor:
            sid = await editor.new_session(str(project))
            assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
            assert notices(editor, sid) == []
            assert "retrying" in editor.text(sid, "agent_thought_chunk")
