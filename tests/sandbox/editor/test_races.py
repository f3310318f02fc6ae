"""Every check of a path holds at the moment of use, through the editor too: a directory inside the
workspace swapped for a symbolic link to outside after the path was checked (while the permission prompt
is open, or while a read is on its way) must not send an ``fs/*`` request outside the roots."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.editor.files import EditorFiles
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, allow_once, connect
from tests.support.acp_schema import validate_agent_message
from tests.support.clients import session_client
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
    files = EditorFiles(session_client(peer), LocalFileSystem(), policy)
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
    files = EditorFiles(session_client(peer), LocalFileSystem(), RootPolicy(str(workspace), []))
    assert await files.read_text(path) == "buffer\n"
    await files.write_text(str(workspace / "sub" / "new.txt"), "new\n")  # a file that does not exist yet
    assert [method for method, _ in peer.sent] == ["fs/read_text_file", "fs/write_text_file"]


# -- a swap between the check and the editor's answer ------------------------------------------------------
#
# The agent checks the path, then the editor opens it itself. An attacker in the workspace (a command left
# running) can replace a directory or the file on the way by a symbolic link to outside in between, and
# even put it back before the editor answers. The fake editor below does exactly that, on every request:
# no thread timing, so every try is a hit. Nothing it read outside may reach the caller.

TICK = 0.02
"""Longer than a clock tick: on kernels whose file times are coarse (before Linux 6.13), a change and its
undoing within one tick of the last change would leave a directory's ctime as it was."""


def swap_dir(workspace: Path, outside: Path) -> Callable[[], None]:
    """``sub`` becomes a link to the outside directory; the undo puts the real one back."""
    swap(workspace, outside)

    def undo() -> None:
        os.unlink(workspace / "sub")
        os.rename(workspace / "sub.orig", workspace / "sub")

    return undo


def swap_file(workspace: Path, outside: Path) -> Callable[[], None]:
    """``sub/notes.txt`` becomes a link to the outside file; the undo puts the real one back."""
    os.rename(workspace / "sub" / "notes.txt", workspace / "sub" / "notes.orig")
    os.symlink(outside / "notes.txt", workspace / "sub" / "notes.txt")

    def undo() -> None:
        os.unlink(workspace / "sub" / "notes.txt")
        os.rename(workspace / "sub" / "notes.orig", workspace / "sub" / "notes.txt")

    return undo


Swap = Callable[[Path, Path], Callable[[], None]]
SWAPS: dict[str, Swap] = {"dir": swap_dir, "file": swap_file}


class SwappingEditor:
    """An editor that answers ``fs/*`` from the disk, opening the path as it is given (following links, as
    editors do), with an attacker's ``swap`` made between the agent's check and the open; with ``undo``,
    the swap is undone after the open and before the answer."""

    def __init__(self, workspace: Path, outside: Path, swap: Swap, *, undo: bool) -> None:
        self.workspace, self.outside, self.swap, self.undo = workspace, outside, swap, undo
        self.swapped: Callable[[], None] | None = None

    async def read(self, params: dict[str, Any]) -> dict[str, Any]:
        self.swapped = self.swap(self.workspace, self.outside)
        content = await anyio.Path(params["path"]).read_text()
        await self._settle()
        return {"content": content}

    async def write(self, params: dict[str, Any]) -> None:
        self.swapped = self.swap(self.workspace, self.outside)
        await anyio.Path(params["path"]).write_text(params["content"])
        await self._settle()

    async def _settle(self) -> None:
        if self.undo:
            await anyio.sleep(TICK)
            self.restore()

    def restore(self) -> None:
        if self.swapped is not None:
            self.swapped()
            self.swapped = None

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {"fs/read_text_file": self.read, "fs/write_text_file": self.write}


class CheckedPeer(DirectPeer):
    """:class:`DirectPeer` that checks every request against the ACP schema, as the wire would."""

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        validate_agent_message({"jsonrpc": "2.0", "id": len(self.sent), "method": method, "params": params}, None)
        return await super().request(method, params)


def editor_files(workspace: Path, editor: SwappingEditor) -> tuple[EditorFiles, CheckedPeer]:
    client = FakeClient(extra=editor.handlers())
    peer = CheckedPeer(client.handle_request)
    policy = RootPolicy(str(workspace), [])
    return EditorFiles(session_client(peer), LocalFileSystem(), policy), peer


