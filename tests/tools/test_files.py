"""read_file, write_file and edit_file on a fake file system (pyfakefs) with the real sandbox classes,
and through an editor-buffer stand-in for ``ctx.files``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.tools.files import DEFAULT_READ_LIMIT, EditFile, ReadFile, WriteFile
from refagent.tools.text import MAX_LINE_CHARS, split_lines
from tests.support.tool_fakes import EditorFiles, call, make_ctx

pytestmark = pytest.mark.anyio

ROOT = "/proj"


@pytest.fixture
def proj(fs):  # type: ignore[no-untyped-def]
    fs.create_dir(ROOT)
    fs.create_dir("/elsewhere")
    return fs


def write(path: str, text: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(text.encode() if isinstance(text, str) else text)


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# -- read_file ------------------------------------------------------------------------------------


async def test_read_numbers_lines_like_cat_n(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/src/app.py", "def main():\n    return 1\n")
    ctx = make_ctx(ROOT)
    result = await call(ReadFile(), ctx, path="src/app.py")
    assert result.output == "     1\tdef main():\n     2\t    return 1"
    assert result.locations == [{"path": "/proj/src/app.py", "line": 1}]


async def test_read_pages_and_says_how_to_read_on(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/big.txt", "".join(f"line {n}\n" for n in range(1, 5235)))
    ctx = make_ctx(ROOT)
    first = await call(ReadFile(), ctx, path="big.txt")
    lines = first.output.split("\n")
    assert lines[0] == "     1\tline 1"
    assert lines[DEFAULT_READ_LIMIT - 1] == f"{DEFAULT_READ_LIMIT:6}\tline {DEFAULT_READ_LIMIT}"
    assert "Showing lines 1-2000 of 5234" in first.output
    assert "offset=2001" in first.output
    last = await call(ReadFile(), ctx, path="big.txt", offset=5001, limit=1000)
    assert last.output.startswith("  5001\tline 5001")
    assert "lines 5001-5234, the end of the file" in last.output
    middle = await call(ReadFile(), ctx, path="big.txt", offset=10, limit=2)
    assert middle.output.split("\n")[:2] == ["    10\tline 10", "    11\tline 11"]
    assert "offset=12" in middle.output


async def test_read_past_the_end_and_empty_files(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/three.txt", "a\nb\nc\n")
    write("/proj/empty.txt", "")
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"offset 9 is past the end of three.txt \(it has 3 lines\)"):
        await call(ReadFile(), ctx, path="three.txt", offset=9)
    assert (await call(ReadFile(), ctx, path="empty.txt")).output == "(The file is empty.)"


async def test_read_cuts_long_lines(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/min.js", "x" * 5000 + "\nshort\n")
    result = await call(ReadFile(), make_ctx(ROOT), path="min.js")
    first, second = result.output.split("\n")
    assert first.startswith("     1\txxxxxxxxxx")
    assert first.endswith("x… [line cut: 5000 characters]")
    assert len(first) == len("     1\t") + MAX_LINE_CHARS
    assert second == "     2\tshort"


async def test_read_keeps_a_page_within_the_character_budget(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/wide.txt", ("y" * 1500 + "\n") * 500)
    result = await call(ReadFile(), make_ctx(ROOT), path="wide.txt")
    assert len(result.output) < 120_000
    assert "Call read_file with offset=" in result.output


async def test_read_refuses_binary_files(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolError, match=r"binary"):
        await call(ReadFile(), make_ctx(ROOT), path="logo.png")


async def test_read_missing_file_and_directory(proj) -> None:  # type: ignore[no-untyped-def]
    os.makedirs("/proj/src")
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"File not found: nope.py"):
        await call(ReadFile(), ctx, path="nope.py")
    with pytest.raises(ToolError, match=r"is a directory. Use glob"):
        await call(ReadFile(), ctx, path="src")


async def test_read_outside_the_roots_needs_permission(proj) -> None:  # type: ignore[no-untyped-def]
    write("/elsewhere/notes.txt", "hi\n")
    ctx = make_ctx(ROOT)
    plan = await ReadFile().prepare({"path": "/elsewhere/notes.txt"}, ctx)
    assert plan.outside
    assert not plan.mutating
    assert plan.permission_key == "read-outside:/elsewhere"
    inside = await ReadFile().prepare({"path": "/proj/x"}, ctx)
    assert not inside.outside
    assert not inside.permission_key


async def test_read_through_the_editor_pages_its_buffer(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "on disk\n")
    ctx = make_ctx(ROOT)
    ctx.files = EditorFiles(ctx.disk, {"/proj/a.txt": "unsaved 1\r\nunsaved 2\r\nunsaved 3\r\n" + "z" * 3000})
    result = await call(ReadFile(), ctx, path="a.txt", offset=2, limit=1)
    assert result.output.startswith("     2\tunsaved 2\n")
    assert "Showing lines 2-2 of 4" in result.output
    long = await call(ReadFile(), ctx, path="a.txt", offset=4)
    assert long.output.endswith("z… [line cut: 3000 characters]\n\n(Showing lines 4-4, the end of the file.)")
    assert len(long.output.split("\n")[0]) == len("     4\t") + MAX_LINE_CHARS


async def test_a_read_is_recorded_for_the_stale_check(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.py", "x = 1\n")
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="a.py")
    write("/proj/a.py", "x = 2  # the user's change\n")
    with pytest.raises(ToolError, match=r"changed since you last read it"):
        await EditFile().prepare({"path": "a.py", "old_string": "x = ", "new_string": "y = "}, ctx)


def test_split_lines() -> None:
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\r\nb\n") == ["a", "b"]
    assert split_lines("a\n\n") == ["a", ""]


# -- edit_file ------------------------------------------------------------------------------------


async def test_edit_replaces_one_exact_match_and_previews_the_whole_file(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "a = 1\nb = 2\nc = 3\n")
    ctx = make_ctx(ROOT)
    plan = await EditFile().prepare({"path": "app.py", "old_string": "b = 2", "new_string": "b = 20"}, ctx)
    assert plan.mutating
    assert plan.permission_key == "edit"
    assert plan.title == "Edit app.py"
    assert plan.preview == [
        {
            "type": "diff",
            "path": "/proj/app.py",
            "oldText": "a = 1\nb = 2\nc = 3\n",
            "newText": "a = 1\nb = 20\nc = 3\n",
        }
    ]
    assert plan.locations == [{"path": "/proj/app.py", "line": 2}]
    assert read("/proj/app.py") == b"a = 1\nb = 2\nc = 3\n"  # nothing happens before execute
    result = await plan.execute()
    assert read("/proj/app.py") == b"a = 1\nb = 20\nc = 3\n"
    assert "     2\tb = 20" in result.output
    # The model's own write counts as what it saw: a second edit needs no re-read.
    await call(EditFile(), ctx, path="app.py", old_string="c = 3", new_string="c = 30")
    assert read("/proj/app.py") == b"a = 1\nb = 20\nc = 30\n"


async def test_edit_with_several_matches_names_them(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "x = 1\ny = 2\nx = 1\n\nx = 1\n")
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"occurs 3 times in app.py \(at lines 1, 3, 5\).*replace_all"):
        await EditFile().prepare({"path": "app.py", "old_string": "x = 1", "new_string": "x = 9"}, ctx)
    result = await call(EditFile(), ctx, path="app.py", old_string="x = 1", new_string="x = 9", replace_all=True)
    assert read("/proj/app.py") == b"x = 9\ny = 2\nx = 9\n\nx = 9\n"
    assert "3 occurrences" in result.output


async def test_edit_without_a_match_points_at_whitespace_differences(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "def f():\n\tif x:\n\t\treturn 1\n")
    with pytest.raises(ToolError) as caught:
        await EditFile().prepare(
            {"path": "app.py", "old_string": "    if x:\n        return 1", "new_string": "pass"}, make_ctx(ROOT)
        )
    message = str(caught.value)
    assert "not found in app.py" in message
    assert "matches lines 2-3 when whitespace is ignored" in message
    assert "     2\t\tif x:" in message


async def test_edit_without_a_match_shows_the_closest_text(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "import os\n\ndef compute_total(items):\n    return sum(items)\n")
    with pytest.raises(ToolError) as caught:
        await EditFile().prepare(
            {"path": "app.py", "old_string": "def compute_totals(items):", "new_string": "def f(items):"},
            make_ctx(ROOT),
        )
    assert "most similar text" in str(caught.value)
    assert "     3\tdef compute_total(items):" in str(caught.value)


async def test_edit_without_a_match_spots_line_number_prefixes(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "a = 1\nb = 2\n")
    with pytest.raises(ToolError, match=r"line-number prefixes"):
        await EditFile().prepare(
            {"path": "app.py", "old_string": "     1\ta = 1\n     2\tb = 2", "new_string": "z"}, make_ctx(ROOT)
        )


async def test_edit_with_nothing_like_it_says_read_again(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "a = 1\n")
    with pytest.raises(ToolError, match=r"Read the file again"):
        await EditFile().prepare({"path": "app.py", "old_string": "zzzz qqqq", "new_string": "z"}, make_ctx(ROOT))


async def test_edit_argument_errors(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/app.py", "a = 1\n")
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"the same"):
        await EditFile().prepare({"path": "app.py", "old_string": "a", "new_string": "a"}, ctx)
    with pytest.raises(ToolError, match=r"old_string is empty but app.py is not"):
        await EditFile().prepare({"path": "app.py", "old_string": "", "new_string": "b"}, ctx)
    with pytest.raises(ToolError, match=r"File not found: new.py"):
        await EditFile().prepare({"path": "new.py", "old_string": "a", "new_string": "b"}, ctx)


async def test_edit_with_empty_old_string_creates_a_file(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    plan = await EditFile().prepare({"path": "pkg/new.py", "old_string": "", "new_string": "x = 1\n"}, ctx)
    assert plan.title == "Create pkg/new.py"
    assert plan.preview[0] == {"type": "diff", "path": "/proj/pkg/new.py", "oldText": None, "newText": "x = 1\n"}
    await plan.execute()
    assert read("/proj/pkg/new.py") == b"x = 1\n"


async def test_edit_keeps_crlf_line_endings(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/win.txt", "one\r\ntwo\r\nthree\r\n")
    await call(EditFile(), make_ctx(ROOT), path="win.txt", old_string="one\ntwo\n", new_string="one\n2\n2b\n")
    assert read("/proj/win.txt") == b"one\r\n2\r\n2b\r\nthree\r\n"


async def test_edit_keeps_a_missing_final_newline(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "a\nb")
    await call(EditFile(), make_ctx(ROOT), path="a.txt", old_string="a", new_string="A")
    assert read("/proj/a.txt") == b"A\nb"


async def test_edit_refuses_a_file_changed_since_it_was_read(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.py", "x = 1\n")
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="a.py")
    write("/proj/a.py", "x = 1\ny = 2\n")
    with pytest.raises(ToolError, match=r"read it again"):
        await EditFile().prepare({"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}, ctx)
    await call(ReadFile(), ctx, path="a.py")
    await call(EditFile(), ctx, path="a.py", old_string="x = 1", new_string="x = 2")
    assert read("/proj/a.py") == b"x = 2\ny = 2\n"


async def test_edit_refuses_when_the_file_changes_while_permission_is_asked(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.py", "x = 1\n")
    plan = await EditFile().prepare({"path": "a.py", "old_string": "x", "new_string": "y"}, make_ctx(ROOT))
    write("/proj/a.py", "x = 1\n# typed by the user meanwhile\n")
    with pytest.raises(ToolError, match=r"changed while waiting for permission; nothing was written"):
        await plan.execute()
    assert read("/proj/a.py") == b"x = 1\n# typed by the user meanwhile\n"


async def test_edit_outside_the_roots_is_refused(proj) -> None:  # type: ignore[no-untyped-def]
    write("/elsewhere/a.py", "x = 1\n")
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await EditFile().prepare({"path": "/elsewhere/a.py", "old_string": "x", "new_string": "y"}, make_ctx(ROOT))
    with pytest.raises(ToolError, match=r".git"):
        await EditFile().prepare({"path": ".git/config", "old_string": "", "new_string": "y"}, make_ctx(ROOT))


async def test_edit_goes_through_the_editor_buffers(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.py", "x = 1\n")
    ctx = make_ctx(ROOT)
    editor = EditorFiles(ctx.disk, {"/proj/a.py": "x = 1  # unsaved\n"})
    ctx.files = editor
    await call(EditFile(), ctx, path="a.py", old_string="# unsaved", new_string="# edited")
    assert editor.buffers["/proj/a.py"] == "x = 1  # edited\n"
    assert editor.writes == ["/proj/a.py"]


# -- write_file -----------------------------------------------------------------------------------


async def test_write_creates_a_file_with_parents(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    plan = await WriteFile().prepare({"path": "a/b/c.txt", "content": "hello\n"}, ctx)
    assert plan.title == "Create a/b/c.txt"
    assert plan.permission_key == "edit"
    assert plan.preview == [{"type": "diff", "path": "/proj/a/b/c.txt", "oldText": None, "newText": "hello\n"}]
    result = await plan.execute()
    assert read("/proj/a/b/c.txt") == b"hello\n"
    assert "Created a/b/c.txt (1 line" in result.output


async def test_write_overwrites_with_a_diff_and_keeps_crlf(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/win.txt", "old\r\n")
    ctx = make_ctx(ROOT)
    plan = await WriteFile().prepare({"path": "win.txt", "content": "new\nlines\n"}, ctx)
    assert plan.preview[0] == {
        "type": "diff",
        "path": "/proj/win.txt",
        "oldText": "old\r\n",
        "newText": "new\r\nlines\r\n",
    }
    await plan.execute()
    assert read("/proj/win.txt") == b"new\r\nlines\r\n"


async def test_write_refuses_a_stale_file_but_not_an_unread_one(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "v1\n")
    ctx = make_ctx(ROOT)
    await call(WriteFile(), ctx, path="a.txt", content="v2\n")  # never read: allowed, the diff shows it all
    write("/proj/a.txt", "v3 from the user\n")
    with pytest.raises(ToolError, match=r"changed since you last read it"):
        await WriteFile().prepare({"path": "a.txt", "content": "v4\n"}, ctx)


async def test_write_refuses_directories_and_outside_paths(proj) -> None:  # type: ignore[no-untyped-def]
    os.makedirs("/proj/src")
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"is a directory"):
        await WriteFile().prepare({"path": "src", "content": "x"}, ctx)
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await WriteFile().prepare({"path": "../elsewhere/x.txt", "content": "x"}, ctx)
    assert not exists("/elsewhere/x.txt")


# -- big files on the real disk ---------------------------------------------------------------------


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.log"
    line = b"0123456789 " * 9 + b"\n"  # 100 bytes
    with open(path, "wb") as handle:
        handle.write(line * 200_000)  # 20 MB
    return path


async def test_a_page_of_a_huge_file_costs_no_more_than_a_page(tmp_path: Path, big_file: Path) -> None:
    write(str(tmp_path / "small.log"), read(str(big_file))[:1_100_000])  # 1.1 MB: the disk reads it whole
    ctx = make_ctx(str(tmp_path))

    async def timed(path: str, offset: int = 1) -> tuple[float, str]:
        start = time.perf_counter()
        result = await call(ReadFile(), ctx, path=path, offset=offset, limit=100)
        return time.perf_counter() - start, result.output

    await timed("small.log")
    small_time = min([(await timed("small.log"))[0] for _ in range(3)])
    big_time, output = min([await timed("big.log") for _ in range(3)])
    assert output.startswith("     1\t0123456789")
    # The size of a huge file is known (stat), its line count is not (that would read it all).
    assert "Showing lines 1-100, 20000000 bytes in all. Call read_file with offset=101" in output
    # Page 1 of 20 MB costs what page 1 of 1 MB does (generous bound: CI machines are noisy).
    assert big_time < max(5 * small_time, 0.05)
    _, deep = await timed("big.log", offset=150_001)
    assert deep.startswith("150001\t0123456789")


def exists(path: str) -> bool:
    return os.path.exists(path)
