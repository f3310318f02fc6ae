"""delete_path and move_path on a fake file system (pyfakefs) with the real sandbox classes."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.seams import TreePreview
from refagent.tools.files import ReadFile
from refagent.tools.paths import DeletePath, MovePath
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio

ROOT = "/proj"


@pytest.fixture
def proj(fs):  # type: ignore[no-untyped-def]
    fs.create_file("/proj/src/app.py", contents="print('hi')\n")
    fs.create_file("/proj/src/pkg/mod.py", contents="x = 1\n")
    fs.create_file("/proj/logo.png", contents=b"\x89PNG\x00\x00")
    fs.create_file("/elsewhere/keep.txt", contents="keep\n")
    return fs


async def test_delete_a_file_previews_its_removal(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    plan = await DeletePath().prepare({"path": "src/app.py"}, ctx)
    assert plan.mutating
    assert plan.permission_key == "delete"
    assert plan.title == "Delete src/app.py"
    assert plan.preview == [{"type": "diff", "path": "/proj/src/app.py", "oldText": "print('hi')\n", "newText": ""}]
    result = await plan.execute()
    assert not exists("/proj/src/app.py")
    assert result.output == "Deleted src/app.py."


async def test_delete_a_binary_file_describes_it(proj) -> None:  # type: ignore[no-untyped-def]
    plan = await DeletePath().prepare({"path": "logo.png"}, make_ctx(ROOT))
    assert plan.preview[0]["type"] == "content"
    await plan.execute()
    assert not exists("/proj/logo.png")


async def test_a_directory_needs_recursive(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"src is a directory \(2 files and 1 directory, 18 bytes\)\. Set recursive"):
        await DeletePath().prepare({"path": "src"}, ctx)
    assert exists("/proj/src/app.py")
    plan = await DeletePath().prepare({"path": "src", "recursive": True}, ctx)
    text = plan.preview[0]["content"]["text"]  # type: ignore[typeddict-item]
    assert text.startswith("Delete the directory src and everything in it (2 files and 1 directory, 18 bytes):")
    assert "- pkg/mod.py" in text
    assert "- app.py" in text
    await call(DeletePath(), ctx, path="src", recursive=True)
    assert not exists("/proj/src")


async def test_roots_outside_paths_and_missing_paths_are_refused(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    for path in (".", "/proj", "/"):
        with pytest.raises(ToolError, match=r"root"):
            await DeletePath().prepare({"path": path, "recursive": True}, ctx)
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await DeletePath().prepare({"path": "/elsewhere/keep.txt"}, ctx)
    with pytest.raises(ToolError, match=r"Not found: nope"):
        await DeletePath().prepare({"path": "nope"}, ctx)


async def test_a_symbolic_link_is_deleted_not_its_target(proj) -> None:  # type: ignore[no-untyped-def]
    proj.create_symlink("/proj/link.py", "/proj/src/app.py")
    plan = await DeletePath().prepare({"path": "link.py"}, make_ctx(ROOT))
    assert "symbolic link" in plan.preview[0]["content"]["text"]  # type: ignore[typeddict-item]
    await plan.execute()
    assert not lexists("/proj/link.py")
    assert exists("/proj/src/app.py")


async def test_delete_refuses_a_file_changed_since_it_was_read(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="src/app.py")
    append("/proj/src/app.py", "# the user's work\n")
    with pytest.raises(ToolError, match=r"changed since you last read it"):
        await DeletePath().prepare({"path": "src/app.py"}, ctx)


async def test_a_deleted_file_is_forgotten_by_the_tracker(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="src/app.py")
    await call(DeletePath(), ctx, path="src/app.py")
    assert not ctx.reads.knows("/proj/src/app.py")  # type: ignore[attr-defined]


async def test_move_renames_and_creates_parents(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="src/app.py")
    plan = await MovePath().prepare({"source": "src/app.py", "destination": "lib/main.py"}, ctx)
    assert plan.title == "Move src/app.py to lib/main.py"
    assert plan.permission_key == "move"
    assert plan.locations == [{"path": "/proj/src/app.py"}, {"path": "/proj/lib/main.py"}]
    result = await plan.execute()
    assert result.locations == [{"path": "/proj/lib/main.py"}]
    assert read("/proj/lib/main.py") == "print('hi')\n"
    assert not exists("/proj/src/app.py")
    assert ctx.reads.knows("/proj/lib/main.py")  # type: ignore[attr-defined]


async def test_move_a_directory(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    await call(MovePath(), ctx, source="src/pkg", destination="pkg2")
    assert exists("/proj/pkg2/mod.py")
    with pytest.raises(ToolError, match=r"into itself"):
        await MovePath().prepare({"source": "src", "destination": "src/inner"}, ctx)


async def test_move_refuses_to_overwrite_and_to_leave_the_roots(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"src/pkg/mod.py already exists; move_path does not overwrite"):
        await MovePath().prepare({"source": "src/app.py", "destination": "src/pkg/mod.py"}, ctx)
    with pytest.raises(ToolError, match=r"already exists"):
        await MovePath().prepare({"source": "src/app.py", "destination": "src/pkg"}, ctx)
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await MovePath().prepare({"source": "src/app.py", "destination": "/elsewhere/app.py"}, ctx)
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await MovePath().prepare({"source": "/elsewhere/keep.txt", "destination": "keep.txt"}, ctx)
    with pytest.raises(ToolError, match=r"Not found"):
        await MovePath().prepare({"source": "nope", "destination": "nope2"}, ctx)
    with pytest.raises(ToolError, match=r"same path"):
        await MovePath().prepare({"source": "src/app.py", "destination": "./src/app.py"}, ctx)
    assert exists("/proj/src/app.py")


def exists(path: str) -> bool:
    return os.path.exists(path)


def lexists(path: str) -> bool:
    return os.path.lexists(path)


def read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def append(path: str, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


class Elsewhere(LocalFileSystem):
    """A disk whose trees, links and file contents say something else than the host's: the previews must
    come from the disk the sandbox gives, never from the host directly."""

    def __init__(self, tree: TreePreview) -> None:
        super().__init__()
        self.tree = tree

    async def preview_tree(self, path: str) -> TreePreview:
        return self.tree

    async def link_target(self, path: str) -> str | None:
        return "/remote/target"

    async def read_start(self, path: str, max_bytes: int, *, within: Sequence[str] = ()) -> bytes | None:
        return b"remote text\n"


async def test_previews_come_from_the_sandboxs_disk(proj) -> None:  # type: ignore[no-untyped-def]
    proj.create_symlink("/proj/link", "/proj/src/app.py")
    disk = Elsewhere(TreePreview(files=3, dirs=1, size=42, entries=["a.txt", "b/"]))
    ctx = dataclasses.replace(make_ctx(ROOT), disk=disk, files=disk)
    tree = await DeletePath().prepare({"path": "src", "recursive": True}, ctx)
    assert tree.preview == [
        {
            "type": "content",
            "content": {
                "type": "text",
                "text": "Delete the directory src and everything in it "
                "(3 files and 1 directory, 42 bytes):\n- a.txt\n- b/\n- ...",
            },
        }
    ]
    file = await DeletePath().prepare({"path": "src/app.py"}, ctx)
    assert file.preview[0]["oldText"] == "remote text\n"  # type: ignore[typeddict-item]
    link = await DeletePath().prepare({"path": "link"}, ctx)
    assert "a symbolic link to /remote/target" in str(link.preview)
    disk.tree = TreePreview(complete=False, git="pkg/.git")
    for tool, args in (
        (DeletePath(), {"path": "src", "recursive": True}),
        (MovePath(), {"source": "src", "destination": "s"}),
    ):
        with pytest.raises(ToolError, match=r"contains src/pkg/\.git"):
            await tool.prepare(args, ctx)
