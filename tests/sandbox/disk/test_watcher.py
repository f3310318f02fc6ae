"""The root watcher (refagent.sandbox.disk.watcher) on the real disk (watchfiles needs real inotify events).

A watcher is inherently asynchronous: these tests wait, bounded, for a sentinel file to be reported.
Events arrive in order, so once the sentinel is in, everything written before it has been judged.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.watcher import RootWatcher

pytestmark = pytest.mark.anyio

disk = LocalFileSystem()


def write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def until(watcher: RootWatcher, sentinel: str, seconds: float = 5.0) -> set[str]:
    """Everything drained until ``sentinel`` shows up."""
    seen: set[str] = set()
    with anyio.fail_after(seconds):
        while sentinel not in seen:
            seen.update(watcher.drain())
            await anyio.sleep(0.02)
    return seen


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Path, RootWatcher]]:
    root = tmp_path / "root"
    write(root / ".gitignore", "*.log\nbuild/\n")
    write(root / "sub" / ".gitignore", "local.txt\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    watcher = RootWatcher([str(root)], debounce_ms=100, step_ms=20)
    async with anyio.create_task_group() as tasks:
        await tasks.start(watcher.run)
        assert watcher.watching
        yield root, watcher
        tasks.cancel_scope.cancel()


async def test_external_changes_are_reported_and_ignored_ones_are_not(watched: tuple[Path, RootWatcher]) -> None:
    root, watcher = watched
    write(root / "app.py")
    write(root / "debug.log")
    write(root / "build" / "out.o")
    write(root / "sub" / "local.txt")
    write(root / ".git" / "index")
    write(root / "__pycache__" / "app.cpython-311.pyc")
    write(root / "sentinel")
    seen = await until(watcher, "sentinel")
    assert seen == {"app.py", "sentinel"}


async def test_the_agents_own_writes_are_not_reported(watched: tuple[Path, RootWatcher]) -> None:
    root, watcher = watched
    for name in ("own.py", "deep/er/own2.py"):
        await disk.write_text(str(root / name), "mine")
        watcher.note_own_write(str(root / name))
    write(root / "sentinel")
    seen = await until(watcher, "sentinel")
    assert seen == {"sentinel"}  # nor the temporary files of the atomic writes


async def test_a_later_external_change_to_an_own_file_is_reported(watched: tuple[Path, RootWatcher]) -> None:
    root, watcher = watched
    await disk.write_text(str(root / "own.py"), "mine")
    watcher.note_own_write(str(root / "own.py"))
    write(root / "sentinel")
    assert await until(watcher, "sentinel") == {"sentinel"}
    write(root / "own.py", "the user's change")
    assert "own.py" in await until(watcher, "own.py")


async def test_own_deletes_and_moves_are_not_reported(watched: tuple[Path, RootWatcher]) -> None:
    root, watcher = watched
    write(root / "tree" / "a" / "b.txt")
    write(root / "old.txt")
    write(root / "sentinel1")
    await until(watcher, "sentinel1")
    await disk.delete(str(root / "tree"), recursive=True)
    watcher.note_own_write(str(root / "tree"))
    await disk.move(str(root / "old.txt"), str(root / "moved" / "new.txt"))
    watcher.note_own_write(str(root / "old.txt"))
    watcher.note_own_write(str(root / "moved" / "new.txt"))
    watcher.note_own_write(str(root / "moved"))
    write(root / "sentinel2")
    assert await until(watcher, "sentinel2") == {"sentinel2"}


async def test_a_changed_gitignore_applies_from_then_on(watched: tuple[Path, RootWatcher]) -> None:
    root, watcher = watched
    write(root / ".gitignore", "*.log\nbuild/\n*.tmpx\n")
    await until(watcher, ".gitignore")
    write(root / "scratch.tmpx")
    write(root / "sentinel")
    assert await until(watcher, "sentinel") == {"sentinel"}


async def test_a_pathological_gitignore_does_not_stop_the_watcher(watched: tuple[Path, RootWatcher]) -> None:
    """Matching one name against this glob took 213 s with a backtracking matcher, in the watcher's thread
    and with the GIL held: the agent stopped answering whenever a file changed."""
    root, watcher = watched
    write(root / ".gitignore", "*a*a*a*a*a*a*a*a*a*a*a*a*b\n")
    await until(watcher, ".gitignore")
    write(root / ("a" * 40))
    write(root / ("a" * 40 + "b"))  # ignored
    write(root / "sentinel")
    assert await until(watcher, "sentinel") == {"a" * 40, "sentinel"}


@pytest.mark.parametrize("kind", ["fifo", "zero"])
async def test_a_gitignore_that_is_a_fifo_or_a_device_is_skipped(tmp_path: Path, kind: str) -> None:
    """Reading it would wait for a writer forever, or never end: the watch goes on, without its rules."""
    root = tmp_path / "root"
    write(root / "sub" / "keep")
    if kind == "fifo":
        os.mkfifo(root / "sub" / ".gitignore")
    else:
        (root / "sub" / ".gitignore").symlink_to("/dev/zero")
    watcher = RootWatcher([str(root)], debounce_ms=100, step_ms=20)
    async with anyio.create_task_group() as tasks:
        await tasks.start(watcher.run)
        write(root / "sub" / "a.log")
        write(root / "sentinel")
        seen = await until(watcher, "sentinel")
        tasks.cancel_scope.cancel()
    assert "sub/a.log" in seen


async def test_changes_beyond_the_cap_are_counted(tmp_path: Path) -> None:
    watcher = RootWatcher([str(tmp_path)], max_changes=3, debounce_ms=100, step_ms=20)
    async with anyio.create_task_group() as tasks:
        await tasks.start(watcher.run)
        for index in range(6):
            write(tmp_path / f"f{index}")
        with anyio.fail_after(5):
            while len(watcher._pending) < 3 or watcher._missed < 3:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        kept, missed = watcher.drain_counted()
        tasks.cancel_scope.cancel()
    assert (len(kept), missed) == (3, 3)
    assert watcher.drain_counted() == ([], 0)


async def test_paths_outside_the_cwd_root_are_absolute(tmp_path: Path) -> None:
    cwd, extra = tmp_path / "cwd", tmp_path / "extra"
    cwd.mkdir()
    extra.mkdir()
    watcher = RootWatcher([str(cwd), str(extra)], debounce_ms=100, step_ms=20)
    async with anyio.create_task_group() as tasks:
        await tasks.start(watcher.run)
        write(extra / "notes.md")
        write(cwd / "sentinel")
        seen = await until(watcher, "sentinel")
        tasks.cancel_scope.cancel()
    assert seen == {"sentinel", str(extra / "notes.md")}


async def test_a_huge_root_is_not_watched(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / f"d{index}").mkdir()
    watcher = RootWatcher([str(tmp_path)], max_dirs=3)
    with anyio.fail_after(5):
        await watcher.run()  # returns: nothing to do
    assert not watcher.watching


async def test_a_missing_root_neither_crashes_nor_blocks(tmp_path: Path) -> None:
    watcher = RootWatcher([str(tmp_path / "missing")])
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(watcher.run)
            assert not watcher.watching
            tasks.cancel_scope.cancel()
    assert watcher.drain() == []


@pytest.mark.slow
async def test_a_deleted_and_recreated_root_is_watched_again(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    watcher = RootWatcher([str(root)], debounce_ms=100, step_ms=20)
    async with anyio.create_task_group() as tasks:
        await tasks.start(watcher.run)
        shutil.rmtree(root)
        with anyio.fail_after(5):
            while watcher.watching:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        root.mkdir()
        with anyio.fail_after(5):
            while not watcher.watching:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        write(root / "back.txt")
        assert "back.txt" in await until(watcher, "back.txt")
        tasks.cancel_scope.cancel()


async def test_cancelling_stops_the_watch_thread(tmp_path: Path) -> None:
    watcher = RootWatcher([str(tmp_path)], step_ms=20)
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tasks:
            await tasks.start(watcher.run)
            tasks.cancel_scope.cancel()
