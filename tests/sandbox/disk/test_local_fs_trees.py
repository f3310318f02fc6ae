"""Tree operations of the local file system (refagent.sandbox.disk.local_fs) are all or nothing, or say exactly
what happened: recursive deletes, moves (across file systems too), and the directories a failed write or
move made. pyfakefs (with a second mount point, and an unprivileged user where permissions matter), and
the real disk where the kernel matters."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.helpers import reset_ids, set_uid

from refagent.errors import ToolError
from refagent.sandbox.disk import delete_move as fs_delete_move
from refagent.sandbox.disk import trees as fs_trees
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.write import TEMP_PREFIX

pytestmark = pytest.mark.anyio

disk = LocalFileSystem()


def tree(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs)


def read(path: str) -> str:
    return Path(path).read_text()


def exists(path: str) -> bool:
    return os.path.lexists(path)


def other_file_system(near: Path) -> Path | None:
    """/dev/shm when it is another file system than ``near``'s."""
    other = Path("/dev/shm")
    return other if other.is_dir() and os.stat(other).st_dev != os.stat(near).st_dev else None


@pytest.fixture
def unprivileged(fs: FakeFilesystem) -> Iterator[FakeFilesystem]:
    """pyfakefs as an ordinary user (the tests may run as root, who may write anywhere)."""
    set_uid(1000)
    try:
        yield fs
    finally:
        reset_ids()


# -- recursive delete -----------------------------------------------------------------------------------------


async def test_a_tree_with_a_directory_we_may_not_empty_is_refused_whole(unprivileged: FakeFilesystem) -> None:
    fs = unprivileged
    fs.create_dir("/p", perm_bits=0o777)
    for name in ("a", "b", "c"):
        fs.create_file(f"/p/tree/{name}/file", contents=name)
    os.chmod("/p/tree", 0o777)
    for name in ("a", "c"):
        os.chmod(f"/p/tree/{name}", 0o777)
    os.chmod("/p/tree/b", 0o555)  # a read-only directory, like a Go module cache
    before = tree("/p")
    with pytest.raises(ToolError, match=r"the entries of /p/tree/b may not be removed .* Nothing was deleted\."):
        await disk.delete("/p/tree", recursive=True)
    assert tree("/p") == before  # not a/ gone and b/ left: nothing gone


async def test_a_tree_whose_parent_we_may_not_write_is_refused(unprivileged: FakeFilesystem) -> None:
    fs = unprivileged
    fs.create_file("/locked/tree/file", contents="x")
    os.chmod("/locked/tree", 0o777)
    os.chmod("/locked", 0o555)
    with pytest.raises(ToolError, match=r"the entries of /locked may not be removed"):
        await disk.delete("/locked/tree", recursive=True)
    assert read("/locked/tree/file") == "x"