TRIES = 25


@pytest.mark.parametrize("undo", [False, True], ids=["swap-stays", "swap-undone"])
@pytest.mark.parametrize("what", SWAPS)
async def test_a_swap_while_the_editor_reads_is_never_read_outside(
    layout: tuple[Path, Path], what: str, undo: bool
) -> None:
    workspace, outside = layout
    editor = SwappingEditor(workspace, outside, SWAPS[what], undo=undo)
    files, peer = editor_files(workspace, editor)
    path = str(workspace / "sub" / "notes.txt")
    read: list[str] = []
    refused: list[str] = []
    for _ in range(TRIES):
        try:
            read.append(await files.read_text(path))
        except ToolError as exc:
            refused.append(str(exc))
        editor.restore()
    assert read == []  # not one read outside (nor, here, inside: every answer came while the way was changed)
    for message in refused:
        assert message.startswith(f"{path} changed while the editor read it ("), message
        assert message.endswith("it was discarded. Read the file again."), message
    assert len(peer.sent) == TRIES  # every try reached the editor: every one was a hit


async def test_an_answer_that_is_the_file_itself_is_kept_though_the_way_changed(layout: tuple[Path, Path]) -> None:
    """A change on the way while the editor read (a file made in the directory, here) is no reason to
    refuse an answer that is exactly what the file holds."""
    workspace, _ = layout

    def touch(workspace: Path, outside: Path) -> Callable[[], None]:
        (workspace / "sub" / "other.txt").write_text("made meanwhile\n")
        return lambda: None

    editor = SwappingEditor(workspace, workspace, touch, undo=True)
    files, _ = editor_files(workspace, editor)
    assert await files.read_text(str(workspace / "sub" / "notes.txt")) == "inside\n"


async def test_a_read_refused_after_the_answer_reaches_the_model_as_a_failed_call(
    layout: tuple[Path, Path], check: Any
) -> None:
    workspace, outside = layout
    editor = SwappingEditor(workspace, outside, swap_dir, undo=True)
    model = ScriptedModel([[ToolCallRequest("c1", "read_file", json.dumps({"path": "sub/notes.txt"}))], text("ok")])
    client = FakeClient(extra=editor.handlers())
    async with connect(Settings(make_model=lambda p: model), client=client, check=check) as agent_editor:
        await agent_editor.initialize(FS)
        sid = await agent_editor.new_session(str(workspace))
        assert await agent_editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        updates = agent_editor.updates(sid)
    [result] = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert "changed while the editor read it" in result
    assert "outside secret" not in result
    assert "outside secret" not in json.dumps(updates)
    assert [u["status"] for u in updates if u.get("status") in ("completed", "failed")] == ["failed"]


@pytest.mark.parametrize("undo", [False, True], ids=["swap-stays", "swap-undone"])
async def test_a_swap_while_the_editor_writes_is_reported(layout: tuple[Path, Path], undo: bool) -> None:
    """The editor wrote outside: done by then, but never reported as a write of the file asked for."""
    workspace, outside = layout
    editor = SwappingEditor(workspace, outside, swap_dir, undo=undo)
    files, _ = editor_files(workspace, editor)
    path = str(workspace / "sub" / "notes.txt")
    with pytest.raises(ToolError) as caught:
        await files.write_text(path, "changed\n")
    editor.restore()
    assert str(caught.value).startswith(f"{path} changed while the editor wrote it (")
    assert "the editor may have written the text elsewhere, even outside the workspace" in str(caught.value)
    assert (outside / "notes.txt").read_text() == "changed\n"  # what the check after the answer cannot undo
    assert (workspace / "sub" / "notes.txt").read_text() == "inside\n"


async def test_a_write_the_file_holds_is_not_reported_though_the_way_changed(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout

    def touch(workspace: Path, outside: Path) -> Callable[[], None]:
        (workspace / "other.txt").write_text("made meanwhile\n")  # in the root: the directory above sub
        return lambda: None

    editor = SwappingEditor(workspace, workspace, touch, undo=True)
    files, _ = editor_files(workspace, editor)
    await files.write_text(str(workspace / "sub" / "notes.txt"), "changed\n")
    assert (workspace / "sub" / "notes.txt").read_text() == "changed\n"
