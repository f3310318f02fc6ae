"""What command confinement adds to a command, measured against the unconfined path in the same run.

Every command the agent runs starts through the launcher (:mod:`refagent.sandbox.confine.launcher`), which lowers
the resource limits and, at levels ``network`` and ``workspace``, confines the command (Landlock, user,
mount, PID and, for ``workspace``, network namespaces). Level ``none`` goes through the same launcher
unconfined: that is the baseline the confinement is judged against.

- ``true``: the shell run directly (``subprocess.run([shell, "-c", "true"])``, with the shell the agent
  uses, so that only the agent's machinery differs), then ``LocalTerminals.run("true")`` at levels
  ``none``, ``network`` and ``workspace``. Target: ``workspace`` adds under 30 ms to ``true`` over
  ``none``; what it adds over the bare shell is shown too.
- pytest: ``python -m pytest -q -p no:randomly`` over a generated project of 200 test files (two trivial
  tests each, all importing one shared module), at ``none`` and ``workspace``. Target: confined within
  1.10x of unconfined. Caches stay warm for both: one untimed run at each level first writes
  ``__pycache__`` and ``.pytest_cache`` inside the project (``PYTHONDONTWRITEBYTECODE`` is not passed on),
  and later runs reuse them. A run that does not exit 0 stops the benchmark with its output's tail (a
  broken sandbox gives no ratio).

The machine's confinement support is printed first: where it cannot hold all of ``workspace``, the
numbers do not measure full confinement. A write outside the workspace is tried once at ``workspace``
to show the confinement is really on.

Measurements are interleaved (drift on the machine hits all alike; the order is reversed on every other
round); medians of ``--repeats`` runs.

    .venv/bin/python benchmarks/sandbox.py [--repeats N] [--pytest-repeats N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

import anyio

from refagent.sandbox.confine.confinement import Confinement, Support, machine_support
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.seams import Level

TRUE_TARGET_MS = 30.0
PYTEST_TARGET_RATIO = 1.10
TEST_FILES = 200
PYTEST_TIME_LIMIT = 300.0
TRUE_TIME_LIMIT = 30.0


def rounds(names: Sequence[str], repeats: int) -> Iterator[str]:
    """Each name once per round, in reverse order on every other round."""
    for round_number in range(repeats):
        yield from (names if round_number % 2 == 0 else reversed(names))


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


def run_bare(shell: str, cwd: str) -> None:
    """The floor: the shell spawned and waited for directly, blocking, with no event loop in the way."""
    subprocess.run([shell, "-c", "true"], cwd=cwd, stdin=subprocess.DEVNULL, check=True)


async def run_checked(terminals: LocalTerminals, command: str, cwd: str, level: Level, time_limit: float) -> None:
    """Run ``command``; raise with the output's tail unless it exited 0."""
    result = await terminals.run(command, cwd, time_limit, sandbox=level)
    if result.exit_code != 0 or result.timed_out:
        how = "timed out" if result.timed_out else f"exit code {result.exit_code}, signal {result.signal}"
        tail = "\n".join(result.output.splitlines()[-20:])
        raise RuntimeError(f"{command!r} at level {level!r} failed ({how}); the output ends:\n{tail}")


def print_support(support: Support) -> None:
    print(f"sandbox: Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"  {support}")
    print(f"  {support.summary()}")
    missing = support.missing("workspace")
    if missing:
        print(f"  NOTE: these numbers do not measure full confinement (missing: {', '.join(missing)})")


async def check_confined(terminals: LocalTerminals, root: str) -> None:
    """Show that ``workspace`` refuses a write outside the roots (where Landlock is there to refuse it)."""
    # Not under /tmp: the sandbox shows its own /tmp, so a path there would fail for another reason.
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="refagent-bench-outside-", dir=parent) as outside:
        target = os.path.join(outside, "written")
        result = await terminals.run(f"touch {shlex.quote(target)}", root, TRUE_TIME_LIMIT, sandbox="workspace")
        refused = result.exit_code != 0 and not await anyio.Path(target).exists()
    print(f"  a write outside the workspace at level workspace: {'refused' if refused else 'ALLOWED'}")
    if not refused and terminals.confinement is not None and terminals.confinement.support.landlock:
        raise RuntimeError("Landlock is there but the write outside the workspace went through")


