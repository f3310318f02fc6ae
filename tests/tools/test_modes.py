"""Each mode's policy sits with the mode (:mod:`refagent.tools.modes`): what it refuses, what runs in it
without asking, and how it is described; :meth:`Permissions.decide` consults the mode and compares no mode
id itself; the client's list of modes (:func:`refagent.session.modes.modes_for`) is made from the same
objects."""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path
from typing import Any

import pytest

from refagent.acp.types import ToolKind
from refagent.sandbox.confine.confinement import Support
from refagent.session.modes import DEFAULT_MODE, MODE_IDS, modes_for
from refagent.tools import permissions
from refagent.tools.base import Plan, ToolResult
from refagent.tools.modes import ASK, BY_ID, DEFAULT, MODES, Mode, mode_named
from refagent.tools.permissions import Permissions

FULL = Support(landlock=6, namespaces=True, netns=True).holding()
NONE = Support(landlock=0, namespaces=False, netns=False).holding()


async def _nothing() -> ToolResult:
    raise AssertionError("a decision never runs the plan")


def plan(**fields: Any) -> Plan:
    return Plan(title="t", execute=_nothing, **fields)


EDIT = plan(mutating=True, permission_key="edit")
MOVE = plan(mutating=True, permission_key="move")
DELETE = plan(mutating=True, permission_key="delete")
CONFINED = plan(mutating=True, confined=True, permission_key="command:make")
UNCONFINED = plan(mutating=True, permission_key="command:curl")
RUNS_LATER = plan(mutating=True, runs_later=".envrc", permission_key="run-later:/p/.envrc")
READ_OUTSIDE = plan(outside=True, permission_key="read-outside:/etc")
FETCH = plan(network=True, permission_key="fetch:example.com")
READ = plan()

CALLS: dict[str, tuple[ToolKind, Plan]] = {
    "read": ("read", READ),
    "edit": ("edit", EDIT),
    "move": ("move", MOVE),
    "delete": ("delete", DELETE),
    "confined command": ("execute", CONFINED),
    "unconfined command": ("execute", UNCONFINED),
    "edit of a file git runs": ("edit", RUNS_LATER),
    "read outside": ("read", READ_OUTSIDE),
    "fetch": ("fetch", FETCH),
}

EXPECTED = {
    # read, edit, move, delete, confined, unconfined, runs later, read outside, fetch
    "ask": ["allow", "ask", "ask", "ask", "ask", "ask", "ask", "ask", "ask"],
    "accept-edits": ["allow", "allow", "allow", "ask", "ask", "ask", "ask", "ask", "ask"],
    "auto": ["allow", "allow", "allow", "ask", "allow", "ask", "ask", "ask", "ask"],
    "read-only": ["allow", "refuse", "refuse", "refuse", "refuse", "refuse", "refuse", "ask", "ask"],
    "full-access": ["allow", "allow", "allow", "allow", "allow", "allow", "allow", "ask", "allow"],
}
"""What each mode decides about each call, when the user has remembered nothing."""


@pytest.mark.parametrize("mode_id", list(EXPECTED))
def test_each_mode_decides_each_kind_of_call(mode_id: str) -> None:
    decided = [Permissions().decide(mode_id, kind, p)[0] for kind, p in CALLS.values()]
    assert dict(zip(CALLS, decided, strict=True)) == dict(zip(CALLS, EXPECTED[mode_id], strict=True))


def test_every_mode_is_in_the_table_once() -> None:
    assert [mode.id for mode in MODES] == list(EXPECTED)
    assert set(BY_ID) == MODE_IDS == set(EXPECTED)
    assert DEFAULT is ASK
    assert DEFAULT_MODE == "ask"


def test_the_policy_is_the_modes() -> None:
    read_only = BY_ID["read-only"]
    refusal = read_only.refusal(EDIT)
    assert refusal is not None
    assert "read-only mode" in refusal
    assert read_only.refusal(READ) is None
    assert all(mode.refusal(EDIT) is None for mode in MODES if mode is not read_only)
    auto = BY_ID["auto"]
    assert auto.allows("edit", EDIT)
    assert auto.allows("execute", CONFINED)
    assert not auto.allows("execute", UNCONFINED)
    assert not auto.allows("edit", RUNS_LATER)  # what git or an editor runs later asks, but in full access
    assert BY_ID["full-access"].allows("edit", RUNS_LATER)
    assert not BY_ID["accept-edits"].allows("execute", CONFINED)


