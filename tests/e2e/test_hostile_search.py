"""glob and grep on hostile trees, with hostile patterns (refagent.tools.search and the engines of
refagent.sandbox.search), on the real disk.

A repository is untrusted input: FIFOs, devices and links to them where files or ``.gitignore`` files
are expected, patterns that make backtracking engines take exponential time, a directory swapped for a
link to outside between the check and the search. Each attack runs against both engines (ripgrep and
the Python one); each must end promptly with the right answer or a clear error, and leak nothing.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import anyio
import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.gitignore import MAX_IGNORE_BYTES
from refagent.sandbox.seams import Query
from refagent.sandbox.search.clearance import Clearances
from refagent.sandbox.search.dispatch import LocalSearch, list_files, search
from refagent.sandbox.search.journal import Journal
from refagent.sandbox.search.python_engine import python_grep_in_process
from refagent.sandbox.search.ripgrep import find_rg, rg_grep
from refagent.tools.search import Glob, Grep
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio

RG = find_rg()
ENGINES = [
    pytest.param(RG, id="rg", marks=pytest.mark.skipif(RG is None, reason="no ripgrep")),
    pytest.param(None, id="python"),
]
CATASTROPHIC = "a" * 40 + "!"
"""A line on which ``(a+)+$`` backtracks 2**40 times in Python's ``re``."""


def put(root: Path, relative: str, data: str = "needle\n") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    return path


def q(pattern: str = "needle", **options: object) -> Query:
    return Query(pattern, False, False, 0, options.get("mode", "files"), list(options.get("globs", [])))  # type: ignore[arg-type,call-overload]


def children() -> set[int]:
    """Our live child processes (Linux)."""
    found: set[int] = set()
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        pytest.skip("this kernel does not list a process's children")
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as file:
                found.update(int(pid) for pid in file.read().split())
        except FileNotFoundError:
            continue  # a worker thread that ended while we looked (it had no children of its own)
    alive = set()
    for pid in found:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                if file.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                    alive.add(pid)
        except OSError:
            continue
    return alive


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    put(root, "src/a.py")
    put(root, "notes.txt", "nothing\n")
    return root


# -- FIFOs, sockets and devices are never opened -------------------------------------------------------


@pytest.mark.parametrize("rg", ENGINES)
async def test_a_fifo_in_the_tree_is_skipped(repo: Path, rg: str | None) -> None:
    os.mkfifo(repo / "src" / "pipe.py")
    os.mkfifo(repo / "pipe")
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    with anyio.fail_after(10):
        found = await call(Grep(), ctx, pattern="needle", output_mode="files")
        listed = await call(Glob(), ctx, pattern="**/*")
    assert found.output == "src/a.py"
    assert listed.output == "notes.txt\nsrc/a.py"


@pytest.mark.parametrize("rg", ENGINES)
async def test_an_atomic_writes_leftover_is_never_shown(repo: Path, rg: str | None) -> None:
    """A temporary file an atomic write left when the agent was killed during it: half a file."""
    (repo / "src" / ".~refagent-k1ll3d.tmp").write_text("needle, half written\n")
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    found = await call(Grep(), ctx, pattern="needle", output_mode="files")
    listed = await call(Glob(), ctx, pattern="**/*")
    assert found.output == "src/a.py"
    assert listed.output == "notes.txt\nsrc/a.py"


@pytest.mark.parametrize("rg", ENGINES)
async def test_a_fifo_as_the_target_is_refused(repo: Path, rg: str | None) -> None:
    os.mkfifo(repo / "pipe")
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    with anyio.fail_after(10):
        with pytest.raises(ToolError, match=r"not a regular file or a directory \(a named pipe"):
            await Grep().prepare({"pattern": "x", "path": "pipe"}, ctx)
        # Swapped in after the check: the engines do not open it either (nothing waits for a writer).
        hits = await search(q(), str(repo), "pipe", rg)
    assert hits.counts == {}


