"""What the search and read tools cost on top of the work itself, measured side by side in one run.

grep: the ``grep`` tool (prepare + execute, through the real sandbox) over this venv's site-packages,
against ``rg`` run directly on the same tree and pattern with its output read from a pipe, twice: with
the filters the tool uses (``--hidden -g '!.git'``) and with the tool's exact arguments (the difference
to the tool is then only the tool's own work: spawning, parsing, sorting, rendering). Target: the tool
within 1.3x of raw rg.

glob: the ``glob`` tool over the same tree, against ``rg --files`` with the same filters and the glob
(``**/*.py``, ``**/*.json``, ``**/nothing_*``, and every file). Target: within 1.3x of raw ``rg --files``.

Both tools check, before trusting rg's walk, that the tree's ``.gitignore`` files are safe for rg to read;
the first search of a tree walks its directories for that (watching them, on Linux), and later ones find
the tree as it was in one read of the watches, or by stating them where nothing watches
(``refagent.sandbox.search.clearance``): the warm-up run before the timed ones is that first.

read_file: page 1 of a 100 MB file, a page in its middle, and page 1 of a 1 MB file (both generated into
a temporary directory). Target: page 1 costs the same whatever the file's size. A page in the middle
costs a scan up to it (lines are counted, not kept).

Measurements are interleaved (drift on the machine hits all alike); medians of ``--repeats`` runs.

    .venv/bin/python benchmarks/tools.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import site
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio

from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.disk.tracker import FileTracker
from refagent.sandbox.holding import NOTHING_HELD
from refagent.sandbox.search.dispatch import LocalSearch
from refagent.sandbox.search.ripgrep import RG_BASE, find_rg
from refagent.tools.base import ToolContext
from refagent.tools.files import ReadFile
from refagent.tools.search import Glob, Grep

PATTERNS = [r"def main\(", "import asyncio", "ZZZ_not_there_at_all", r"raise \w+Error\("]


async def _ignore(update: dict[str, object]) -> None:
    return None


def context(root: str, rg: str | None = None) -> ToolContext:
    disk = LocalFileSystem()
    search = LocalSearch(rg)
    return ToolContext(
        "bench",
        root,
        [root],
        RootPolicy(root),
        disk,
        disk,
        LocalTerminals(),
        NOTHING_HELD,
        FileTracker(),
        search,
        _ignore,
    )


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def run_rg(argv: list[str], cwd: str) -> None:
    await anyio.run_process(argv, cwd=cwd, check=False)


async def medians(runs: dict[str, Callable[[], Awaitable[object]]], repeats: int) -> list[float]:
    """The median seconds of each of ``runs``, timed interleaved ``repeats`` times (drift hits all alike),
    in their order; the first is run once before, to warm the page cache, the imports and the tree's
    clearance."""
    first = next(iter(runs.values()))
    await first()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(await timed(run))
    return [statistics.median(times[name]) for name in runs]


async def bench_grep(root: str, repeats: int) -> None:
    rg = find_rg()
    if rg is None:
        print("grep: ripgrep not found, skipped")
        return
    ctx = context(root, rg)
    tool = Grep()
    print(f"grep over {root} ({sum(len(f) for _, _, f in os.walk(root))} files), median of {repeats}:")
    print(f"  {'pattern':<24} {'tool':>9} {'rg same filters':>16} {'rg tool args':>13} {'ratio':>6} {'ratio*':>7}")
    for pattern in PATTERNS:
        same_filters = [rg, "--no-config", "--hidden", "--glob", "!.git", "-n", "--regexp", pattern, "."]
        tool_args = [rg, *RG_BASE, "--crlf", "--null", "--line-number", "--with-filename", "--no-heading"]
        tool_args += ["--glob", "!.git", "--regexp", pattern, "--", "."]

        async def through_tool(pattern: str = pattern) -> None:
            plan = await tool.prepare({"pattern": pattern}, ctx)
            await plan.execute()

        tool_s, raw_s, args_s = await medians(
            {
                "tool": through_tool,
                "raw": lambda argv=same_filters: run_rg(argv, root),
                "args": lambda argv=tool_args: run_rg(argv, root),
            },
            repeats,
        )
        print(
            f"  {pattern:<24} {tool_s * 1000:>7.1f}ms {raw_s * 1000:>14.1f}ms {args_s * 1000:>11.1f}ms "
            f"{tool_s / raw_s:>5.2f}x {tool_s / args_s:>6.2f}x"
        )
    print("  ratio: tool / rg with the same filters; ratio*: tool / rg with the tool's exact arguments")


GLOBS = ["**/*.py", "**/*.json", "**/nothing_*", "**"]


async def bench_glob(root: str, repeats: int) -> None:
    rg = find_rg()
    if rg is None:
        print("glob: ripgrep not found, skipped")
        return
    ctx = context(root, rg)
    tool = Glob()
    print(f"glob over {root}, median of {repeats}:")
    print(f"  {'glob':<24} {'tool':>9} {'rg --files':>11} {'ratio':>6}")
    for glob in GLOBS:
        raw = [rg, *RG_BASE, "--files", "--glob", "!.git"] + (["--glob", glob] if glob != "**" else []) + ["."]

        async def through_tool(glob: str = glob) -> None:
            plan = await tool.prepare({"pattern": glob}, ctx)
            await plan.execute()

        tool_s, raw_s = await medians({"tool": through_tool, "raw": lambda argv=raw: run_rg(argv, root)}, repeats)
        print(f"  {glob:<24} {tool_s * 1000:>7.1f}ms {raw_s * 1000:>9.1f}ms {tool_s / raw_s:>5.2f}x")
    print("  ratio: tool / rg --files with the same filters and glob")


LINE = b"%08d the quick brown fox jumps over the lazy dog, a line of a generated log file\n"


def make_file(path: str, size: int) -> int:
    """Write about ``size`` bytes of 90-byte lines; return the number of lines."""
    block = b"".join(LINE % n for n in range(10_000))
    written = 0
    with open(path, "wb") as handle:
        while written < size:
            handle.write(block)
            written += len(block)
    return written // len(LINE % 0)


async def bench_read(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as temp:
        root = str(await anyio.Path(temp).resolve())
        lines = make_file(os.path.join(root, "big.log"), 100 * 1024 * 1024)
        make_file(os.path.join(root, "small.log"), 1024 * 1024)
        ctx = context(root)
        tool = ReadFile()

        async def read(path: str, offset: int) -> None:
            plan = await tool.prepare({"path": path, "offset": offset}, ctx)
            await plan.execute()

        cases = {
            "100 MB, page 1": ("big.log", 1),
            f"100 MB, line {lines // 2}": ("big.log", lines // 2),
            "1 MB, page 1": ("small.log", 1),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for path, offset in cases.values():
            await read(path, offset)  # warm the page cache
        for _ in range(repeats):
            for name, (path, offset) in cases.items():
                times[name].append(await timed(lambda path=path, offset=offset: read(path, offset)))
        base = statistics.median(times["1 MB, page 1"])
        print(f"read_file, 2000-line pages, median of {repeats}:")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:<24} {median * 1000:>8.2f}ms {median / base:>7.2f}x of 1 MB page 1")


async def main(repeats: int) -> None:
    root = str(await anyio.Path(site.getsitepackages()[0]).resolve())
    await bench_grep(root, repeats)
    print()
    await bench_glob(root, repeats)
    print()
    await bench_read(repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    anyio.run(main, parser.parse_args().repeats)