async def bench_true(terminals: LocalTerminals, root: str, repeats: int) -> None:
    shell = terminals.shell or "/bin/sh"
    raw = f"raw {shell} -c true"

    async def bare() -> None:
        run_bare(shell, root)

    def through(level: Level) -> Callable[[], Awaitable[None]]:
        return lambda: run_checked(terminals, "true", root, level, TRUE_TIME_LIMIT)

    cases: dict[str, Callable[[], Awaitable[None]]] = {
        raw: bare,
        "level none (unconfined)": through("none"),
        "level network": through("network"),
        "level workspace": through("workspace"),
    }
    for work in cases.values():  # warm the page cache, the probe, the private /tmp
        await work()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name in rounds(list(cases), repeats):
        times[name].append(await timed(cases[name]))
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    base, floor = medians["level none (unconfined)"], medians[raw]
    print(f"true, median of {repeats}:")
    print(f"  {'':<28} {'ms':>8} {'+ms over none':>14} {'+ms over raw':>13}")
    for name, median in medians.items():
        print(f"  {name:<28} {median:>8.1f} {median - base:>+14.1f} {median - floor:>+13.1f}")
    added = medians["level workspace"] - base
    verdict = "PASS" if added < TRUE_TARGET_MS else "FAIL"
    print(f"  target: workspace adds < {TRUE_TARGET_MS:.0f} ms over none: {added:+.1f} ms  {verdict}")
    print(f"  (workspace over the bare shell: {medians['level workspace'] - floor:+.1f} ms)")


SHARED = '''"""Shared by every test file."""


def double(value: int) -> int:
    return 2 * value


WORDS = ["alpha", "beta", "gamma"]
'''

TEST_FILE = """from shared import WORDS, double


def test_double_{n}() -> None:
    assert double({n}) == {twice}


def test_words_{n}() -> None:
    assert sorted(WORDS)[{n} % 3] in WORDS
"""


def make_project(root: str, files: int) -> None:
    """``files`` test files, two tests each, importing ``shared.py``; a ``pytest.ini`` pins the rootdir."""
    with open(os.path.join(root, "pytest.ini"), "w", encoding="utf-8") as handle:
        handle.write("[pytest]\n")
    with open(os.path.join(root, "shared.py"), "w", encoding="utf-8") as handle:
        handle.write(SHARED)
    for n in range(1, files + 1):
        with open(os.path.join(root, f"test_{n:04d}.py"), "w", encoding="utf-8") as handle:
            handle.write(TEST_FILE.format(n=n, twice=2 * n))


async def bench_pytest(repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="refagent-bench-pytest-") as temp:
        root = str(await anyio.Path(temp).resolve())
        make_project(root, TEST_FILES)
        confinement = Confinement([root], machine_support())
        # Bytecode is written whatever this shell says, so that both levels run on warm __pycache__.
        env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        terminals = LocalTerminals(env=env, confinement=confinement)
        command = f"{shlex.quote(sys.executable)} -m pytest -q -p no:randomly"
        levels: dict[str, Level] = {"unconfined (none)": "none", "confined (workspace)": "workspace"}

        def through(level: Level) -> Callable[[], Awaitable[None]]:
            return lambda: run_checked(terminals, command, root, level, PYTEST_TIME_LIMIT)

        try:
            for level in levels.values():  # warm: __pycache__, .pytest_cache, the page cache
                await through(level)()
            for cache in (".pytest_cache", "__pycache__"):
                if not await anyio.Path(root, cache).is_dir():
                    raise RuntimeError(f"pytest wrote no {cache} inside the project")
            times: dict[str, list[float]] = {name: [] for name in levels}
            for name in rounds(list(levels), repeats):
                times[name].append(await timed(through(levels[name])))
        finally:
            confinement.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["unconfined (none)"]
    print(f"pytest, {TEST_FILES} files ({2 * TEST_FILES} tests), warm caches, median of {repeats}:")
    for name, median in medians.items():
        low, high = min(times[name]), max(times[name])
        print(f"  {name:<22} {median:>7.2f}s  (min {low:.2f}s, max {high:.2f}s) {median / base:>6.3f}x")
    ratio = medians["confined (workspace)"] / base
    verdict = "PASS" if ratio < PYTEST_TARGET_RATIO else "FAIL"
    print(f"  target: confined / unconfined < {PYTEST_TARGET_RATIO:.2f}x: {ratio:.3f}x  {verdict}")


async def main(repeats: int, pytest_repeats: int) -> None:
    support = await anyio.to_thread.run_sync(machine_support)
    print_support(support)
    with tempfile.TemporaryDirectory(prefix="refagent-bench-true-") as temp:
        root = str(await anyio.Path(temp).resolve())
        confinement = Confinement([root], support)
        terminals = LocalTerminals(confinement=confinement)
        try:
            await check_confined(terminals, root)
            print()
            await bench_true(terminals, root, repeats)
        finally:
            confinement.close()
    print()
    await bench_pytest(pytest_repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30, help="runs of each kind of `true` (default 30)")
    parser.add_argument("--pytest-repeats", type=int, default=5, help="pytest runs at each level (default 5)")
    arguments = parser.parse_args()
    anyio.run(main, arguments.repeats, arguments.pytest_repeats)
