"""The unstable v1 session queries through the in-memory editor: ``session/status`` while a turn waits on the
editor (``running``), the archived mark kept by a session loaded while archived and by the index rebuilt from
the record files, and ``auth/status`` for a model that needs no key. (Over real pipes:
``tests/e2e/test_archive_status_process.py``.) Every message is validated against the unstable schema too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.server.auth_status import auth_status
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect
from tests.support.acp_schema import validate_agent_message_unstable

pytestmark = pytest.mark.anyio

check = validate_agent_message_unstable


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def listed(result: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(s["sessionId"], s["archived"]) for s in result["sessions"]]


async def test_status_is_running_while_the_turn_waits_on_the_editor(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    read = ToolCallRequest(id="call_1", name="read_file", arguments=f'{{"path": "{project / "a.py"}"}}')
    model = ScriptedModel([[read], text("Read it.")])
    seen: dict[str, Any] = {}
    editors: list[Editor] = []

    async def read_text_file(params: dict[str, Any]) -> dict[str, Any]:
        """The editor, asked for a file in the middle of the turn, asks what the session is doing."""
        seen["status"] = await editors[0].request("session/status", {"sessionId": params["sessionId"]})
        return {"content": "x = 1\n"}

    client = FakeClient(extra={"fs/read_text_file": read_text_file})
    async with connect(settings(tmp_path, model), client=client, check=check) as editor:
        editors.append(editor)
        await editor.initialize({"fs": {"readTextFile": True}})
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "Read a.py") == {"stopReason": "end_turn"}
        after = await editor.request("session/status", {"sessionId": sid})
    assert seen["status"] == {"status": "open", "_meta": {"refagent": {"turn": "running"}}}
    assert after == {"status": "open", "_meta": {"refagent": {"turn": "idle"}}}


async def test_a_session_loaded_while_archived_stays_archived_until_unarchived(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([text("one"), text("two"), text("three")])
    load = {"cwd": str(project), "mcpServers": []}
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "hello")
        assert await editor.request("session/archive", {"sessionId": sid}) == {}
        await editor.request("session/load", {"sessionId": sid, **load})  # allowed; the client should unarchive
        await editor.prompt(sid, "again")  # saves its state: still archived
        assert listed(await editor.request("session/list", {})) == []
    (tmp_path / "sessions" / "index.json").unlink()  # rebuilt from the record files: the mark is in them
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        assert listed(await editor.request("session/list", {"archived": "only"})) == [(sid, True)]
        await editor.request("session/load", {"sessionId": sid, **load})
        assert await editor.request("session/unarchive", {"sessionId": sid}) == {}  # open: saved so from now on
        await editor.prompt(sid, "and again")
        assert listed(await editor.request("session/list", {})) == [(sid, False)]
    (tmp_path / "sessions" / "index.json").unlink()
    assert [(i["sessionId"], i["archived"]) for i in SessionStore(tmp_path / "sessions").list()[0]] == [(sid, False)]


async def test_a_fork_of_an_archived_session_is_listed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with connect(settings(tmp_path, ScriptedModel([text("one")])), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "hello")
        await editor.request("session/archive", {"sessionId": sid})
        fork = await editor.request("session/fork", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        assert listed(await editor.request("session/list", {})) == [(fork["sessionId"], False)]


def test_auth_status_of_a_model_that_needs_no_key_and_of_the_built_in_model() -> None:
    local = ModelProfile(id="local", name="Ollama", model="qwen3", base_url="http://127.0.0.1:11434/v1")
    assert auth_status(Settings(profiles=[local])) == {
        "state": "not_required",
        "accounts": [{"label": "Ollama (qwen3)", "active": True}],
    }
    assert auth_status(Settings()) == {"state": "not_required"}  # nothing configured, nowhere to configure it
    assert auth_status(Settings(config_file="/nowhere/config.toml")) == {"state": "unauthenticated"}