@pytest.mark.parametrize("rg", ENGINES)
async def test_a_device_or_a_link_to_one_is_not_read(repo: Path, rg: str | None) -> None:
    os.symlink("/dev/zero", repo / "zero")
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    with anyio.fail_after(10):
        for where, path in (
            (ctx, "zero"),
            (make_ctx("/dev", search=LocalSearch(rg)), "/dev/zero"),
        ):  # refused before anyone is asked
            with pytest.raises(ToolError, match=r"a named pipe, socket or device"):
                await Grep().prepare({"pattern": "x", "path": path}, where)
        hits = await search(q(), "/dev", "zero", rg)  # and were it searched, nothing is read
        found = await call(Grep(), ctx, pattern="needle", output_mode="files")
    assert hits.counts == {}
    assert found.output == "src/a.py"


@pytest.mark.parametrize("rg", ENGINES)
@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "outside"])
async def test_a_hostile_gitignore_neither_blocks_nor_leaks(
    repo: Path, tmp_path: Path, rg: str | None, kind: str
) -> None:
    """ripgrep would wait on a FIFO .gitignore forever, read a link to /dev/zero until memory runs out, and
    follow a link anywhere: such a tree is searched by the Python engine, which reads none of them."""
    secret = put(tmp_path, "secret-rules", "*.py\n")
    ignore = repo / "src" / ".gitignore"
    if kind == "fifo":
        os.mkfifo(ignore)
    elif kind == "zero":
        os.symlink("/dev/zero", ignore)
    elif kind == "huge":
        ignore.write_text("*.py\n" + "#" * MAX_IGNORE_BYTES)
    else:
        os.symlink(secret, ignore)
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    with anyio.fail_after(10):
        found = await call(Grep(), ctx, pattern="needle", output_mode="files")
        listed = await call(Glob(), ctx, pattern="*.py")
    assert found.output == "src/a.py"  # the .gitignore's "*.py" was not read
    assert listed.output == "src/a.py"


async def test_a_fifo_gitignore_above_the_tree_sends_ripgrep_nowhere(tmp_path: Path) -> None:
    """ripgrep reads the .gitignore of every ancestor, up to /."""
    if RG is None:
        pytest.skip("no ripgrep")
    os.mkfifo(tmp_path / ".gitignore")
    put(tmp_path, "plain/a.txt")
    with anyio.fail_after(10):
        hits = await search(q(), str(tmp_path / "plain"), ".", RG)
        files, _ = await list_files([], str(tmp_path / "plain"), RG)
    assert set(hits.counts) == {"a.txt"}
    assert files == ["a.txt"]


async def test_cancelling_ripgrep_kills_it(tmp_path: Path) -> None:
    """Were ripgrep left waiting (a .gitignore swapped for a FIFO after the check), a cancel still ends it."""
    if RG is None:
        pytest.skip("no ripgrep")
    put(tmp_path, "a.txt")
    os.mkfifo(tmp_path / ".gitignore")
    before = children()
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await rg_grep(RG, q(), str(tmp_path), ".")  # past the check: rg itself waits on the FIFO
    assert scope.cancelled_caught
    assert time.monotonic() - started < 3
    assert children() <= before


# -- patterns that backtrack ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rg", "pattern"),
    [
        pytest.param(
            RG, "(?=(a+)+$)", id="rg-rejects-lookaround", marks=pytest.mark.skipif(RG is None, reason="no rg")
        ),
        pytest.param(None, "(a+)+$", id="python"),
    ],
)
async def test_a_catastrophic_regex_is_stopped_and_the_loop_stays_free(
    repo: Path, rg: str | None, pattern: str
) -> None:
    put(repo, "long.txt", CATASTROPHIC + "\n")
    ctx = make_ctx(str(repo), search=LocalSearch(rg, python_seconds=1.0))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    started = time.monotonic()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tick)
        with anyio.fail_after(10), pytest.raises(ToolError, match=r"the pattern took too long.*simplify it"):
            await call(Grep(), ctx, pattern=pattern)
        tasks.cancel_scope.cancel()
    elapsed = time.monotonic() - started
    assert elapsed < 5  # the old engine: 2**40 steps, with the event loop stopped
    assert ticks >= 10  # the event loop kept running meanwhile
    # The session goes on: the next search works, look-around included.
    found = await call(Grep(), ctx, pattern="needle(?=\\n|$)", output_mode="files")
    assert found.output == "src/a.py"


