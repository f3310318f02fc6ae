"""An editor that answers ``fs/read_text_file`` with an error it should not give.

Neovim's CodeCompanion sometimes opens two sessions at once on one connection, prompts on the first, and
then answers the agent's reads for it with ``-32602 invalid sessionId``. The file is inside the roots and on
the disk: the agent reads it from there, under the same rules, and tells the model the editor's copy was
missing. A write the editor refuses is not done on the disk behind its back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, allow_once, connect

pytestmark = pytest.mark.anyio

FS = {"fs": {"readTextFile": True, "writeTextFile": True}}


def request(name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"call_{name}", name=name, arguments=json.dumps(args))


def confused_editor(first: list[str]) -> FakeClient:
    """An editor that mixes up its sessions: every fs request for the first session opened fails."""
    client = FakeClient(permission=allow_once)

    async def read(params: dict[str, Any]) -> Any:
        if params["sessionId"] == first[0]:
            raise RequestError("Invalid params", data={"details": "invalid sessionId"}, code=-32602)
        return {"content": client.files.get(params["path"], "")}

    async def write(params: dict[str, Any]) -> Any:
        if params["sessionId"] == first[0]:
            raise RequestError("Invalid params", data={"details": "invalid sessionId"}, code=-32602)
        client.files[params["path"]] = params["content"]
        return None

    client.extra = {"fs/read_text_file": read, "fs/write_text_file": write}
    return client


async def test_two_sessions_at_once_and_a_read_the_editor_fails(tmp_path: Path, check: Any) -> None:
    (tmp_path / "app.py").write_text("print('on disk')\n")
    model = ScriptedModel(
        [
            [request("read_file", path="app.py")],
            [request("edit_file", path="app.py", old_string="on disk", new_string="edited")],
            text("done"),
        ]
    )
    first: list[str] = []
    client = confused_editor(first)
    async with connect(Settings(make_model=lambda profile: model, store=None), client=client, check=check) as editor:
        await editor.initialize(FS)
        opened: list[str] = []

        async def open_one() -> None:
            opened.append(await editor.new_session(str(tmp_path)))

        async with anyio.create_task_group() as group:  # two session/new at once on one connection
            group.start_soon(open_one)
            group.start_soon(open_one)
        assert len(set(opened)) == 2  # two independent sessions
        first.append(opened[0])
        assert await editor.prompt(opened[0], "read app.py and fix it") == {"stopReason": "end_turn"}
        tools = [m["content"] for m in editor.agent.sessions[opened[0]].history if m["role"] == "tool"]
        other = editor.agent.sessions[opened[1]].history
    assert "print('on disk')" in tools[0]
    assert "The editor could not give its copy of" in tools[0]
    assert "changes not yet saved in the editor may be missing" in tools[0]
    # The edit read the file from the disk too, but its write went to the editor, which refused it: the
    # model hears the editor's error, and the disk keeps its text.
    assert "The editor refused to write" in tools[1]
    assert "invalid sessionId" in tools[1]
    assert (tmp_path / "app.py").read_text() == "print('on disk')\n"
    assert other == []  # the second session saw nothing of the first's turn


async def test_a_write_the_editor_does_after_a_cancel_is_told(tmp_path: Path, check: Any) -> None:
    """The turn is cancelled while the editor is writing the file (it still writes it after the agent
    stopped waiting): the call waits for the answer, and the model hears the file was written, not that
    the call never ran."""
    (tmp_path / "app.py").write_text("print('old')\n")
    model = ScriptedModel([[request("write_file", path="app.py", content="print('new')\n")], text("done")])
    client = FakeClient(permission=allow_once)
    writing = anyio.Event()
    answer = anyio.Event()

    async def write(params: dict[str, Any]) -> Any:
        writing.set()
        await answer.wait()  # the editor is slow: it answers after the cancel
        client.files[params["path"]] = params["content"]
        return None

    async def read(params: dict[str, Any]) -> Any:
        return {"content": client.files.get(params["path"], (tmp_path / "app.py").read_text())}

    client.extra = {"fs/write_text_file": write, "fs/read_text_file": read}
    async with connect(Settings(make_model=lambda profile: model, store=None), client=client, check=check) as editor:
        await editor.initialize(FS)
        sid = await editor.new_session(str(tmp_path))
        async with anyio.create_task_group() as tasks:

            async def cancel_while_writing() -> None:
                await writing.wait()
                await editor.cancel(sid)
                await anyio.wait_all_tasks_blocked()
                answer.set()

            tasks.start_soon(cancel_while_writing)
            assert await editor.prompt(sid, "rewrite app.py") == {"stopReason": "cancelled"}
        tools = [m["content"] for m in editor.agent.sessions[sid].history if m["role"] == "tool"]
    assert client.files[str(tmp_path / "app.py")] == "print('new')\n"
    assert tools == ["The user cancelled this call after app.py was written."]
