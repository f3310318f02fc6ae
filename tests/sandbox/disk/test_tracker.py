"""The read tracker (refagent.sandbox.disk.tracker)."""

from __future__ import annotations

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.tracker import FileTracker


def test_an_unchanged_file_is_fresh() -> None:
    tracker = FileTracker()
    tracker.saw("/p/a.py", "x = 1\n")
    tracker.check_fresh("/p/a.py", "x = 1\n")


def test_a_changed_file_is_refused_with_advice() -> None:
    tracker = FileTracker()
    tracker.saw("/p/a.py", "x = 1\n")
    with pytest.raises(ToolError) as info:
        tracker.check_fresh("/p/a.py", "x = 2\n")
    assert str(info.value) == (
        "/p/a.py changed since you last read it (by the user, the editor or a command); "
        "read it again before editing it."
    )


def test_reading_again_or_the_agents_own_write_makes_it_fresh() -> None:
    tracker = FileTracker()
    tracker.saw("/p/a.py", "v1")
    with pytest.raises(ToolError):
        tracker.check_fresh("/p/a.py", "v2")
    tracker.saw("/p/a.py", "v2")  # read again
    tracker.check_fresh("/p/a.py", "v2")
    tracker.saw("/p/a.py", "v3")  # the agent's own edit
    tracker.check_fresh("/p/a.py", "v3")


def test_a_file_never_read_may_be_edited_by_default() -> None:
    tracker = FileTracker()
    tracker.check_fresh("/p/never.py", "content")
    assert not tracker.knows("/p/never.py")


def test_require_read_refuses_a_non_empty_file_never_read() -> None:
    tracker = FileTracker(require_read=True)
    with pytest.raises(ToolError, match=r"have not read /p/never\.py yet"):
        tracker.check_fresh("/p/never.py", "content")
    tracker.check_fresh("/p/empty.py", "")  # nothing to lose: empty or new
    tracker.saw("/p/never.py", "content")
    tracker.check_fresh("/p/never.py", "content")


def test_content_is_compared_not_only_the_length() -> None:
    tracker = FileTracker()
    tracker.saw("/p/a", "abc")
    with pytest.raises(ToolError):
        tracker.check_fresh("/p/a", "abd")
    tracker.saw("/p/b", "\ud800 lone surrogate from a lenient decoder")
    tracker.check_fresh("/p/b", "\ud800 lone surrogate from a lenient decoder")


def test_forget_and_moved_follow_deletes_and_renames() -> None:
    tracker = FileTracker()
    tracker.saw("/p/dir/a", "a")
    tracker.saw("/p/dir/sub/b", "b")
    tracker.saw("/p/dirx", "not below /p/dir")
    tracker.moved("/p/dir", "/p/new")
    assert not tracker.knows("/p/dir/a")
    tracker.check_fresh("/p/new/a", "a")
    with pytest.raises(ToolError):
        tracker.check_fresh("/p/new/sub/b", "changed")
    assert tracker.knows("/p/dirx")
    tracker.forget("/p/new")
    assert not tracker.knows("/p/new/a")
    assert not tracker.knows("/p/new/sub/b")
    assert tracker.knows("/p/dirx")
