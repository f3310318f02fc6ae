"""A ``.git`` at any depth (a nested or vendored repository, a submodule's ``.git`` file) is out of bounds
for every file tool: nothing under it is written, deleted or moved, and no tree holding one is deleted or
moved with it. The tools refuse before permission is asked, and the disk refuses again at the moment of
use, before it deletes or moves anything. On pyfakefs, and on the real disk for the races."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.tools.files import EditFile, WriteFile
from refagent.tools.patch import ApplyPatch
from refagent.tools.paths import DeletePath, MovePath
from tests.support.tool_fakes import make_ctx

pytestmark = pytest.mark.anyio

ROOT = "/proj"
REFUSED_DELETE = (
    r"vendor/lib contains vendor/lib/\.git, a git repository's \.git, and the file tools never delete a \.git, "
    r"at any depth\. Nothing was deleted\."
)


@pytest.fixture
def proj(fs):  # type: ignore[no-untyped-def]
    fs.create_file("/proj/.git/config", contents="[core]\n")
    fs.create_file("/proj/vendor/lib/.git/config", contents="[core]\n")
    fs.create_file("/proj/vendor/lib/.git/objects/ab/cdef", contents="object\n")
    fs.create_file("/proj/vendor/lib/src/lib.py", contents="x = 1\n")
    fs.create_file("/proj/vendor/other/util.py", contents="y = 2\n")
    fs.create_file("/proj/notes.txt", contents="notes\n")
    return fs


# Sync helpers: the checks of the outcome are plain blocking calls (ruff's ASYNC rules want them out of
# the coroutines).
def tree(root: str = ROOT) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs)


def exists(path: str) -> bool:
    return os.path.lexists(path)


def read(path: str) -> str:
    return Path(path).read_text()


# -- delete_path -------------------------------------------------------------------------------------------


async def test_a_recursive_delete_of_a_nested_repository_is_refused(proj) -> None:  # type: ignore[no-untyped-def]
    before = tree()
    with pytest.raises(ToolError, match=REFUSED_DELETE):
        await DeletePath().prepare({"path": "vendor/lib", "recursive": True}, make_ctx(ROOT))
    assert tree() == before


async def test_the_first_git_found_is_named_however_deep(proj) -> None:  # type: ignore[no-untyped-def]
    proj.create_file("/proj/vendor/deep/a/b/c/.git/HEAD", contents="ref: refs/heads/main\n")
    with pytest.raises(ToolError, match=r"vendor contains vendor/deep/a/b/c/\.git, .*Delete the other entries"):
        await DeletePath().prepare({"path": "vendor", "recursive": True}, make_ctx(ROOT))
    assert exists("/proj/vendor/deep/a/b/c/.git/HEAD")


@pytest.mark.parametrize("name", [".git", ".GIT", ".Git"])
async def test_a_git_file_or_any_case_counts(proj, name: str) -> None:  # type: ignore[no-untyped-def]
    proj.create_file(f"/proj/sub/module/{name}", contents="gitdir: ../../.git/modules/module\n")
    with pytest.raises(ToolError, match=rf"sub contains sub/module/{name}, a git repository's \.git"):
        await DeletePath().prepare({"path": "sub", "recursive": True}, make_ctx(ROOT))
    assert exists(f"/proj/sub/module/{name}")


async def test_a_tree_without_git_is_still_deleted(proj) -> None:  # type: ignore[no-untyped-def]
    plan = await DeletePath().prepare({"path": "vendor/other", "recursive": True}, make_ctx(ROOT))
    await plan.execute()
    assert not exists("/proj/vendor/other")
    assert exists("/proj/vendor/lib/.git/config")


async def test_a_git_that_appears_after_the_check_is_refused_by_the_disk(proj) -> None:  # type: ignore[no-untyped-def]
    plan = await DeletePath().prepare({"path": "vendor/other", "recursive": True}, make_ctx(ROOT))
    proj.create_file("/proj/vendor/other/cloned/.git/HEAD", contents="ref\n")  # while the user was asked
    before = tree()
    with pytest.raises(
        ToolError, match=r"Cannot delete /proj/vendor/other: it contains .*cloned/\.git.*Nothing was deleted"
    ):
        await plan.execute()
    assert tree() == before  # refused before deleting anything: not half done


@pytest.mark.parametrize("path", ["vendor/lib/.git", "vendor/lib/.git/config", "vendor/lib/.git/objects"])
async def test_what_is_inside_a_nested_git_cannot_be_deleted(proj, path: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await DeletePath().prepare({"path": path, "recursive": True}, make_ctx(ROOT))


# -- move_path ---------------------------------------------------------------------------------------------


async def test_moving_a_nested_repository_is_refused(proj) -> None:  # type: ignore[no-untyped-def]
    before = tree()
    with pytest.raises(
        ToolError, match=r"vendor/lib contains vendor/lib/\.git, .*never move a \.git.*Nothing was moved"
    ):
        await MovePath().prepare({"source": "vendor/lib", "destination": "third_party/lib"}, make_ctx(ROOT))
    with pytest.raises(ToolError, match=r"vendor contains vendor/lib/\.git"):
        await MovePath().prepare({"source": "vendor", "destination": "deps"}, make_ctx(ROOT))
    assert tree() == before


@pytest.mark.parametrize(
    ("source", "destination"),
    [
        ("vendor/lib/.git", "lib.git"),
        ("vendor/lib/.git/config", "config"),
        ("notes.txt", "vendor/lib/.git/notes.txt"),
        ("notes.txt", "vendor/lib/.GIT/hooks/post-checkout"),
        ("vendor/other", "vendor/lib/.git/other"),
    ],
)
async def test_moves_into_or_out_of_a_nested_git_are_refused(proj, source: str, destination: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await MovePath().prepare({"source": source, "destination": destination}, make_ctx(ROOT))


async def test_a_git_that_appears_before_the_move_is_refused_by_the_disk(proj) -> None:  # type: ignore[no-untyped-def]
    plan = await MovePath().prepare({"source": "vendor/other", "destination": "moved/other"}, make_ctx(ROOT))
    proj.create_file("/proj/vendor/other/.git/HEAD", contents="ref\n")
    before = tree()
    with pytest.raises(ToolError, match=r"Cannot move /proj/vendor/other: it contains /proj/vendor/other/\.git"):
        await plan.execute()
    assert tree() == before  # not even the destination's parent was made


# -- apply_patch, write_file, edit_file ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "patch",
    [
        "--- a/vendor/lib/.git/config\n+++ /dev/null\n@@ -1 +0,0 @@\n-[core]\n",
        "--- a/vendor/lib/.git/config\n+++ b/vendor/lib/.git/config\n@@ -1 +1 @@\n-[core]\n+[core] x\n",
        "--- /dev/null\n+++ b/vendor/lib/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+touch pwned\n",
        "diff --git a/notes.txt b/vendor/lib/.git/notes.txt\nrename from notes.txt\n"
        "rename to vendor/lib/.git/notes.txt\n--- a/notes.txt\n+++ b/vendor/lib/.git/notes.txt\n"
        "@@ -1 +1 @@\n-notes\n+notes!\n",
        "diff --git a/vendor/lib/.git/config b/config\nrename from vendor/lib/.git/config\nrename to config\n"
        "--- a/vendor/lib/.git/config\n+++ b/config\n@@ -1 +1 @@\n-[core]\n+[core] x\n",
        "--- a/sub/.GIT/config\n+++ b/sub/.GIT/config\n@@ -0,0 +1 @@\n+x\n",
    ],
    ids=["delete", "edit", "create-hook", "rename-into", "rename-out", "upper-case"],
)
async def test_a_patch_touching_a_nested_git_is_refused_whole(proj, patch: str) -> None:  # type: ignore[no-untyped-def]
    proj.create_file("/proj/sub/.GIT/config", contents="")
    before = tree()
    ctx = make_ctx(ROOT)
    other = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-notes\n+NOTES\n"  # a good first file, refused with it
    text = patch if "notes.txt" in patch else other + patch
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await ApplyPatch().prepare({"patch": text}, ctx)
    assert tree() == before
    assert read("/proj/notes.txt") == "notes\n"


@pytest.mark.parametrize("path", ["vendor/lib/.git/config", "vendor/lib/.git/hooks/pre-commit", "a/b/.Git/HEAD"])
async def test_write_and_edit_into_a_nested_git_are_refused(proj, path: str) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await WriteFile().prepare({"path": path, "content": "pwned\n"}, ctx)
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await EditFile().prepare({"path": path, "old_string": "", "new_string": "pwned\n"}, ctx)
    with pytest.raises(ToolError, match=r"inside a \.git directory"):
        await EditFile().prepare({"path": path, "old_string": "[core]", "new_string": "[x]"}, ctx)
    assert read("/proj/vendor/lib/.git/config") == "[core]\n"


# -- the real disk ------------------------------------------------------------------------------------------


async def test_real_disk_full_access_delete_keeps_a_vendored_repository(tmp_path: Path) -> None:
    """The reported case: ``delete_path vendor recursive`` in full-access mode (which asks nothing)."""
    root = tmp_path / "proj"
    (root / "vendor" / "lib" / ".git" / "refs").mkdir(parents=True)
    (root / "vendor" / "lib" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "vendor" / "lib" / "lib.py").write_text("x = 1\n")
    before = tree(str(root))
    with pytest.raises(ToolError, match=r"vendor contains vendor/lib/\.git"):
        await DeletePath().prepare({"path": "vendor", "recursive": True}, make_ctx(str(root)))
    # and the disk, asked directly, refuses the same way without deleting anything
    with pytest.raises(ToolError, match=r"it contains .*vendor/lib/\.git, .*Nothing was deleted"):
        await LocalFileSystem().delete(str(root / "vendor"), recursive=True)
    assert tree(str(root)) == before
