"""A tree cleared for ripgrep is kept while nothing the check read has changed
(:class:`refagent.sandbox.search.clearance.Clearances`): found again by stating, walked again on any
change that could change the answer, and never kept when unsafe, stopped, or still moving."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from refagent.sandbox.disk.gitignore import MAX_IGNORE_BYTES
from refagent.sandbox.search.clearance import SETTLING_NS, Clearances


def settled() -> Clearances:
    """Clearances whose walks begin, by their clock, long after anything a test just wrote."""
    return Clearances(clock=lambda: time.time_ns() + 10 * SETTLING_NS)


def tree(tmp_path: Path) -> str:
    (tmp_path / ".git").mkdir()
    for folder in ("src/pkg", "docs", "build"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    (tmp_path / "src" / ".gitignore").write_text("*.tmp\n", encoding="utf-8")
    (tmp_path / "src" / "pkg" / "a.py").write_text("x = 1\n", encoding="utf-8")
    return str(tmp_path)


def test_a_cleared_tree_is_found_again_without_a_walk(tmp_path: Path) -> None:
    root = tree(tmp_path)
    cleared = settled()
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "src" / "pkg" / "a.py").write_text("x = 2\n", encoding="utf-8")  # a file's content: not its concern
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.walks == 1
    assert cleared.rg_can_walk(root, ["*.py"], [root])  # other globs: another tree to clear
    assert cleared.walks == 2


def test_a_gitignore_swapped_for_a_link_is_seen(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (tmp_path.parent / "outside").write_text("secret\n", encoding="utf-8")
    cleared = settled()
    assert cleared.rg_can_walk(root, [], [root])
    os.unlink(tmp_path / "src" / ".gitignore")
    os.symlink(tmp_path.parent / "outside", tmp_path / "src" / ".gitignore")
    assert not cleared.rg_can_walk(root, [], [root])
    assert not cleared.rg_can_walk(root, [], [root])  # a "no" is not kept: each check walks
    assert cleared.walks == 3


def test_a_new_directory_with_a_fifo_for_gitignore_is_seen(tmp_path: Path) -> None:
    root = tree(tmp_path)
    cleared = settled()
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "docs" / "new").mkdir()
    os.mkfifo(tmp_path / "docs" / "new" / ".gitignore")
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_gitignore_grown_in_place_past_the_cap_is_seen(tmp_path: Path) -> None:
    root = tree(tmp_path)
    cleared = settled()
    assert cleared.rg_can_walk(root, [], [root])
    with open(tmp_path / "src" / ".gitignore", "ab") as handle:  # written in place: no directory changes
        handle.write(b"#" * (MAX_IGNORE_BYTES + 1))
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_gitignore_made_above_the_tree_is_seen(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "project" / "src").mkdir(parents=True)
    root = str(tmp_path / "project" / "src")
    cleared = settled()
    assert cleared.rg_can_walk(root, [], [root])
    os.mkfifo(tmp_path / "project" / ".gitignore")  # in an ancestor rg reads too
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_moving_tree_or_a_stopped_walk_is_not_kept(tmp_path: Path) -> None:
    root = tree(tmp_path)
    moving = Clearances()  # the real clock: the tree was written just now
    assert moving.rg_can_walk(root, [], [root])
    assert moving.rg_can_walk(root, [], [root])
    assert moving.walks == 2
    stop = threading.Event()
    stop.set()
    stopped = settled()
    stopped.rg_can_walk(root, [], [root], stop)
    assert stopped.rg_can_walk(root, [], [root])
    assert stopped.walks == 2


def test_only_the_last_few_trees_are_kept(tmp_path: Path) -> None:
    roots = []
    for n in range(3):
        (tmp_path / str(n)).mkdir()
        roots.append(tree(tmp_path / str(n)))
    cleared = Clearances(keep=2, clock=lambda: time.time_ns() + 10 * SETTLING_NS)
    for root in roots:
        assert cleared.rg_can_walk(root, [], [root])
    assert cleared.rg_can_walk(roots[2], [], [roots[2]])
    assert cleared.walks == 3
    assert cleared.rg_can_walk(roots[0], [], [roots[0]])  # the oldest was let go
    assert cleared.walks == 4
