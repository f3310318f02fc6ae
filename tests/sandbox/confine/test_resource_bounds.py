"""A fork bomb and a memory hog in a command are bounded, as root too, and the agent goes on: the
command's cgroup (``pids.max``, the memory bound) where the agent can make one, and its PID namespace's
own ``pid_max`` (Linux 6.14+) where it cannot. On the real kernel, with real processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from refagent.sandbox.confine import cgroups
from refagent.sandbox.confine.confinement import Confinement, cgroup_bases
from refagent.sandbox.confine.private_tmp import memory_total
from refagent.sandbox.confine.process import LocalTerminals, ResourceLimits
from tests.support.procs import alive, survivors
from tests.support.sandboxed import CONFINED, SUPPORT

pytestmark = [*CONFINED, pytest.mark.slow]

TASKS = 400
FORKER = (
    "import os, time\n"
    "made = 0\n"
    "while made < 3000:\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
    "    made += 1\n"
    "print('made', made, flush=True)\n"
)
"""Forks children that stay until fork fails (or 3,000 are made): how many it made."""


def made(output: str) -> int:
    return int(output.split("\nmade ")[1].split()[0])


def takes_memory(base: str) -> bool:
    """Whether a command's cgroup made in ``base`` takes a memory bound (v2's ``memory.max``, v1's)."""
    return any(os.path.exists(os.path.join(base, name)) for name in ("memory.max", "memory.limit_in_bytes"))


def left(output: str) -> list[str]:
    """The command's cgroups (it printed its ``/proc/self/cgroup``) that are still there."""
    names = {line.rsplit("/", 1)[1] for line in output.splitlines() if f"/{cgroups.PREFIX}" in line}
    return [name for base in cgroup_bases() for name in names if os.path.exists(os.path.join(base, name))]


@pytest.mark.parametrize(
    ("namespaces", "disable"),
    [(True, ""), (True, "cgroups"), (False, "")],
    ids=["namespaces and cgroups", "namespaces alone (pid_max)", "cgroups alone"],
)
async def test_a_fork_bomb_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, namespaces: bool, disable: str
) -> None:
    monkeypatch.setenv("REFAGENT_SANDBOX_DISABLE", disable)
    if not namespaces and not cgroup_bases():
        pytest.skip("the agent cannot make a cgroup here (not root, or a desktop's systemd session)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    support = SUPPORT if namespaces else SUPPORT.without(["namespaces"])
    confinement = Confinement([str(workspace)], support)
    terminals = LocalTerminals(confinement=confinement, limits=ResourceLimits(tasks=TASKS))
    try:
        (workspace / "forker.py").write_text(FORKER)
        bomb = await terminals.run(f"cat /proc/self/cgroup; {sys.executable} forker.py", str(workspace), 60)
        after = await terminals.run("echo still here", str(workspace), 30)
    finally:
        confinement.close()
    assert made(bomb.output) < TASKS, bomb.output  # root's too: RLIMIT_NPROC alone would not stop it
    assert after.output == "still here\n"
    assert left(bomb.output) == []  # removed once the launcher had exited


async def test_a_memory_hog_is_killed_alone(tmp_path: Path) -> None:
    if not any(takes_memory(base) for base in cgroup_bases()):
        pytest.skip("the agent cannot make a memory cgroup here")
    total = memory_total()
    assert total is not None
    workspace = tmp_path / "ws"
    workspace.mkdir()
    confinement = Confinement([str(workspace)], SUPPORT)
    bound = 128 << 20
    terminals = LocalTerminals(confinement=confinement, limits=ResourceLimits(memory_share=bound / total))
    (workspace / "hog.py").write_text("x = bytearray(512 << 20)\nprint('allocated', len(x))\n")
    try:
        result = await terminals.run(
            f"cat /proc/self/cgroup; {sys.executable} hog.py; echo exit $?", str(workspace), 60
        )
        small = await terminals.run(f"{sys.executable} -c 'x = bytearray(16 << 20); print(len(x))'", str(workspace), 60)
    finally:
        confinement.close()
    assert "allocated" not in result.output, result.output
    assert "exit 137" in result.output or "MemoryError" in result.output  # killed by the kernel, or refused
    assert small.output == f"{16 << 20}\n"
    assert left(result.output) == []


@pytest.mark.parametrize("level", ["workspace", "none"])
async def test_a_commands_processes_are_the_first_the_oom_killer_ends(tmp_path: Path, level: str) -> None:
    """Where no cgroup bounds it, a command that exhausts the machine's memory is what the kernel kills,
    not the agent or the editor."""
    confinement = Confinement([str(tmp_path)], SUPPORT)
    try:
        result = await LocalTerminals(confinement=confinement).run(
            "cat /proc/self/oom_score_adj", str(tmp_path), 30, sandbox=level
        )
    finally:
        confinement.close()
    assert result.output == "1000\n"


def test_stale_cgroups_are_removed_once_their_launcher_is_gone_and_they_are_empty(tmp_path: Path) -> None:
    """Directories stand in for cgroups here: a cgroup that holds a process cannot be removed, as a
    directory that holds a file cannot."""
    base = tmp_path / "base"
    dead = 2**22 + 1  # above any pid_max: no such process
    for name in (f"refagent-{dead}-a", f"refagent-{dead}-b", f"refagent-{os.getpid()}-c", "refagent-x", "other"):
        (base / name).mkdir(parents=True)
    (base / f"refagent-{dead}-b" / "inside").mkdir()  # still holds a process
    cgroups.remove_stale([str(base)])
    assert sorted(p.name for p in base.iterdir()) == sorted(
        [
            f"refagent-{dead}-b",  # not empty yet: the next call takes it
            f"refagent-{os.getpid()}-c",  # its launcher lives (it may not have moved in yet)
            "refagent-x",
            "other",
        ]
    )


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "no namespaces"])
async def test_a_command_that_ignores_sigterm_has_ended_when_its_call_returns(tmp_path: Path, namespaces: bool) -> None:
    """Out of time, a command that ignores SIGTERM, with a child in a session of its own that ignores it
    too: the launcher kills all of it after its grace, before the agent's SIGKILL of the launcher, so when
    the call returns nothing of it runs (its session's /tmp can go)."""
    marker = f"4{os.getpid() % 10000:04d}"
    support = SUPPORT if namespaces else SUPPORT.without(["namespaces"])
    confinement = Confinement([str(tmp_path)], support)
    command = f"trap '' TERM; setsid sh -c \"trap '' TERM; exec sleep {marker}.1\" & sleep {marker}.2; sleep 1"
    try:
        result = await LocalTerminals(confinement=confinement).run(command, str(tmp_path), 0.5)
    finally:
        confinement.close()
    assert result.timed_out
    assert survivors(marker) == []  # at once: no waiting for a teardown


