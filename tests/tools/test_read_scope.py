"""One scope rule for reads outside the roots, whatever the tool: "always allow" remembers exactly what
its option said. The files directly in a directory (``read_file``, a search of one file) are not the
tree beneath it (a recursive ``grep`` or ``glob``); a tree covers its subdirectories."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.tools.base import Plan, scope_covers
from refagent.tools.files import ReadFile
from refagent.tools.permissions import Permissions
from refagent.tools.search import Glob, Grep
from tests.support.tool_fakes import make_ctx

pytestmark = pytest.mark.anyio


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    workspace, outside = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    (outside / "sub").mkdir(parents=True)
    (outside / "notes.txt").write_text("notes\n")
    (outside / "sub" / "secret.txt").write_text("secret\n")
    return workspace, outside


async def plans(workspace: Path, outside: Path) -> dict[str, Plan]:
    ctx = make_ctx(str(workspace))
    return {
        "read": await ReadFile().prepare({"path": str(outside / "notes.txt")}, ctx),
        "read-sub": await ReadFile().prepare({"path": str(outside / "sub" / "secret.txt")}, ctx),
        "grep-file": await Grep().prepare({"pattern": "x", "path": str(outside / "notes.txt")}, ctx),
        "grep-tree": await Grep().prepare({"pattern": "x", "path": str(outside)}, ctx),
        "glob-tree": await Glob().prepare({"pattern": "**/*", "path": str(outside)}, ctx),
        "grep-sub": await Grep().prepare({"pattern": "x", "path": str(outside / "sub")}, ctx),
    }


def always_allow(plan: Plan) -> Permissions:
    return Permissions(allowed={plan.permission_key})


async def test_allowing_a_files_directory_does_not_allow_searching_beneath_it(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    found = await plans(workspace, outside)
    remembered = always_allow(found["read"])
    assert found["read"].permission_label == f"reads of the files directly in {outside}"
    assert remembered.decide("ask", "read", found["grep-file"]) == ("allow", "")  # the same files
    for name in ("grep-tree", "glob-tree", "read-sub", "grep-sub"):
        assert remembered.decide("full-access", "search", found[name])[0] == "ask", name


async def test_allowing_a_tree_covers_everything_beneath_it(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    found = await plans(workspace, outside)
    assert found["grep-tree"].permission_key == found["glob-tree"].permission_key
    assert found["grep-tree"].permission_label == f"reads of anything under {outside}"
    remembered = always_allow(found["grep-tree"])
    for name in found:
        assert remembered.decide("ask", "read", found[name]) == ("allow", ""), name
    narrower = always_allow(found["grep-sub"])
    assert narrower.decide("ask", "read", found["read-sub"]) == ("allow", "")
    assert narrower.decide("ask", "read", found["read"])[0] == "ask"  # the parent is not under it
    assert narrower.decide("ask", "search", found["grep-tree"])[0] == "ask"


async def test_a_remembered_rejection_covers_what_it_said(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    found = await plans(workspace, outside)
    rejected = Permissions(rejected={found["grep-tree"].permission_key})
    assert rejected.decide("ask", "read", found["read-sub"])[0] == "refuse"
    only_files = Permissions(rejected={found["read"].permission_key})
    assert only_files.decide("ask", "read", found["read-sub"])[0] == "ask"


@pytest.mark.parametrize(
    ("remembered", "key", "covered"),
    [
        ("read-outside-tree:/a", "read-outside:/a", True),
        ("read-outside-tree:/a", "read-outside:/a/b/c", True),
        ("read-outside-tree:/a", "read-outside-tree:/a/b", True),
        ("read-outside-tree:/a", "read-outside:/ab", False),  # a sibling that shares a prefix
        ("read-outside-tree:/a/", "read-outside:/a/b", True),
        ("read-outside-tree:/", "read-outside:/etc", True),
        ("read-outside:/a", "read-outside:/a/b", False),
        ("read-outside:/a", "read-outside-tree:/a", False),
        ("command:git status", "command:git status -s", False),  # commands: equality only
        ("edit", "edit", True),
    ],
)
def test_scope_covers(remembered: str, key: str, covered: bool) -> None:
    assert scope_covers(remembered, key) is covered
