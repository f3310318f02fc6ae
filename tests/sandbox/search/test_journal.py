"""The journal (:mod:`refagent.sandbox.search.journal`): a change to a watched tree's shape marks its
watchers dirty, a file or link made or removed is noted for the searches that read the directory, and a
file's content is neither; watches follow the directory, not its path."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from refagent.sandbox.search.journal import Journal, Watcher

OPENED = Journal.open()
pytestmark = pytest.mark.skipif(OPENED is None, reason="no inotify here")
if OPENED is not None:
    OPENED.close()


@pytest.fixture
def journal() -> Iterator[Journal]:
    opened = Journal.open()
    assert opened is not None
    yield opened
    opened.close()


def watched(journal: Journal, *directories: Path) -> Watcher:
    watcher = journal.watcher(str(directories[0]))
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            watcher.add(str(directory), fd, os.fstat(fd))
        finally:
            os.close(fd)
    assert not watcher.failed
    return watcher


def tree(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "file.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    return tmp_path


SHAPE: dict[str, Callable[[Path], object]] = {
    "a directory made": lambda t: (t / "new").mkdir(),
    "a directory removed": lambda t: (t / "sub").rmdir(),
    "a directory renamed": lambda t: (t / "sub").rename(t / "sub2"),
    "a directory swapped for a link": lambda t: ((t / "sub").rename(t / "old"), (t / "sub").symlink_to("/")),
    ".gitignore written in place": lambda t: (t / ".gitignore").write_text("*\n", encoding="utf-8"),
    ".gitignore's mode changed": lambda t: (t / ".gitignore").chmod(0o600),
    ".gitignore removed": lambda t: (t / ".gitignore").unlink(),
    ".git made": lambda t: (t / ".git").mkdir(),
    "the directory's own mode changed": lambda t: t.chmod(0o755),
}
ENTRIES: dict[str, Callable[[Path], object]] = {
    "a file made": lambda t: (t / "new.txt").write_text("y\n", encoding="utf-8"),
    "a file removed": lambda t: (t / "file.txt").unlink(),
    "a file swapped for a link and back": lambda t: (
        (t / "file.txt").rename(t / "kept"),
        (t / "file.txt").symlink_to("/etc/passwd"),
        (t / "file.txt").unlink(),
        (t / "kept").rename(t / "file.txt"),
    ),
    "a FIFO made": lambda t: os.mkfifo(t / "fifo"),
}


@pytest.mark.parametrize("change", SHAPE, ids=list(SHAPE))
def test_a_change_of_shape_marks_the_watcher_dirty(tmp_path: Path, journal: Journal, change: str) -> None:
    root = tree(tmp_path)
    watcher = watched(journal, root)
    assert watcher.unchanged()
    SHAPE[change](root)
    assert not watcher.unchanged()


@pytest.mark.parametrize("change", ENTRIES, ids=list(ENTRIES))
def test_a_file_made_or_removed_is_noted_not_dirty(tmp_path: Path, journal: Journal, change: str) -> None:
    root = tree(tmp_path)
    watcher = watched(journal, root, root / "sub")
    mark = journal.mark()
    ENTRIES[change](root)
    assert watcher.unchanged()
    assert journal.touched_since(mark, [watcher.wds[str(root)]])
    assert not journal.touched_since(mark, [watcher.wds[str(root / "sub")]])
    assert not journal.touched_since(journal.mark(), [watcher.wds[str(root)]])


def test_a_files_content_is_neither(tmp_path: Path, journal: Journal) -> None:
    root = tree(tmp_path)
    watcher = watched(journal, root)
    mark = journal.mark()
    with open(root / "file.txt", "a", encoding="utf-8") as handle:
        handle.write("more\n" * 1000)
    os.utime(root / "file.txt", (0, 0))
    assert watcher.unchanged()
    assert not journal.touched_since(mark, watcher.wds.values())


def test_a_watch_by_descriptor_follows_the_directory_not_its_path(tmp_path: Path, journal: Journal) -> None:
    (tmp_path / "real").mkdir()
    fd = os.open(tmp_path / "real", os.O_RDONLY | os.O_DIRECTORY)
    (tmp_path / "real").rename(tmp_path / "moved")  # the path now leads nowhere; the descriptor still holds it
    (tmp_path / "real").mkdir()
    watcher = journal.watcher(str(tmp_path / "real"))
    try:
        watcher.add(str(tmp_path / "real"), fd, os.fstat(fd))
    finally:
        os.close(fd)
    (tmp_path / "real" / "other").mkdir()  # the directory now at the path: not watched
    assert watcher.unchanged()
    (tmp_path / "moved" / "new").mkdir()  # the one opened
    assert not watcher.unchanged()


def test_a_full_queue_marks_every_watcher_dirty(tmp_path: Path, journal: Journal) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text(encoding="utf-8"))
    if limit > 100_000:
        pytest.skip(f"a queue of {limit} events takes too long to fill")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    busy, quiet = watched(journal, tmp_path / "a"), watched(journal, tmp_path / "b")
    for n in range(limit + 10):  # file content written: each one an event (two files: the kernel merges
        (tmp_path / "a" / f"log{n % 2}").write_bytes(b"x")  # an event equal to the last), none a change alone
    assert not busy.unchanged()
    assert not quiet.unchanged()  # the overflow: what was lost may have been anyone's


def test_a_watch_shared_by_two_watchers_outlives_one(tmp_path: Path, journal: Journal) -> None:
    root = tree(tmp_path)
    first, second = watched(journal, root), watched(journal, root)
    assert first.wds == second.wds
    first.release()
    (root / "new").mkdir()
    assert not second.unchanged()
    assert first.dirty  # released: never clean again


def test_a_file_system_that_may_change_unseen_is_not_watched(tmp_path: Path, journal: Journal) -> None:
    journal.fs_type = lambda path, fd: 0x6969  # NFS
    watcher = journal.watcher(str(tmp_path))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watcher.add(str(tmp_path), fd, os.fstat(fd))
    finally:
        os.close(fd)
    assert watcher.failed
    assert not watcher.unchanged()


def test_above_the_tree_only_what_leads_to_it_and_its_rules_count(tmp_path: Path, journal: Journal) -> None:
    """A directory above the tree (``/tmp``, a home directory) is busy with other programs' files: only its
    ``.gitignore``, ``.git`` and the entry that leads down to the tree change the tree's clearance."""
    (tmp_path / "project" / "src").mkdir(parents=True)
    root = tmp_path / "project" / "src"
    watcher = journal.watcher(str(root))
    for above in (tmp_path, tmp_path / "project"):
        watcher.add(str(above), None, os.stat(above, follow_symlinks=False))
    (tmp_path / "another-project").mkdir()  # someone else's
    (tmp_path / "project" / "docs").mkdir()
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf-8")
    assert watcher.unchanged()
    (tmp_path / "project" / ".gitignore").write_text("*.log\n", encoding="utf-8")
    assert not watcher.unchanged()
    swapped = journal.watcher(str(root))
    swapped.add(str(tmp_path), None, os.stat(tmp_path, follow_symlinks=False))
    (tmp_path / "project").rename(tmp_path / "project.old")  # the way down to the tree
    assert not swapped.unchanged()
