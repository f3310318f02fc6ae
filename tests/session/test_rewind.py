"""``/rewind``: the files and the model's conversation taken back to before a chosen turn, and kept so
across a restart; refused whole when a file changed since the agent wrote it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect

pytestmark = pytest.mark.anyio


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


def three_turns() -> list[Any]:
    """Turn 1 writes a.txt, turn 2 edits it and writes b.txt, turn 3 only talks."""
    return [
        [call(1, "write_file", path="a.txt", content="one\n")],
        text("wrote a"),
        [call(2, "edit_file", path="a.txt", old_string="one", new_string="two")],
        [call(3, "write_file", path="b.txt", content="bee\n")],
        text("edited a, wrote b"),
        text("just talk"),
    ]


@asynccontextmanager
async def agent(sessions: Path, model: ScriptedModel, check: Any) -> AsyncIterator[Editor]:
    settings = Settings(make_model=lambda profile: model, store=lambda: SessionStore(sessions))
    async with connect(settings, client=FakeClient(), check=check) as editor:
        await editor.initialize()
        yield editor


async def said(editor: Editor, sid: str, prompt: str) -> str:
    mark = len(editor.updates(sid))
    assert await editor.prompt(sid, prompt) == {"stopReason": "end_turn"}
    return "".join(
        u["content"]["text"] for u in editor.updates(sid)[mark:] if u["sessionUpdate"] == "agent_message_chunk"
    )


def prompts(model: ScriptedModel) -> list[str]:
    """The user's prompts in the model's last request."""
    return [m["content"] for m in model.requests[-1].messages if m["role"] == "user" and isinstance(m["content"], str)]


async def test_rewind_lists_the_turns_then_goes_back_to_one(tmp_path: Path, check: Any) -> None:
    project, sessions = tmp_path / "project", tmp_path / "sessions"
    project.mkdir()
    model = ScriptedModel([*three_turns(), text("after the rewind")])
    async with agent(sessions, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in ("write a", "edit a and write b", "say something"):
            await said(editor, sid, prompt)
        listed = await said(editor, sid, "/rewind")
        assert f"  2. edit a and write b; changed {project}/a.txt, {project}/b.txt" in listed
        assert "  3. say something" in listed
        answer = await said(editor, sid, "/rewind 2")
        assert (project / "a.txt").read_text() == "one\n"  # as before turn 2
        assert not (project / "b.txt").exists()
        assert "Rewound to before turn 2" in answer
        assert f"- {project}/b.txt" in answer
        await said(editor, sid, "go on")
        assert prompts(model) == ["write a", "go on"]  # turns 2 and 3 are gone for the model
        assert "There is no turn 3 to rewind to" in await said(editor, sid, "/rewind 3")
    # A restart keeps it: the conversation as cut, the turns that can still be rewound.
    later = ScriptedModel([text("ok")])
    async with agent(sessions, later, check) as editor:
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        await said(editor, sid, "hello")
        assert prompts(later) == ["write a", "go on", "hello"]
        await said(editor, sid, "/rewind 1")
        assert not (project / "a.txt").exists()


async def test_rewind_refuses_whole_when_a_file_changed_since(tmp_path: Path, check: Any) -> None:
    project, sessions = tmp_path / "project", tmp_path / "sessions"
    project.mkdir()
    model = ScriptedModel(three_turns())
    async with agent(sessions, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in ("write a", "edit a and write b", "say something"):
            await said(editor, sid, prompt)
        (project / "b.txt").write_text("the user's\n")
        answer = await said(editor, sid, "/rewind 1")
        assert answer.startswith("Rewind refused: these files changed after the agent's last turn wrote them")
        assert (project / "a.txt").read_text() == "two\n"  # nothing was restored
        assert (project / "b.txt").read_text() == "the user's\n"
        assert "  1. write a" in await said(editor, sid, "/rewind")  # and the conversation is whole
        assert "takes a turn's number" in await said(editor, sid, "/rewind last")
