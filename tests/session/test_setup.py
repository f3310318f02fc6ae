"""A session is answered before its workspace is built (:mod:`refagent.session.manager`): the response
carries its state, modes and config options; its tools, sandbox, editor backends, watcher and MCP servers
come after it, in the response's after-work, and what needs them waits (:meth:`Session.ready`).

The tests hold that after-work at its first step (the imports in a worker thread) with a gate, so that the
client's next request arrives while the session is still being set up."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session import opening
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect

pytestmark = pytest.mark.anyio

LIMIT = 5  # seconds: a safety net for waits, never a pause


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds every session's after-work before its workspace is built, until set."""
    opened = threading.Event()
    real = opening.import_workspace

    def held(mcp: bool) -> None:
        opened.wait(LIMIT)
        real(mcp)

    monkeypatch.setattr(opening, "import_workspace", held)
    yield opened
    opened.set()  # never leave a worker thread waiting


def kinds(editor: Editor, sid: str) -> list[str]:
    return [u["sessionUpdate"] for u in editor.updates(sid)]


async def test_a_prompt_sent_right_after_session_new_waits_for_the_workspace(
    tmp_path: Path, gate: threading.Event, check: Any
) -> None:
    model = ScriptedModel([text("hello")])
    async with connect(Settings(make_model=lambda p: model, store=None), check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = result["sessionId"]
        assert [m["id"] for m in result["modes"]["availableModes"]]  # the response needs no workspace
        assert {o["id"] for o in result["configOptions"]} == {"mode", "model"}
        session = editor.agent.sessions[sid]
        assert session.workspace is None
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await editor.prompt(sid, "hi"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await anyio.wait_all_tasks_blocked()
            assert answers == []  # it waits for the workspace
            assert model.requests == []
            gate.set()
        assert answers == [{"stopReason": "end_turn"}]
        assert session.workspace is not None
        assert "read_file" in {t.name for t in model.requests[0].tools}
        # the announcement follows the response and comes before anything of the prompt
        assert kinds(editor, sid)[:2] == ["available_commands_update", "agent_message_chunk"]


async def test_a_mode_switched_right_after_session_new_is_said_after_the_announcements(
    tmp_path: Path, gate: threading.Event, check: Any
) -> None:
    async with connect(Settings(store=None), check=check) as editor:
        await editor.initialize()
        sid = (await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
        answers: list[Any] = []

        async def switch() -> None:
            answers.append(await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(switch)
            await anyio.wait_all_tasks_blocked()
            assert answers == []
            gate.set()
        await editor.settled(sid)
    assert answers == [{}]
    assert kinds(editor, sid) == ["available_commands_update", "current_mode_update", "config_option_update"]


async def test_session_ready_is_the_way_to_wait_for_the_workspace(tmp_path: Path, check: Any) -> None:
    async with connect(Settings(store=None), check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = editor.agent.sessions[result["sessionId"]]
        with anyio.fail_after(LIMIT):
            workspace = await session.ready()
        assert workspace is session.workspace is not None
        assert session.tools is workspace.runner
        assert workspace.sandbox.confinement is not None
        assert session.holding == workspace.sandbox.holding  # what the response's modes described


async def test_close_right_after_session_new(tmp_path: Path, gate: threading.Event, check: Any) -> None:
    async with connect(Settings(store=None), check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = result["sessionId"]
        session = editor.agent.sessions[sid]
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await editor.prompt(sid, "hi"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await anyio.wait_all_tasks_blocked()
            assert await editor.request("session/close", {"sessionId": sid}) == {}
        assert answers == [{"stopReason": "cancelled"}]  # the prompt that waited for the workspace
        gate.set()
        with anyio.fail_after(LIMIT):
            await editor.agent.first_session.wait()  # the session's after-work has run
        await editor.settled(sid)
        assert session.workspace is None  # never built for a closed session
        assert kinds(editor, sid) == []  # and nothing announced about it
        assert sid not in editor.agent.sessions


async def test_delete_right_after_session_new(tmp_path: Path, gate: threading.Event, check: Any) -> None:
    store = SessionStore(tmp_path / "sessions")
    async with connect(Settings(store=lambda: store), check=check) as editor:
        await editor.initialize()
        result = await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = result["sessionId"]
        listed = await editor.request("session/list", {})  # before its index entry: found from its file
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
        assert await editor.request("session/delete", {"sessionId": sid}) == {}
        gate.set()
        with anyio.fail_after(LIMIT):
            await editor.agent.first_session.wait()
        assert await editor.request("session/list", {}) == {"sessions": []}  # not listed again
    assert not (tmp_path / "sessions" / f"{sid}.jsonl").exists()


async def test_a_new_session_is_indexed_after_its_response(tmp_path: Path, check: Any) -> None:
    """Its record file is written before the response (a listing finds it), its index entry after it (the
    index is rewritten whole)."""
    store = SessionStore(tmp_path / "sessions")
    answered_first: list[bool] = []
    editor_box: list[Editor] = []
    list_created = store.list_created

    def recording(session_id: str) -> None:
        sent = editor_box[0].transcript.sent_by("agent")
        answered_first.append(any((m.get("result") or {}).get("sessionId") == session_id for m in sent))
        assert (tmp_path / "sessions" / f"{session_id}.jsonl").exists()
        list_created(session_id)

    store.list_created = recording  # type: ignore[method-assign]
    async with connect(Settings(store=lambda: store), check=check) as editor:
        editor_box.append(editor)
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert sid in (tmp_path / "sessions" / "index.json").read_text()
    assert answered_first == [True]


async def test_a_workspace_that_cannot_be_built_fails_the_prompts_and_the_agent_serves_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, check: Any
) -> None:
    def no_tools() -> list[Any]:
        raise RuntimeError("no tools today")

    async with connect(Settings(tools=no_tools, store=None), check=check) as editor:
        await editor.initialize()
        with caplog.at_level(logging.ERROR, logger="refagent.session.manager"):
            sid = await editor.new_session(str(tmp_path))  # answered: the tools are made after the response
        assert "could not build the workspace" in caplog.text
        said = editor.text(sid)
        assert "This session could not be set up (RuntimeError: no tools today)" in said
        for _ in range(2):  # every prompt, not only the first
            with pytest.raises(RequestError) as info:
                await editor.prompt(sid, "hi")
            assert info.value.code == -32603
            assert "RuntimeError: no tools today" in info.value.message
        # the agent serves on: the session's other methods, and other sessions
        assert await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"}) == {}
        assert await editor.request("session/close", {"sessionId": sid}) == {}
        assert (await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]


async def test_the_model_client_warms_up_after_the_first_session(tmp_path: Path, check: Any) -> None:
    warmed: list[bool] = []
    done = anyio.Event()
    editor_box: list[Editor] = []

    async def warm_up() -> None:
        # never before a session's response: it would compete with the session/new being answered
        sent = editor_box[0].transcript.sent_by("agent")
        warmed.append(any("sessionId" in (m.get("result") or {}) for m in sent))
        done.set()

    async with connect(Settings(warm_up=warm_up, store=None), check=check) as editor:
        editor_box.append(editor)
        await editor.initialize()
        await anyio.wait_all_tasks_blocked()
        assert warmed == []  # not after initialize
        await editor.new_session(str(tmp_path))
        with anyio.fail_after(LIMIT):
            await done.wait()
        await editor.new_session(str(tmp_path))
        await anyio.wait_all_tasks_blocked()
    assert warmed == [True]  # once, after the first session/new response