async def test_the_sessions_tmp_is_bounded_as_a_whole_and_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's /tmp is a tmpfs its holder keeps (8 MiB here): a command that fills it gets ENOSPC,
    the next command still sees what an earlier one left, and the holder is gone once the session is."""
    from refagent.sandbox.confine import private_tmp

    total = memory_total()
    assert total is not None
    monkeypatch.setattr(private_tmp, "TMP_SHARE", (8 << 20) / total)
    confinement = Confinement([str(tmp_path)], SUPPORT)
    terminals = LocalTerminals(confinement=confinement)
    try:
        kept = await terminals.run("echo kept > /tmp/kept; df -k /tmp | tail -1", str(tmp_path), 30)
        full = await terminals.run("head -c 20000000 /dev/zero > /tmp/big; echo exit $?", str(tmp_path), 30)
        after = await terminals.run("rm -f /tmp/big; cat /tmp/kept", str(tmp_path), 30)
        holder = confinement.tmp.holder()
    finally:
        confinement.close()
    assert kept.output.split()[:2] == ["tmpfs", "8192"], kept.output  # 8 MiB, in KiB
    assert "No space left on device" in full.output, full.output
    assert "exit 1" in full.output
    assert after.output == "kept\n"
    assert holder is not None
    assert not alive(holder)


async def test_a_command_that_cannot_join_the_sessions_tmp_still_runs_confined(tmp_path: Path) -> None:
    """An editor's terminal that cannot see the holder (another PID namespace): the command runs, as
    confined as ever, with the session's directory as its /tmp, and says so."""
    confinement = Confinement([str(tmp_path)], SUPPORT)
    try:
        argv = confinement.argv(["/bin/sh", "-c", "echo ran; touch /etc/refagent-x || echo refused"], "workspace")
        gone_pid = 2**22 + 7  # above any pid_max: no such process
        argv[argv.index("--tmp-in") + 1] = str(gone_pid)
        done = await anyio.run_process(argv, check=False)
    finally:
        confinement.close()
    assert done.stdout.decode() == "ran\nrefused\n"
    assert "this command's /tmp is the session's directory" in done.stderr.decode()
