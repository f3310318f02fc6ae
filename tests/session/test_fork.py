"""``session/fork`` (unstable) through the in-memory editor with a store: advertised as
``sessionCapabilities.fork`` only with a store; the fork starts with a copy of the source's visible history
and conversation (the model sees the source's earlier conversation in the fork's first request), its mode and
its model, and goes on independently of it; after a restart, loading each shows its own history; ``/undo`` in
the fork starts with its own turns; an unknown session is ``-32002``. The ``check`` fixture validates the
response against the unstable schema (the only one that has ``session/fork``).

A fork of a session with a compaction, loaded by a client that shows compactions and by one that does not,
covers the client capability that changes what a fork replays."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect

pytestmark = pytest.mark.anyio

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("a - b", "a + b")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "calc.py").write_text(BUGGY)
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def echo() -> ScriptedModel:
    """Answers each prompt with ``re: <prompt>``."""

    def reply(request: Any) -> Any:
        return text(f"re: {request.messages[-1]['content']}")

    return ScriptedModel(fallback=reply)


@asynccontextmanager
async def agent(
    sessions_dir: Path | None, model: ScriptedModel, check: Any, capabilities: dict[str, Any] | None = None
) -> AsyncIterator[Editor]:
    store = (lambda: SessionStore(sessions_dir)) if sessions_dir is not None else None
    async with connect(Settings(make_model=lambda profile: model, store=store), check=check) as editor:
        await editor.initialize(capabilities)
        yield editor


async def fork(editor: Editor, sid: str, cwd: Path, **extra: Any) -> tuple[str, dict[str, Any]]:
    result: dict[str, Any] = await editor.request("session/fork", {"sessionId": sid, "cwd": str(cwd), **extra})
    await editor.settled(result["sessionId"])
    return result["sessionId"], result


async def load(editor: Editor, sid: str, cwd: Path) -> list[dict[str, Any]]:
    mark = len(editor.updates(sid))
    await editor.request("session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []})
    return editor.updates(sid)[mark:]


def thread(updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (u["sessionUpdate"], u["content"]["text"])
        for u in updates
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]


def conversation(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m["content"]) for m in messages if m["role"] != "system"]


def turn(prompt: str) -> list[tuple[str, str]]:
    return [("user_message_chunk", prompt), ("agent_message_chunk", f"re: {prompt}")]


async def test_fork_is_advertised_only_with_a_store(sessions_dir: Path, tmp_path: Path, check: Any) -> None:
    async with agent(sessions_dir, echo(), check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]["sessionCapabilities"]
    assert capabilities["fork"] == {}
    async with agent(None, echo(), check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]["sessionCapabilities"]
        sid = await editor.new_session(str(tmp_path))
        with pytest.raises(RequestError) as caught:
            await editor.request("session/fork", {"sessionId": sid, "cwd": str(tmp_path)})
    assert "fork" not in capabilities
    assert caught.value.code == -32601


async def test_a_fork_starts_with_the_history_and_goes_on_alone(project: Path, sessions_dir: Path, check: Any) -> None:
    model = echo()
    async with agent(sessions_dir, model, check) as editor:
        source = await editor.new_session(str(project))
        for prompt in ("first", "second"):
            assert await editor.prompt(source, prompt) == {"stopReason": "end_turn"}
        await editor.request("session/set_mode", {"sessionId": source, "modeId": "read-only"})
        forked, result = await fork(editor, source, project)
        opened = editor.updates(forked)

        assert await editor.prompt(forked, "in the fork") == {"stopReason": "end_turn"}
        in_the_fork = model.requests[-1].messages
        assert await editor.prompt(source, "in the source") == {"stopReason": "end_turn"}
        in_the_source = model.requests[-1].messages
        listed = await editor.request("session/list", {})

    assert forked != source
    assert set(result) == {"sessionId", "modes", "configOptions"}
    assert result["modes"]["currentModeId"] == "read-only"  # its mode, copied
    # what a new session hears after its response, with the fork's title
    assert [u["sessionUpdate"] for u in opened] == ["available_commands_update", "session_info_update"]
    assert opened[1]["title"] == "first (fork)"
    # the model sees the source's earlier conversation in the fork's first request, and each goes on alone
    earlier = [("user", "first"), ("assistant", "re: first"), ("user", "second"), ("assistant", "re: second")]
    assert conversation(in_the_fork) == [*earlier, ("user", "in the fork")]
    assert conversation(in_the_source) == [*earlier, ("user", "in the source")]
    titles = {s["sessionId"]: s.get("title") for s in listed["sessions"]}
    assert titles == {source: "first", forked: "first (fork)"}

    async with agent(sessions_dir, model, check) as editor:  # a restart: each loads with its own history
        replayed_source = await load(editor, source, project)
        replayed_fork = await load(editor, forked, project)  # updates(forked): framed with the fork's id
    assert thread(replayed_source) == [*turn("first"), *turn("second"), *turn("in the source")]
    assert thread(replayed_fork) == [*turn("first"), *turn("second"), *turn("in the fork")]
    source_lines = (sessions_dir / f"{source}.replay").read_bytes()
    fork_lines = (sessions_dir / f"{forked}.replay").read_bytes()
    assert forked.encode() not in source_lines
    assert source.encode() not in fork_lines  # each update framed anew with the fork's id


async def test_a_fork_of_a_fork_and_after_a_restart(project: Path, sessions_dir: Path, check: Any) -> None:
    model = echo()
    async with agent(sessions_dir, model, check) as editor:
        source = await editor.new_session(str(project))
        await editor.prompt(source, "first")
    async with agent(sessions_dir, model, check) as editor:  # the source is not open in this agent
        forked, _ = await fork(editor, source, project)
        with anyio.fail_after(5):  # a fork can be a connection's first session: start-up is over then too
            await editor.agent.first_session.wait()
        await editor.prompt(forked, "second")
        again, _ = await fork(editor, forked, project)
        await editor.prompt(again, "third")
        first_request = model.requests[-1].messages
        replayed = await load(editor, again, project)
    assert conversation(first_request) == [
        ("user", "first"),
        ("assistant", "re: first"),
        ("user", "second"),
        ("assistant", "re: second"),
        ("user", "third"),
    ]
    assert thread(replayed) == [*turn("first"), *turn("second"), *turn("third")]


async def test_undo_in_a_fork_starts_with_its_own_turns(project: Path, sessions_dir: Path, check: Any) -> None:
    edit = ToolCallRequest(
        id="c1",
        name="edit_file",
        arguments=json.dumps({"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
    )
    model = ScriptedModel(
        [
            [ToolCallRequest(id="c0", name="read_file", arguments='{"path": "calc.py"}')],
            [edit],
            text("Fixed."),
        ]
    )
    async with agent(sessions_dir, model, check) as editor:
        source = await editor.new_session(str(project))
        await editor.prompt(source, "fix it")
        assert (project / "calc.py").read_text() == FIXED
        forked, _ = await fork(editor, source, project)
        mark = len(editor.updates(forked))
        await editor.prompt(forked, "/undo")
        answer = "".join(text for kind, text in thread(editor.updates(forked)[mark:]) if kind == "agent_message_chunk")
        assert "nothing to undo" in answer.lower()
        assert (project / "calc.py").read_text() == FIXED  # the source's change is the source's
        await editor.prompt(source, "/undo")
    assert (project / "calc.py").read_text() == BUGGY


async def test_forking_an_unknown_session_is_resource_not_found(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, echo(), check) as editor:
        await editor.new_session(str(project))
        errors = []
        for sid in ("sess_0123456789abcdef0123456789abcdef", "../../etc/passwd", ""):
            with pytest.raises(RequestError) as caught:
                await editor.request("session/fork", {"sessionId": sid, "cwd": str(project)})
            errors.append(caught.value)
        with pytest.raises(RequestError) as relative:
            await editor.request("session/fork", {"sessionId": "sess_x", "cwd": "project"})
        listed = await editor.request("session/list", {})
    assert [e.code for e in errors] == [-32002, -32002, -32002]
    assert relative.value.code == -32602
    assert len(listed["sessions"]) == 1  # nothing was made


COMPACTION: dict[str, Any] = {"session": {"compaction": {}}}


async def test_a_forked_compaction_replays_for_either_client(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("1"), text("2"), text("3"), text("The gist.")], fallback=lambda r: text("ok"))
    async with agent(sessions_dir, model, check, COMPACTION) as editor:
        source = await editor.new_session(str(project))
        for prompt in ("a", "b", "c", "/compact"):
            await editor.prompt(source, prompt)
        forked, _ = await fork(editor, source, project)
        await editor.prompt(forked, "d")
        first_request = model.requests[-1].messages
    assert conversation(first_request)[0] == (
        "user",
        "Summary of the earlier conversation (older messages were compacted into it):\n\nThe gist.",
    )
    async with agent(sessions_dir, model, check, COMPACTION) as editor:
        replayed = await load(editor, forked, project)
    [compaction] = [u for u in replayed if u["sessionUpdate"] == "compaction_update"]
    assert (compaction["status"], compaction["summary"]) == ("completed", [{"type": "text", "text": "The gist."}])
    async with agent(sessions_dir, model, check, {}) as editor:
        replayed = await load(editor, forked, project)
    assert not any(u["sessionUpdate"].startswith("compaction") for u in replayed)
    assert ("agent_message_chunk", "Compacted the older conversation into a summary:\n\nThe gist.\n") in thread(
        replayed
    )