async def test_cancelling_the_python_engine_kills_its_process(repo: Path) -> None:
    put(repo, "long.txt", CATASTROPHIC + "\n")
    before = children()
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await python_grep_in_process(q("(a+)+$"), str(repo), ".", seconds=60)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 3
    assert children() <= before


async def test_the_python_engine_does_not_import_from_the_tree(repo: Path) -> None:
    """Its child process starts in / with an isolated path: a hostile `json.py` or `refagent/` is not run."""
    marker = repo / "ran"
    for name in ("json.py", "refagent/__init__.py", "re.py"):
        put(repo, name, f"open({str(marker)!r}, 'w')\n")
    put(repo, "src/b.txt", "needle\n")
    previous = os.getcwd()
    os.chdir(repo)  # what matters: the child neither starts here nor looks here for modules
    try:
        hits = await python_grep_in_process(q(), str(repo), ".")
    finally:
        os.chdir(previous)
    assert "src/b.txt" in hits.counts
    assert not marker.exists()


@pytest.mark.parametrize("rg", ENGINES)
async def test_a_pathological_gitignore_glob_is_matched_in_linear_time(repo: Path, rg: str | None) -> None:
    """A single match of this glob against a name of 40 a's took minutes (exponential backtracking)."""
    glob = "*a*a*a*a*a*a*a*a*a*a*a*a*b"
    (repo / ".gitignore").write_text(glob + "\n")
    for n in range(30, 41):
        put(repo, "a" * n)
        put(repo, "d/" + "a" * n + "b")
    ctx = make_ctx(str(repo), search=LocalSearch(rg))
    with anyio.fail_after(10):
        found = await call(Grep(), ctx, pattern="needle", output_mode="files")
        listed = await call(Glob(), ctx, pattern=glob.removesuffix("*b"))  # a glob from the model, too
    names = found.output.splitlines()
    assert set(names) == {"src/a.py", *("a" * n for n in range(30, 41))}  # the ...b files are ignored
    assert listed.output.splitlines() == sorted("a" * n for n in range(30, 41))


# -- a directory swapped for a link to outside -----------------------------------------------------------


@pytest.mark.parametrize("rg", ENGINES)
async def test_a_directory_swapped_for_a_link_after_the_check_leaks_nothing(tmp_path: Path, rg: str | None) -> None:
    """Resolve, swap, execute: the search runs where the path was checked, or not at all."""
    work = tmp_path / "work"
    put(work, "sub/mine.txt", "needle mine\n")
    put(tmp_path, "outside/secret.txt", "needle SECRET\n")
    ctx = make_ctx(str(work), search=LocalSearch(rg))
    for tool, args in (
        (Grep(), {"pattern": "needle", "path": "sub"}),
        (Glob(), {"pattern": "*", "path": "sub"}),
    ):
        plan = await tool.prepare(args, ctx)
        assert not plan.outside
        os.rename(work / "sub", work / "sub.old")
        os.symlink(tmp_path / "outside", work / "sub")
        try:
            outcome = (await plan.execute()).output
        except ToolError as exc:
            outcome = str(exc)
        finally:
            os.unlink(work / "sub")
            os.rename(work / "sub.old", work / "sub")
        assert "SECRET" not in outcome
        assert "secret.txt" not in outcome
        assert "not the directory that was checked" in outcome


