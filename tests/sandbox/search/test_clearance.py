"""A tree cleared for ripgrep is kept while nothing the check read has changed
(:class:`refagent.sandbox.search.clearance.Clearances`): found again without a walk, walked again on any
change that could change the answer, and never kept when unsafe or stopped. Each test runs twice: with
the journal watching the tree (Linux), and stated (elsewhere, or a file system the kernel cannot watch)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from refagent.sandbox.disk.gitignore import MAX_IGNORE_BYTES
from refagent.sandbox.search import journal as journal_module
from refagent.sandbox.search.clearance import SETTLING_NS, Clearances, Held
from refagent.sandbox.search.journal import Journal, Watcher


@pytest.fixture(params=["watched", "stated"])
def journal(request: pytest.FixtureRequest) -> Iterator[Journal | None]:
    if request.param == "stated":
        yield None
        return
    opened = Journal.open()
    if opened is None:
        pytest.skip("no inotify here")
    yield opened
    opened.close()


@pytest.fixture
def watching() -> Iterator[Journal]:
    opened = Journal.open()
    if opened is None:
        pytest.skip("no inotify here")
    yield opened
    opened.close()


def settled(journal: Journal | None, keep: int = 8) -> Clearances:
    """Clearances whose walks begin, by their clock, long after anything a test just wrote."""
    return Clearances(keep, clock=lambda: time.time_ns() + 10 * SETTLING_NS, watch=journal)


def tree(tmp_path: Path) -> str:
    (tmp_path / ".git").mkdir()
    for folder in ("src/pkg", "docs", "build"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    (tmp_path / "src" / ".gitignore").write_text("*.tmp\n", encoding="utf-8")
    (tmp_path / "src" / "pkg" / "a.py").write_text("x = 1\n", encoding="utf-8")
    return str(tmp_path)


def test_a_cleared_tree_is_found_again_without_a_walk(tmp_path: Path, journal: Journal | None) -> None:
    root = tree(tmp_path)
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "src" / "pkg" / "a.py").write_text("x = 2\n", encoding="utf-8")  # a file's content: not its concern
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.walks == 1
    assert cleared.rg_can_walk(root, ["*.py"], [root])  # other globs: another tree to clear
    assert cleared.walks == 2


def test_a_gitignore_swapped_for_a_link_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    root = tree(tmp_path)
    (tmp_path.parent / "outside").write_text("secret\n", encoding="utf-8")
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    os.unlink(tmp_path / "src" / ".gitignore")
    os.symlink(tmp_path.parent / "outside", tmp_path / "src" / ".gitignore")
    assert not cleared.rg_can_walk(root, [], [root])
    assert not cleared.rg_can_walk(root, [], [root])  # a "no" is not kept: each check walks
    assert cleared.walks == 3


def test_a_new_directory_with_a_fifo_for_gitignore_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    root = tree(tmp_path)
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "docs" / "new").mkdir()
    os.mkfifo(tmp_path / "docs" / "new" / ".gitignore")
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_gitignore_grown_in_place_past_the_cap_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    root = tree(tmp_path)
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    with open(tmp_path / "src" / ".gitignore", "ab") as handle:  # written in place: no directory changes
        handle.write(b"#" * (MAX_IGNORE_BYTES + 1))
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_gitignore_made_above_the_tree_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "project" / "src").mkdir(parents=True)
    root = str(tmp_path / "project" / "src")
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    os.mkfifo(tmp_path / "project" / ".gitignore")  # in an ancestor rg reads too
    assert not cleared.rg_can_walk(root, [], [root])


def test_traffic_above_the_tree_costs_no_walk(tmp_path: Path, journal: Journal | None) -> None:
    (tmp_path / "project" / "src").mkdir(parents=True)
    root = str(tmp_path / "project" / "src")
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "scratch.txt").write_text("x", encoding="utf-8")  # what /tmp and ~ see all day
    (tmp_path / "project" / "notes").mkdir()
    os.rename(tmp_path / "scratch.txt", tmp_path / "moved.txt")
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.walks == 1


def test_a_git_made_above_the_tree_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / ".gitignore").write_text("*.log\n", encoding="utf-8")
    root = str(tmp_path / "project" / "src")
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    (tmp_path / "project" / ".git").mkdir()  # its .gitignore now applies: a new answer
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.walks == 2
    (tmp_path / "project" / ".git" / "index").write_text("", encoding="utf-8")  # git's own traffic
    assert cleared.rg_can_walk(root, [], [root])
    assert cleared.walks == 2


def test_a_directory_above_the_tree_swapped_is_seen(tmp_path: Path, journal: Journal | None) -> None:
    (tmp_path / "a" / "project").mkdir(parents=True)
    root = str(tmp_path / "a" / "project")
    cleared = settled(journal)
    assert cleared.rg_can_walk(root, [], [root])
    os.rename(tmp_path / "a", tmp_path / "old")
    (tmp_path / "a" / "project").mkdir(parents=True)
    (tmp_path / "a" / ".gitignore").symlink_to(tmp_path / "old")  # rg would read it: not safe
    assert not cleared.rg_can_walk(root, [], [root])


def test_a_stopped_walk_is_not_kept(tmp_path: Path, journal: Journal | None) -> None:
    root = tree(tmp_path)
    stop = threading.Event()
    stop.set()
    stopped = settled(journal)
    stopped.rg_can_walk(root, [], [root], stop)
    assert stopped.rg_can_walk(root, [], [root])
    assert stopped.walks == 2


def test_a_stated_tree_still_moving_is_not_kept(tmp_path: Path) -> None:
    root = tree(tmp_path)
    moving = Clearances(watch=None)  # the real clock: the tree was written just now
    assert moving.rg_can_walk(root, [], [root])
    assert moving.rg_can_walk(root, [], [root])
    assert moving.walks == 2


def test_only_the_last_few_trees_are_kept(tmp_path: Path, journal: Journal | None) -> None:
    roots = []
    for n in range(3):
        (tmp_path / str(n)).mkdir()
        roots.append(tree(tmp_path / str(n)))
    cleared = settled(journal, keep=2)
    for root in roots:
        assert cleared.rg_can_walk(root, [], [root])
    assert cleared.rg_can_walk(roots[2], [], [roots[2]])
    assert cleared.walks == 3
    assert cleared.rg_can_walk(roots[0], [], [roots[0]])  # the oldest was let go
    assert cleared.walks == 4


# -- watched: held for rg, and what rg finds vouched for ------------------------------------------------


def test_a_watched_tree_needs_no_settling_and_is_held(tmp_path: Path, watching: Journal) -> None:
    root = tree(tmp_path)
    cleared = Clearances(watch=watching)  # the real clock: written just now, but every change since is seen
    assert isinstance(cleared.hold(root, [], [root]), Held)
    held = cleared.held(root, [], [root])
    assert held is not None
    assert cleared.walks == 1
    assert held.verdict(["src/pkg/a.py", "src/b.py", "top.txt"], files=True) == "vouched"
    assert held.verdict(["build/out.o"], files=False) == "look"  # ignored: the walk did not list it
    assert held.verdict(["link/secret.txt"], files=False) == "look"


def test_a_change_of_shape_while_held_is_told(tmp_path: Path, watching: Journal) -> None:
    root = tree(tmp_path)
    cleared = Clearances(watch=watching)
    held = cleared.hold(root, [], [root])
    assert isinstance(held, Held)
    os.rename(tmp_path / "docs", tmp_path / "docs.old")  # as a swap for a link begins (and could be undone)
    os.rename(tmp_path / "docs.old", tmp_path / "docs")
    assert held.verdict(["src/pkg/a.py"], files=False) == "changed"
    assert cleared.held(root, [], [root]) is None
    assert isinstance(cleared.hold(root, [], [root]), Held)
    assert cleared.walks == 2


def test_a_file_made_while_held_changes_what_rg_read_not_what_it_listed(tmp_path: Path, watching: Journal) -> None:
    root = tree(tmp_path)
    cleared = Clearances(watch=watching)
    assert isinstance(cleared.hold(root, [], [root]), Held)
    held = cleared.held(root, [], [root])
    assert held is not None
    os.rename(tmp_path / "src" / "pkg" / "a.py", tmp_path / "src" / "pkg" / "b.py")  # as a file swapped for a link
    assert held.verdict(["src/pkg/a.py"], files=True) == "changed"
    assert held.verdict(["docs/x.md"], files=True) == "vouched"  # another directory
    assert held.verdict(["src/pkg/a.py"], files=False) == "vouched"  # a name listed is still the tree's
    later = cleared.held(root, [], [root])  # the tree's shape is as it was: still cleared, no walk
    assert later is not None
    assert later.verdict(["src/pkg/b.py"], files=True) == "vouched"
    assert cleared.walks == 1


class _Moving(Journal):
    """A journal under which the tree changes shape while it is walked (as its ``src`` is watched), the
    first ``times`` walks."""

    times = 0

    def watch(
        self, watcher: Watcher, path: str, fd: int | None, info: os.stat_result, only: frozenset[bytes] | None = None
    ) -> int | None:
        wd = super().watch(watcher, path, fd, info, only)
        if path.endswith("/src") and self.times:
            self.times -= 1
            os.mkdir(os.path.join(os.path.dirname(path), f"made-meanwhile-{self.times}"))
        return wd


@pytest.mark.parametrize("times", [1, 2])
def test_a_tree_changing_shape_while_walked_is_walked_again_then_not_for_rg(tmp_path: Path, times: int) -> None:
    moving = _Moving.open()
    if moving is None:
        pytest.skip("no inotify here")
    moving.times = times
    try:
        root = tree(tmp_path)
        cleared = Clearances(watch=moving)
        hold = cleared.hold(root, [], [root])
        assert cleared.walks == 2
        if times == 1:  # it held still the second time
            assert isinstance(hold, Held)
        else:  # still moving: the Python engine, which links cannot lead
            assert hold is False
            assert cleared.held(root, [], [root]) is None
    finally:
        moving.close()


def test_a_tree_that_cannot_be_watched_is_stated(
    tmp_path: Path, watching: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path)
    watching.fs_type = lambda path, fd: 0x6969  # NFS: changed by other machines without an event
    cleared = settled(watching)
    assert cleared.watches(root, [], [root])  # not known yet: tried
    assert cleared.hold(root, [], [root]) is True  # cleared, not held: rg's finds are each looked at
    assert not cleared.watches(root, [], [root])  # then checked beside rg, as where nothing watches
    assert cleared.hold(root, [], [root]) is True
    assert cleared.walks == 1
    watching.fs_type = lambda path, fd: 0xEF53
    monkeypatch.setattr(journal_module, "MAX_WATCHES", 2)  # more directories than this process may watch
    assert settled(watching).hold(root, [], [root]) is True
