"""The local file system (refagent.sandbox.disk.local_fs): pyfakefs, and the real disk where the kernel matters
(umask, FIFOs, sparse files)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem

from refagent.errors import ToolError
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.read import LinePage
from refagent.sandbox.disk.write import TEMP_PREFIX

pytestmark = pytest.mark.anyio

disk = LocalFileSystem()


# Sync helpers: the checks of the outcome are plain blocking calls (ruff's ASYNC rules want them out of
# the coroutines).
def read(path: str) -> str:
    return Path(path).read_bytes().decode()


def exists(path: str) -> bool:
    return os.path.lexists(path)


def write_sparse(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as file:
        file.write(head)
        file.truncate(size)


# -- read_text --------------------------------------------------------------------------------------------


async def test_read_text_keeps_the_content_exactly(fs: FakeFilesystem) -> None:
    fs.create_file("/p/a.txt", contents=b"one\r\ntwo\n\xef\xbb\xbfthree")
    assert await disk.read_text("/p/a.txt") == "one\r\ntwo\n\ufeffthree"


async def test_read_text_of_a_missing_file_raises_file_not_found(fs: FakeFilesystem) -> None:
    fs.create_file("/p/a.txt")
    for path in ("/p/missing.txt", "/missing/dir/x", "/p/a.txt/below"):
        with pytest.raises(FileNotFoundError):
            await disk.read_text(path)


async def test_read_text_refuses_directories_binary_and_invalid_utf8(fs: FakeFilesystem) -> None:
    fs.create_dir("/p/dir")
    fs.create_file("/p/bin", contents=b"PK\x03\x04\x00\x00rest")
    fs.create_file("/p/latin1", contents="caf\xe9".encode("latin-1"))
    with pytest.raises(ToolError, match="is a directory"):
        await disk.read_text("/p/dir")
    with pytest.raises(ToolError, match=r"/p/bin is a binary file \(10 bytes"):
        await disk.read_text("/p/bin")
    with pytest.raises(ToolError, match=r"not UTF-8 text \(4 bytes; byte 0xe9 at offset 3"):
        await disk.read_text("/p/latin1")


async def test_a_nul_after_the_first_8_kib_is_not_binary_but_still_text(fs: FakeFilesystem) -> None:
    fs.create_file("/p/late", contents="a" * 9000 + "\x00")
    assert (await disk.read_text("/p/late")).endswith("\x00")


async def test_read_text_has_a_size_limit(fs: FakeFilesystem) -> None:
    fs.create_file("/p/big", contents="x" * 2000)
    with pytest.raises(ToolError, match="too large to load whole"):
        await LocalFileSystem(max_text_bytes=1000).read_text("/p/big")


async def test_read_text_refuses_a_final_symlink(fs: FakeFilesystem) -> None:
    # Policy-resolved paths contain no links; one there now was swapped in after the check.
    fs.create_file("/outside/secret", contents="secret")
    fs.create_symlink("/p/link", "/outside/secret")
    with pytest.raises(ToolError, match="symbolic link"):
        await disk.read_text("/p/link")


# -- write_text -------------------------------------------------------------------------------------------


async def test_write_creates_parents_and_leaves_no_temporary_file(fs: FakeFilesystem) -> None:
    await disk.write_text("/p/new/deep/file.txt", "hello\r\nworld")
    assert read("/p/new/deep/file.txt") == "hello\r\nworld"
    assert os.listdir("/p/new/deep") == ["file.txt"]


async def test_write_replaces_and_keeps_the_mode(fs: FakeFilesystem) -> None:
    fs.create_file("/p/run.sh", contents="old", st_mode=stat.S_IFREG | 0o750)
    await disk.write_text("/p/run.sh", "new")
    assert read("/p/run.sh") == "new"
    assert stat.S_IMODE(os.stat("/p/run.sh").st_mode) == 0o750


async def test_write_refuses_a_directory_and_a_file_as_parent(fs: FakeFilesystem) -> None:
    fs.create_dir("/p/dir")
    fs.create_file("/p/file")
    with pytest.raises(ToolError, match="is a directory"):
        await disk.write_text("/p/dir", "x")
    with pytest.raises(ToolError, match="'/p/file' is a file, not a directory"):
        await disk.write_text("/p/file/x.txt", "x")


async def test_write_refuses_unencodable_content(fs: FakeFilesystem) -> None:
    with pytest.raises(ToolError, match="unpaired surrogate"):
        await disk.write_text("/p/x.txt", "a\ud800b")
    assert not exists("/p/x.txt")


async def test_write_through_a_final_link_swapped_in_is_refused(fs: FakeFilesystem) -> None:
    fs.create_file("/outside/secret", contents="secret")
    fs.create_symlink("/p/a.txt", "/outside/secret")
    with pytest.raises(ToolError, match="symbolic link"):
        await disk.write_text("/p/a.txt", "pwned")
    assert read("/outside/secret") == "secret"
    assert os.readlink("/p/a.txt") == "/outside/secret"


async def test_write_below_a_directory_swapped_for_a_link_is_refused(fs: FakeFilesystem) -> None:
    fs.create_dir("/outside")
    fs.create_symlink("/p/src", "/outside")
    with pytest.raises(ToolError, match="'/p/src' is a symbolic link"):
        await disk.write_text("/p/src/new.txt", "pwned")
    with pytest.raises(ToolError, match="'/p/src' is a symbolic link"):
        await disk.write_text("/p/src/sub/new.txt", "pwned")
    assert os.listdir("/outside") == []


async def test_write_real_disk_new_file_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        await disk.write_text(str(tmp_path / "new.txt"), "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640


async def test_write_real_disk_breaks_hard_links(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("shared")
    os.link(tmp_path / "a", tmp_path / "b")
    await disk.write_text(str(tmp_path / "b"), "new")
    assert (tmp_path / "a").read_text() == "shared"
    assert (tmp_path / "b").read_text() == "new"


# -- kind, delete, move -------------------------------------------------------------------------------------


async def test_kind(fs: FakeFilesystem) -> None:
    fs.create_file("/p/f")
    fs.create_dir("/p/d")
    fs.create_symlink("/p/l", "/p/d")
    assert [await disk.kind(p) for p in ("/p/f", "/p/d", "/p/l", "/p/none", "/p/f/below")] == [
        "file",
        "dir",
        "other",
        None,
        None,
    ]


async def test_delete_a_file_and_a_link_but_never_its_target(fs: FakeFilesystem) -> None:
    fs.create_file("/p/f")
    fs.create_file("/outside/keep")
    fs.create_symlink("/p/l", "/outside")
    await disk.delete("/p/f")
    await disk.delete("/p/l", recursive=True)
    assert os.listdir("/p") == []
    assert os.listdir("/outside") == ["keep"]


async def test_delete_a_directory_needs_recursive(fs: FakeFilesystem) -> None:
    fs.create_file("/p/d/x")
    with pytest.raises(ToolError, match="recursive=true"):
        await disk.delete("/p/d")
    await disk.delete("/p/d", recursive=True)
    assert not exists("/p/d")


async def test_delete_a_tree_unlinks_links_inside_without_descending(fs: FakeFilesystem) -> None:
    fs.create_file("/outside/precious")
    fs.create_file("/p/tree/a/b/file")
    fs.create_symlink("/p/tree/a/escape", "/outside")
    fs.create_symlink("/p/tree/file_link", "/outside/precious")
    await disk.delete("/p/tree", recursive=True)
    assert not exists("/p/tree")
    assert exists("/outside/precious")


async def test_delete_missing_and_through_a_swapped_parent(fs: FakeFilesystem) -> None:
    fs.create_file("/outside/victim")
    fs.create_symlink("/p/d", "/outside")
    with pytest.raises(ToolError, match="does not exist"):
        await disk.delete("/p/nothing")
    with pytest.raises(ToolError, match="symbolic link"):
        await disk.delete("/p/d/victim")
    assert exists("/outside/victim")


async def test_move_a_file_and_a_directory_creating_parents(fs: FakeFilesystem) -> None:
    fs.create_file("/p/a.txt", contents="a")
    fs.create_file("/p/dir/x", contents="x")
    await disk.move("/p/a.txt", "/p/new/place/b.txt")
    await disk.move("/p/dir", "/p/other")
    assert read("/p/new/place/b.txt") == "a"
    assert read("/p/other/x") == "x"
    assert not exists("/p/a.txt")
    assert not exists("/p/dir")


async def test_move_refuses_to_overwrite_and_into_itself(fs: FakeFilesystem) -> None:
    fs.create_file("/p/a", contents="a")
    fs.create_file("/p/b", contents="b")
    fs.create_dir("/p/d")
    with pytest.raises(ToolError, match="already exists"):
        await disk.move("/p/a", "/p/b")
    with pytest.raises(ToolError, match="into itself"):
        await disk.move("/p/d", "/p/d/sub")
    with pytest.raises(ToolError, match="same path"):
        await disk.move("/p/a", "/p/a")
    with pytest.raises(ToolError, match="does not exist"):
        await disk.move("/p/none", "/p/c")
    assert read("/p/b") == "b"
    assert not exists("/p/d/sub")


async def test_move_moves_a_link_itself(fs: FakeFilesystem) -> None:
    fs.create_file("/outside/t", contents="t")
    fs.create_symlink("/p/l", "/outside/t")
    await disk.move("/p/l", "/p/m")
    assert os.readlink("/p/m") == "/outside/t"
    assert read("/outside/t") == "t"


async def test_move_real_disk_refuses_a_dangling_link_as_destination(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ToolError, match="already exists"):
        await disk.move(str(tmp_path / "a"), str(tmp_path / "dangling"))
    assert not (tmp_path / "nowhere").exists()


# -- read_lines ---------------------------------------------------------------------------------------------


async def test_read_lines_of_a_small_file_reads_it_whole(fs: FakeFilesystem) -> None:
    fs.create_file("/p/f", contents="a\r\nb\nc\n")
    page = await disk.read_lines("/p/f", 2, 1, 100)
    assert page == LinePage(["b"], 2, True, total=3, size=7, text="a\r\nb\nc\n")
    assert await disk.read_lines("/p/f", 3, 10, 100) == LinePage(["c"], 3, False, 3, 7, "a\r\nb\nc\n")
    assert (await disk.read_lines("/p/f", 9, 10, 100)).lines == []


async def test_read_lines_streams_a_big_file(fs: FakeFilesystem) -> None:
    fs.create_file("/p/f", contents="".join(f"line {n}\n" for n in range(1, 100_001)))
    streaming = LocalFileSystem(whole_file_bytes=1000)
    page = await streaming.read_lines("/p/f", 50_000, 3, 100)
    assert page.lines == ["line 50000", "line 50001", "line 50002"]
    assert (page.more, page.total, page.text) == (True, None, None)
    end = await streaming.read_lines("/p/f", 99_999, 10, 100)
    assert (end.lines, end.more, end.total) == (["line 99999", "line 100000"], False, 100_000)
    past = await streaming.read_lines("/p/f", 200_000, 10, 100)
    assert (past.lines, past.more, past.total) == ([], False, 100_000)


async def test_long_lines_are_cut_with_their_length(fs: FakeFilesystem) -> None:
    fs.create_file("/p/f", contents="é" * 5000 + "\r\nshort\n")
    for reader in (disk, LocalFileSystem(whole_file_bytes=100)):
        page = await reader.read_lines("/p/f", 1, 5, 100)
        first, second = page.lines
        assert len(first) <= 100
        assert first.startswith("éé")
        assert first.endswith("… [line cut: 5000 characters]")
        assert second == "short"


async def test_read_lines_refuses_binary_and_replaces_invalid_utf8(fs: FakeFilesystem) -> None:
    fs.create_file("/p/bin", contents=b"abc\x00def")
    fs.create_file("/p/latin1", contents=b"caf\xe9\nok\n")
    with pytest.raises(ToolError, match="binary"):
        await disk.read_lines("/p/bin", 1, 10, 100)
    page = await disk.read_lines("/p/latin1", 1, 10, 100)
    assert page.lines == ["caf\ufffd", "ok"]
    assert page.text is None  # not valid UTF-8: nothing for the read tracker
    with pytest.raises(FileNotFoundError):
        await disk.read_lines("/p/none", 1, 10, 100)


_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\n", "\r", "€", "𝄞", " "]), max_size=300)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(text=_TEXT, offset=st.integers(1, 40), limit=st.integers(1, 40), width=st.integers(40, 60))
def test_streaming_pages_equal_whole_file_pages(tmp_path: Path, text: str, offset: int, limit: int, width: int) -> None:
    # The blocking halves, called directly (an event loop per example would be most of the cost), on
    # the real disk (pyfakefs is slow per call).
    path = tmp_path / "f"
    path.write_bytes(text.encode())
    whole = disk._read_lines(str(path), offset, limit, width)
    streamed = LocalFileSystem(whole_file_bytes=0)._read_lines(str(path), offset, limit, width)
    assert streamed.lines == whole.lines
    assert streamed.more == whole.more
    if not streamed.more:
        assert streamed.total == whole.total


async def test_read_lines_real_disk_cost_does_not_depend_on_the_size(tmp_path: Path) -> None:
    # 1 MB of lines, then a 64 GB hole: reading the whole file would take minutes.
    path = tmp_path / "huge.log"
    write_sparse(path, b"".join(b"entry %d\n" % n for n in range(100_000)), 64 * 1024**3)
    start = time.monotonic()
    page = await disk.read_lines(str(path), 10, 5, 100)
    assert page.lines == ["entry 9", "entry 10", "entry 11", "entry 12", "entry 13"]
    assert (page.more, page.size) == (True, 64 * 1024**3)
    assert time.monotonic() - start < 1.0


async def test_reading_a_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ToolError, match="not a regular file \\(a named pipe\\)"):
        await disk.read_text(str(tmp_path / "pipe"))
    with pytest.raises(ToolError, match="named pipe"):
        await disk.read_lines(str(tmp_path / "pipe"), 1, 1, 10)


def test_temporary_names_are_recognisable() -> None:
    assert TEMP_PREFIX.startswith(".")
