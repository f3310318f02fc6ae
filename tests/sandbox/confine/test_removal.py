"""Removing a session's private ``/tmp``: by descriptor, so that a command that swaps entries for links while
it runs cannot turn the removal on anything outside (as root, a path walk would ``chmod 0700`` and list
the directory a link leads to), and only after the session's commands have ended."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.confine.confinement import Confinement
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.confine.removal import MAX_REMOVED_DEPTH, remove_tree
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect
from tests.support.sandboxed import SUPPORT, outside

__all__ = ["outside"]  # a fixture, found by name

pytestmark = pytest.mark.anyio


SWAPPER = """
import os, sys
while True:
    for n in range(300):
        name = "d%d" % n
        try:
            os.rmdir(name + "/e"); os.rmdir(name); os.symlink(sys.argv[1], name)
        except OSError:
            try:
                os.unlink(name); os.makedirs(name + "/e")
            except OSError:
                pass
"""
"""Swaps each directory for a link to the victim, and back, as fast as Python can."""


def victim(outside: Path) -> Path:
    """A directory outside, mode 0755, with a file in it: what a link in the private /tmp leads to."""
    path = outside / "victim"
    path.mkdir()
    path.chmod(0o755)
    (path / "keep").write_text("keep\n")
    return path


def holds_something(directory: Path, name: str | None = None) -> bool:
    """Whether ``directory`` has an entry (named ``name``, if given)."""
    entries = [entry.name for entry in directory.iterdir()]
    return bool(entries) if name is None else name in entries


def exists(path: str) -> bool:
    return os.path.lexists(path)


def untouched(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o755 and (path / "keep").read_text() == "keep\n"


def test_the_removal_follows_no_link_and_opens_up_what_it_removes(tmp_path: Path, outside: Path) -> None:
    """Links to a directory outside at every depth are unlinked, never entered; directories a command made
    unreadable and unwritable (mode 0) are opened up through their own descriptors and removed."""
    target = victim(outside)
    tree = tmp_path / "refagent-tmp-x"
    (tree / "a" / "b" / "c").mkdir(parents=True)
    for where in (tree, tree / "a", tree / "a" / "b" / "c"):
        (where / "link").symlink_to(target)
        (where / "file").write_text("x")
    (tree / "a" / "b").chmod(0)
    (tree / "a").chmod(0o500)
    (tree / "sealed").mkdir()
    (tree / "sealed" / "inner").mkdir()
    (tree / "sealed").chmod(0)
    remove_tree(str(tree))
    assert not tree.exists()
    assert untouched(target)


def test_the_top_itself_swapped_for_a_link_is_unlinked(tmp_path: Path, outside: Path) -> None:
    target = victim(outside)
    (tmp_path / "refagent-tmp-x").symlink_to(target)
    remove_tree(str(tmp_path / "refagent-tmp-x"))
    assert not (tmp_path / "refagent-tmp-x").is_symlink()
    assert untouched(target)


def test_a_tree_deeper_than_the_bound_is_left_in_part(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tree = tmp_path / "refagent-tmp-x"
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.mkdir(tree.name, dir_fd=fd)
        level = os.open(tree.name, os.O_RDONLY, dir_fd=fd)
        for _ in range(MAX_REMOVED_DEPTH + 5):  # deeper than PATH_MAX allows by name: by descriptor
            os.mkdir("d", dir_fd=level)
            deeper = os.open("d", os.O_RDONLY, dir_fd=level)
            os.close(level)
            level = deeper
        os.close(level)
    finally:
        os.close(fd)
    remove_tree(str(tree))
    assert "deeper than 512 directories" in caplog.text
    assert tree.exists()  # what could not go stays: a leak of /tmp, not a hole


@pytest.mark.slow
@pytest.mark.parametrize("support", ["namespaces", "no namespaces"])
async def test_a_command_racing_the_removal_gets_nothing_outside(tmp_path: Path, outside: Path, support: str) -> None:
    """A background command swaps directories of the private /tmp for links to a directory outside, as
    fast as it can, while the session's directory is removed: the removal touches nothing outside."""
    if support == "namespaces" and SUPPORT.missing("workspace"):
        pytest.skip("this machine cannot confine commands")
    target = victim(outside)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for _ in range(6):
        confinement = Confinement(
            [str(workspace)], SUPPORT if support == "namespaces" else SUPPORT.without(["namespaces"])
        )
        tmp = confinement.private_tmp()
        for n in range(300):
            os.makedirs(f"{tmp}/d{n}/e")
        racer = f"cd \"$TMPDIR\" && {sys.executable} -I -S -c '{SWAPPER}' {target}"
        async with anyio.create_task_group() as tasks:
            job = await LocalTerminals(confinement=confinement).start(racer, str(workspace), tasks, sandbox="workspace")
            await anyio.sleep(0.3)
            await anyio.to_thread.run_sync(confinement.close)  # while it runs: the worst case
            await job.stop()
        assert untouched(target)
        # What the racer made faster than it went is left with its lock file, for the next agent's sweep
        # (not run here: it sweeps the whole of /tmp, and other tests running beside this one judge it).
        if exists(tmp):
            assert exists(f"{tmp}.lock")
            remove_tree(tmp)
            remove_tree(f"{tmp}.layers")
            os.unlink(f"{tmp}.lock")


@pytest.mark.slow
async def test_closing_a_session_waits_for_its_background_commands_before_removing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: Any
) -> None:
    """A command that ignores SIGTERM and keeps writing into its /tmp: the session's close kills it and
    waits for it, then removes the directory whole (without a namespace too, where the directory is the
    host's own and a command still writing would make it anew)."""
    monkeypatch.setenv("REFAGENT_SANDBOX_DISABLE", "namespaces")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    writer = "trap '' TERM; while :; do mkdir -p \"$TMPDIR/w$RANDOM\"; done"
    started = ToolCallRequest("c1", "run_command", json.dumps({"command": writer, "background": True}))
    model = ScriptedModel([[started], text("started")])
    async with connect(Settings(make_model=lambda profile: model), client=FakeClient(), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(workspace))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        session = editor.agent.sessions[sid]
        assert session.workspace is not None
        confinement = session.workspace.sandbox.confinement
        assert confinement is not None
        tmp = Path(confinement.private_tmp())
        with anyio.fail_after(10):
            while not holds_something(tmp):  # noqa: ASYNC110 - a process of another group: nothing to wait on
                await anyio.sleep(0.02)
        await editor.request("session/close", {"sessionId": sid})
    assert not holds_something(tmp.parent, tmp.name)
