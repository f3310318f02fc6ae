"""The house as its documents describe it: ``docs/architecture.md`` names every room and their import order
as ``tests/test_layers.py`` ranks them, the files ``docs/architecture.md`` and ``docs/forking.md`` point a
reader to exist, ``docs/forking.md`` has the sections a forker looks for, and no module grows past the size
a reader can hold (the turn loop smaller still)."""

from __future__ import annotations

import re

import pytest

from tests.test_layers import PACKAGE, RANKS

ROOT = PACKAGE.parent
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
FORKING = (ROOT / "docs" / "forking.md").read_text(encoding="utf-8")

MAX_MODULE_LINES = 600
MAX_TURN_LOOP_LINES = 200
TURN_LOOP = PACKAGE / "session" / "turn.py"

ON_TOP = {"testing", "client", "__main__", "__init__"}
"""Rooms beside or above the command line, or no room at all: not in the import-order line."""


def rooms_block() -> str:
    """The code block under "## The rooms"."""
    section = ARCHITECTURE.split("## The rooms", 1)[1]
    return section.split("```", 2)[1]


def import_order() -> list[set[str]]:
    """The import-order line (``cli -> server -> ... -> {acp, errors}``) as a list of sets of rooms."""
    blocks = ARCHITECTURE.split("```")
    line = next(" ".join(block.split()) for block in blocks if block.strip().startswith("cli ->"))
    return [set(re.findall(r"[a-z_.]+", step)) for step in line.split("->")]


def test_every_room_is_ranked() -> None:
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    rooms = packages | {path.stem for path in PACKAGE.glob("*.py")}
    sandbox = PACKAGE / "sandbox"  # one building, whose rooms are ranked one by one
    rooms |= {f"sandbox.{path.parent.name}" for path in sandbox.glob("*/__init__.py")}
    rooms |= {f"sandbox.{path.stem}" for path in sandbox.glob("*.py")} - {"sandbox.__init__", "sandbox.local"}
    assert rooms - set(RANKS) == set(), "a room tests/test_layers.py does not rank"
    assert set(RANKS) - rooms == set(), "tests/test_layers.py ranks a room that is gone"


def test_the_architecture_names_every_room() -> None:
    block = rooms_block()
    named = [room.rpartition(".")[2] for room in RANKS if room not in ON_TOP]  # sandbox.disk: disk/ in sandbox/
    missing = [room for room in named if not re.search(rf"\b{room}(/|\.py)", block)]
    assert missing == []


def test_the_import_order_line_is_the_ranks() -> None:
    steps = import_order()
    named = [room for step in steps for room in step]
    assert sorted(named) == sorted(set(RANKS) - ON_TOP), "each room once in the line"
    ranks = [{RANKS[room] for room in step} for step in steps]
    assert all(len(rank) == 1 for rank in ranks), f"rooms of one step share a rank: {steps}"
    flat = [rank.pop() for rank in ranks]
    assert flat == sorted(flat, reverse=True), f"the line goes down: {steps}"
    assert len(set(flat)) == len(flat), f"one step per rank: {steps}"


def named_files(text: str) -> set[str]:
    """The repository files a document names in backticks (``path/to/file.py``, ``tests/...``)."""
    found = set()
    for name in re.findall(r"`([A-Za-z0-9_./-]+\.(?:py|md|toml|json|lua|el|sh))`", text):
        if "/" in name and not name.startswith(("http", "~")):
            found.add(name)
    return found


@pytest.mark.parametrize("document", ["architecture", "forking"])
def test_the_files_the_documents_name_exist(document: str) -> None:
    text = ARCHITECTURE if document == "architecture" else FORKING
    missing = []
    for name in sorted(named_files(text)):
        candidates = [ROOT / name, PACKAGE / name]
        if not any(candidate.exists() for candidate in candidates):
            missing.append(name)
    assert missing == []


@pytest.mark.parametrize("section", ["Replace the sandbox", "Swap the model", "Add a tool"])
def test_forking_has_the_section(section: str) -> None:
    assert re.search(rf"^## {section}\b", FORKING, re.MULTILINE)


def test_no_module_is_too_long_to_read() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in PACKAGE.rglob("*.py")
        if "demo-project" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_turn_loop_is_short() -> None:
    assert len(TURN_LOOP.read_text(encoding="utf-8").splitlines()) < MAX_TURN_LOOP_LINES