def test_a_mode_of_ones_own_needs_no_change_to_the_permissions() -> None:
    """A mode is data: one that lets confined commands run but asks for edits is decided by its fields."""
    commands_only = Mode("commands", "Commands", "Run confined commands without asking.", allows_confined=True)
    assert commands_only.allows("execute", CONFINED)
    assert not commands_only.allows("edit", EDIT)
    assert commands_only.describe(["network"]) == "Run confined commands without asking."


def test_an_unknown_mode_id_asks() -> None:
    """The session never sets one; a decision that cannot find its mode asks rather than allows."""
    assert mode_named("yolo") is DEFAULT
    assert Permissions().decide("yolo", "execute", CONFINED) == ("ask", "")
    assert Permissions().decide("yolo", "read", READ) == ("allow", "")


def test_remembered_answers_hold_in_every_mode_but_read_only_refuses_first() -> None:
    remembered = Permissions(allowed={"command:curl"}, rejected={"edit"})
    for mode in MODES:
        allowed = remembered.decide(mode.id, "execute", UNCONFINED)[0]
        assert allowed == ("refuse" if mode.read_only else "allow"), mode
        assert remembered.decide(mode.id, "edit", EDIT)[0] == "refuse", mode


def test_the_client_is_told_what_each_mode_does_on_its_machine() -> None:
    confined = {m["id"]: m["description"] for m in modes_for(FULL)}
    unconfined = {m["id"]: m["description"] for m in modes_for(NONE)}
    assert [m["id"] for m in modes_for(FULL)] == [mode.id for mode in MODES]
    assert {m["name"] for m in modes_for(FULL)} == {mode.name for mode in MODES}
    assert confined == {mode.id: mode.description for mode in MODES}
    changed = {mode_id for mode_id in confined if confined[mode_id] != unconfined[mode_id]}
    assert changed == {"auto", "full-access"}
    gaps = ", ".join(NONE.missing("workspace"))
    assert gaps in unconfined["auto"]
    assert gaps in unconfined["full-access"]


def test_permissions_compare_no_mode_id() -> None:
    """The decision per mode is the mode's: ``tools/permissions.py`` compares nothing with a mode id (``"ask"``
    is a decision there too, which it may return)."""
    tree = ast.parse(inspect.getsource(permissions))
    compared = [
        ast.unparse(compare)
        for compare in ast.walk(tree)
        if isinstance(compare, ast.Compare)
        for node in ast.walk(compare)
        if isinstance(node, ast.Constant) and node.value in MODE_IDS
    ]
    assert compared == []


def test_what_runs_later_is_found_at_the_top_of_a_nested_repository(tmp_path: Path) -> None:
    """A root that holds repositories (the home directory): the editor that opens ``project`` runs its
    ``.vscode/tasks.json`` as it would the root's, so an edit there asks as one at the root does."""
    runs_later = permissions.runs_later
    (tmp_path / "project" / ".git").mkdir(parents=True)
    (tmp_path / "notes" / "deep").mkdir(parents=True)

    async def nothing() -> Any:
        raise AssertionError

    def plan(path: Path) -> Plan:
        return Plan("Write", nothing, locations=[{"path": str(path)}], mutating=True, permission_key="edit")

    marked = runs_later(plan(tmp_path / "project" / ".vscode" / "tasks.json"), [str(tmp_path)])
    assert (marked.runs_later, marked.permission_key) == (
        "project/.vscode/tasks.json: git or an editor runs it",
        f"run-later:{tmp_path}/project/.vscode/tasks.json",
    )
    assert runs_later(plan(tmp_path / ".envrc"), [str(tmp_path)]).runs_later == ".envrc: git or an editor runs it"
    # Not a repository: its .vscode is an ordinary file of the workspace.
    assert runs_later(plan(tmp_path / "notes" / ".vscode" / "tasks.json"), [str(tmp_path)]).runs_later == ""
    assert runs_later(plan(tmp_path / "project" / "src" / "app.py"), [str(tmp_path)]).runs_later == ""


def test_the_agents_own_code_in_a_root_asks_before_a_change() -> None:
    """A checkout of refagent used on itself: its package and its environment are what the next start of
    refagent runs, so an edit there asks, as one to what git or an editor runs does."""
    from refagent.sandbox.confine.confinement import own_code

    package, environment = own_code()[:2]
    root = os.path.commonpath([package, environment])

    async def nothing() -> Any:
        raise AssertionError

    for path in (os.path.join(package, "cli.py"), os.path.join(environment, "lib", "evil.pth")):
        marked = permissions.runs_later(
            Plan("Write", nothing, locations=[{"path": path}], mutating=True, permission_key="edit"), [root]
        )
        assert marked.runs_later == f"{os.path.relpath(path, root)}: refagent runs it when it starts"