async def test_the_removal_walk_stops_before_a_git_that_appeared(fs: FakeFilesystem) -> None:
    """The safety net behind the survey: the deleting walk checks each directory before it empties it."""
    fs.create_file("/p/tree/a.txt")
    fs.create_file("/p/tree/sub/deep/.git/HEAD", contents="ref\n")
    fs.create_file("/p/tree/sub/deep/b.txt")
    removal = fs_trees.Removal()
    dir_fd = os.open("/p", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(fs_trees.Appeared) as caught:
            removal.remove(dir_fd, "tree")
    finally:
        os.close(dir_fd)
    assert caught.value.relative == "sub/deep/.git"
    assert read("/p/tree/sub/deep/.git/HEAD") == "ref\n"
    assert exists("/p/tree/sub/deep/b.txt")  # nothing in the directory holding it was touched


async def test_a_symbolic_link_named_git_counts_too(fs: FakeFilesystem) -> None:
    fs.create_file("/p/tree/file")
    fs.create_symlink("/p/tree/.git", "/elsewhere/repo.git")
    with pytest.raises(ToolError, match=r"contains /p/tree/\.git"):
        await disk.delete("/p/tree", recursive=True)
    assert exists("/p/tree/.git")


# -- move --------------------------------------------------------------------------------------------------------


async def test_a_move_that_finds_a_git_after_the_rename_moves_it_back(fs: FakeFilesystem) -> None:
    """The check after the rename (a .git that appeared between the survey and the rename)."""
    fs.create_file("/p/dst/.git/HEAD", contents="ref\n")  # as if just renamed from /p/src
    src_fd = os.open("/p", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ToolError, match=r"appeared in it while it was being moved.* It was moved back; nothing"):
            fs_delete_move._check_moved(src_fd, "src", src_fd, "dst", "/p/src", "/p/dst")
    finally:
        os.close(src_fd)
    assert read("/p/src/.git/HEAD") == "ref\n"
    assert not exists("/p/dst")


async def test_a_move_across_file_systems_copies_then_deletes(fs: FakeFilesystem) -> None:
    fs.add_mount_point("/other")
    fs.create_file("/p/tree/bin/run.sh", contents="#!/bin/sh\n")
    os.chmod("/p/tree/bin/run.sh", 0o755)
    fs.create_file("/p/tree/data/a.txt", contents="a")
    fs.create_symlink("/p/tree/link", "data/a.txt")
    fs.create_file("/p/single.txt", contents="single")
    await disk.move("/p/tree", "/other/new/tree")
    await disk.move("/p/single.txt", "/other/single.txt")
    assert tree("/other") == [
        "new",
        "new/tree",
        "new/tree/bin",
        "new/tree/bin/run.sh",
        "new/tree/data",
        "new/tree/data/a.txt",
        "new/tree/link",
        "single.txt",
    ]
    assert stat.S_IMODE(os.stat("/other/new/tree/bin/run.sh").st_mode) == 0o755
    assert os.readlink("/other/new/tree/link") == "data/a.txt"
    assert read("/other/single.txt") == "single"
    assert tree("/p") == []


async def test_a_move_across_file_systems_of_a_tree_with_git_is_refused(fs: FakeFilesystem) -> None:
    fs.add_mount_point("/other")
    fs.create_file("/p/tree/lib/.git/HEAD", contents="ref\n")
    with pytest.raises(ToolError, match=r"contains /p/tree/lib/\.git.*Nothing was moved"):
        await disk.move("/p/tree", "/other/deep/tree")
    assert tree("/other") == []  # the destination's parent was not even made
    assert read("/p/tree/lib/.git/HEAD") == "ref\n"


async def test_a_failed_move_across_file_systems_leaves_nothing_behind(tmp_path: Path) -> None:
    """A FIFO cannot be copied: refused after the destination's parents were made, which go again."""
    other = other_file_system(tmp_path)
    if other is None:
        pytest.skip("needs /dev/shm on another file system")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "a.txt").write_text("a")
    os.mkfifo(tmp_path / "tree" / "sub" / "pipe")
    target = other / f"refagent-test-{os.getpid()}-{tmp_path.name}"
    try:
        with pytest.raises(ToolError, match=r"different file systems.*sub/pipe is a special file.*Nothing was moved"):
            await disk.move(str(tmp_path / "tree"), str(target / "deep" / "tree"))
        assert not target.exists()
        assert tree(str(tmp_path / "tree")) == ["a.txt", "sub", "sub/pipe"]
        # and without the FIFO it moves, modes kept, nothing left of the source or of the temporary copy
        os.unlink(tmp_path / "tree" / "sub" / "pipe")
        (tmp_path / "tree" / "a.txt").chmod(0o700)
        await disk.move(str(tmp_path / "tree"), str(target / "deep" / "tree"))
        assert tree(str(target)) == ["deep", "deep/tree", "deep/tree/a.txt", "deep/tree/sub"]
        assert stat.S_IMODE((target / "deep" / "tree" / "a.txt").stat().st_mode) == 0o700
        assert not (tmp_path / "tree").exists()
        assert not [name for name in os.listdir(target / "deep") if name.startswith(TEMP_PREFIX)]
    finally:
        if target.exists():
            await disk.delete(str(target), recursive=True)


# -- what a failed write or move made ------------------------------------------------------------------------------


async def test_a_failed_write_removes_the_directories_it_made(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"Cannot write"):
        await disk.write_text(str(tmp_path / "new" / "deeper" / ("x" * 300)), "text")  # a name too long
    assert os.listdir(tmp_path) == []


async def test_remove_dir_removes_only_an_empty_directory(fs: FakeFilesystem) -> None:
    fs.create_file("/p/full/file")
    fs.create_dir("/p/empty")
    fs.create_symlink("/p/link", "/p/empty")
    await disk.remove_dir("/p/empty")
    with pytest.raises(ToolError, match=r"Cannot remove the directory /p/full"):
        await disk.remove_dir("/p/full")
    with pytest.raises(ToolError):
        await disk.remove_dir("/p/link")  # a link is not followed
    assert tree("/p") == ["full", "full/file", "link"]