def stand_in_rg(path: Path, *, before: str = "", grep: list[str], files: list[str]) -> str:
    """A stand-in for ripgrep that runs the shell commands ``before`` (in the searched directory), then
    prints ``grep`` (``path NUL 1:text`` lines) or, for ``--files``, ``files`` (NUL-ended names)."""
    lines = (line.split(":") for line in grep)
    printed_grep = "".join(f"printf '%s\\0001:%s\\n' '{name}' '{text}'\n" for name, text in lines)
    printed_files = "".join(f"printf '%s\\0' '{name}'\n" for name in files)
    path.write_text(f'#!/bin/sh\n{before}\ncase "$*" in *--files*)\n{printed_files};;\n*)\n{printed_grep};;\nesac\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.skipif(RG is None, reason="no ripgrep")
@pytest.mark.parametrize("watched", [True, False], ids=["watched", "unwatchable"])
async def test_what_ripgrep_reports_through_a_link_is_dropped(tmp_path: Path, watched: bool) -> None:
    """ripgrep walks by path: a directory swapped for a link while it runs leads it outside. Played here by
    a stand-in that reports such a file: each reported path must be where it says, or it is dropped; the
    second time too, when the tree is held (the journal vouches only for directories the walk listed), or
    found unwatchable (a network file system: then checked beside rg)."""
    work = tmp_path / "work"
    put(work, "mine.txt", "needle\n")
    put(tmp_path, "outside/secret.txt", "needle SECRET\n")
    os.symlink(tmp_path / "outside", work / "link")
    grep = ["./mine.txt:needle", "./link/secret.txt:needle SECRET"]
    fake = stand_in_rg(tmp_path / "rg", grep=grep, files=["mine.txt", "link/secret.txt"])
    search = LocalSearch(fake)
    journal = Journal.open() if not watched else None
    if journal is not None:
        journal.fs_type = lambda path, fd: 0x6969  # NFS
        search.cleared = Clearances(watch=journal)
    ctx = make_ctx(str(work), search=search)
    try:
        for _ in range(2):
            assert (await call(Grep(), ctx, pattern="needle")).output == "mine.txt:1:needle"
            assert (await call(Glob(), ctx, pattern="**")).output == "mine.txt"
    finally:
        if journal is not None:
            journal.close()


needs_journal = pytest.mark.skipif(Clearances().journal is None, reason="nothing watches the tree here")


@needs_journal
async def test_a_directory_swapped_and_back_while_ripgrep_runs_leaks_nothing(tmp_path: Path) -> None:
    """The swap undone before any check could look: ripgrep read through the link, and the directory is
    a plain one again when it ends. The journal saw the swap: the search is made again by the Python
    engine, which opens each directory from its parent and is led nowhere by a link."""
    work = tmp_path / "work"
    put(work, "sub/mine.txt", "needle mine\n")
    put(tmp_path, "outside/secret.txt", "needle SECRET\n")
    swap = "mv sub sub.old && ln -s ../outside sub && rm sub && mv sub.old sub"
    fake = stand_in_rg(
        tmp_path / "rg",
        before=swap,
        grep=["./sub/mine.txt:needle mine", "./sub/secret.txt:needle SECRET"],
        files=["sub/mine.txt", "sub/secret.txt"],
    )
    ctx = make_ctx(str(work), search=LocalSearch(fake))
    for _ in range(2):  # the first search walks the tree before rg runs; the second finds it held
        assert (await call(Grep(), ctx, pattern="needle")).output == "sub/mine.txt:1:needle mine"
        assert (await call(Glob(), ctx, pattern="**")).output == "sub/mine.txt"


@needs_journal
async def test_a_file_swapped_and_back_while_ripgrep_reads_it_leaks_nothing(tmp_path: Path) -> None:
    """The same with a file: ripgrep opened it through a link to a secret, which is gone when it ends.
    A listing names only what the directory held, so only grep is made again."""
    work = tmp_path / "work"
    put(work, "sub/mine.txt", "needle mine\n")
    put(tmp_path, "secret.txt", "needle SECRET\n")
    swap = "mv sub/mine.txt sub/kept && ln -s ../../secret.txt sub/mine.txt && rm sub/mine.txt"
    swap += " && mv sub/kept sub/mine.txt"
    fake = stand_in_rg(tmp_path / "rg", before=swap, grep=["./sub/mine.txt:needle SECRET"], files=["sub/mine.txt"])
    ctx = make_ctx(str(work), search=LocalSearch(fake))
    for _ in range(2):
        assert (await call(Grep(), ctx, pattern="needle")).output == "sub/mine.txt:1:needle mine"
        assert (await call(Glob(), ctx, pattern="**")).output == "sub/mine.txt"
