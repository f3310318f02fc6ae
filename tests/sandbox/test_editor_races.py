"""Every check of a path holds at the moment of use, through the editor too: a directory inside the
workspace swapped for a symbolic link to outside after the path was checked (while the permission prompt
is open, or while a read is on its way) must not send an ``fs/*`` request outside the roots."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.editor import EditorFiles
from refagent.sandbox.local_fs import LocalFileSystem
from refagent.sandbox.policy import RootPolicy
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, allow_once, connect
from tests.support.tool_fakes import DirectPeer

pytestmark = pytest.mark.anyio

FS = {"fs": {"readTextFile": True, "writeTextFile": True}}


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "notes.txt").write_text("inside\n")
    outside.mkdir()
    (outside / "notes.txt").write_text("outside secret\n")
    return workspace, outside


def swap(workspace: Path, outside: Path) -> None:
    """``sub`` becomes a link to the outside directory (the original kept aside)."""
    os.rename(workspace / "sub", workspace / "sub.orig")
    os.symlink(outside, workspace / "sub")


async def test_a_write_approved_before_the_swap_is_refused(layout: tuple[Path, Path], check: Any) -> None:
    workspace, outside = layout
    target = str(workspace / "sub" / "notes.txt")
    edit = {"path": "sub/notes.txt", "old_string": "inside", "new_string": "changed"}
    model = ScriptedModel([[ToolCallRequest("c1", "edit_file", json.dumps(edit))], text("done")])

    async def swap_then_allow(params: dict[str, Any]) -> dict[str, Any]:
        swap(workspace, outside)  # the attacker wins the race while the user reads the prompt
        return await allow_once(params)

    client = FakeClient(permission=swap_then_allow, save=True)
    client.files[target] = "inside\n"
    async with connect(Settings(make_model=lambda p: model), client=client, check=check) as editor:
        await editor.initialize(FS)
        sid = await editor.new_session(str(workspace))
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        updates = editor.updates(sid)
    assert (outside / "notes.txt").read_text() == "outside secret\n"
    assert client.files[target] == "inside\n"  # the editor was never asked to write
    [result] = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert "changed while the call waited" in result
    assert [u["status"] for u in updates if u.get("status") in ("completed", "failed")] == ["failed"]


async def test_a_read_after_the_swap_is_refused(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    path = str(workspace / "sub" / "notes.txt")
    policy = RootPolicy(str(workspace), [])
    assert policy.resolve(path).path == path  # checked while it was inside
    swap(workspace, outside)
    client = FakeClient()
    client.files[str(outside / "notes.txt")] = "outside secret\n"
    client.files[path] = "what the editor would follow the link to"
    peer = DirectPeer(client.handle_request)
    files = EditorFiles(peer, "s", LocalFileSystem(), read=True, write=True, policy=policy)
    with pytest.raises(ToolError, match="changed while the call waited"):
        await files.read_text(path)
    with pytest.raises(ToolError):
        await files.write_text(path, "x")
    assert peer.sent == []  # no fs/* request left the agent


async def test_unchanged_paths_go_through(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    path = str(workspace / "sub" / "notes.txt")
    client = FakeClient()
    client.files[path] = "buffer\n"
    peer = DirectPeer(client.handle_request)
    files = EditorFiles(peer, "s", LocalFileSystem(), read=True, write=True, policy=RootPolicy(str(workspace), []))
    assert await files.read_text(path) == "buffer\n"
    await files.write_text(str(workspace / "sub" / "new.txt"), "new\n")  # a file that does not exist yet
    assert [method for method, _ in peer.sent] == ["fs/read_text_file", "fs/write_text_file"]
