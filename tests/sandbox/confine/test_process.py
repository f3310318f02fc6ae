"""Local commands (refagent.sandbox.confine.process) with real processes."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.errors import ToolError
from refagent.sandbox.confine.descendants import start_time
from refagent.sandbox.confine.process import LocalTerminals, ResourceLimits, is_secret_name, scrub_env
from tests.support.procs import alive

pytestmark = pytest.mark.anyio

BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent-home"}


def terminals(**options: Any) -> LocalTerminals:
    options.setdefault("env", BASE_ENV)
    options.setdefault("kill_grace", 0.5)
    return LocalTerminals(**options)


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids a test started that could outlive it if the code under test is wrong: killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_exit_code_and_merged_output_in_order(tmp_path: Path) -> None:
    result = await terminals().run("echo out; echo err >&2; echo out2; exit 3", str(tmp_path), 10)
    assert (result.output, result.exit_code, result.signal) == ("out\nerr\nout2\n", 3, None)
    assert not result.truncated
    assert not result.timed_out


async def test_runs_in_the_given_directory_with_bash(tmp_path: Path) -> None:
    result = await terminals().run('pwd; [[ -n "$BASH_VERSION" ]] && echo bash', str(tmp_path), 10)
    assert result.output == f"{tmp_path}\nbash\n"


async def test_killed_by_a_signal_reports_its_name(tmp_path: Path) -> None:
    result = await terminals().run("kill -TERM $$", str(tmp_path), 10)
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGTERM", False)


async def test_output_keeps_head_and_tail(tmp_path: Path) -> None:
    command = "for i in $(seq 1 2000); do echo line$i; done"
    result = await terminals(output_limit=200).run(command, str(tmp_path), 10)
    assert result.truncated
    head, _, tail = result.output.partition("\n[... ")
    assert head.startswith("line1\nline2\n")
    assert tail.endswith("line1999\nline2000\n")
    total = sum(len(f"line{i}\n") for i in range(1, 2001))
    assert f"{total - 200} bytes omitted ...]" in result.output


async def test_huge_output_costs_no_memory_and_cuts_characters_cleanly(tmp_path: Path) -> None:
    result = await terminals(output_limit=11).run("yes é | head -c 20000000", str(tmp_path), 30)
    assert result.truncated
    assert "[... 19999989 bytes omitted ...]" in result.output
    assert "\ufffd" not in result.output  # a character cut in two is dropped, not garbled


async def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    result = await terminals().run(r"printf 'a\377b'", str(tmp_path), 10)
    assert result.output == "a\ufffdb"


async def test_signals_are_not_left_ignored(tmp_path: Path) -> None:
    # The rlimit launcher is Python, which ignores SIGPIPE and SIGXFSZ; the command must not inherit that.
    # (Only these two: whatever else the environment that started the tests ignores is inherited.)
    result = await terminals().run("grep SigIgn /proc/self/status; yes | head -n 2", str(tmp_path), 10)
    mask_line, *rest = result.output.splitlines()
    ignored = int(mask_line.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))
    assert rest == ["y", "y"]


async def test_stdin_is_closed(tmp_path: Path) -> None:
    with anyio.fail_after(5):
        result = await terminals().run('cat; read line; echo "read=$?"', str(tmp_path), 30)
    assert result.output == "read=1\n"


async def test_time_limit_kills_the_whole_group(tmp_path: Path, strays: list[int]) -> None:
    command = "sleep 100 & echo $!; sleep 100"
    with anyio.fail_after(5):
        result = await terminals().run(command, str(tmp_path), 0.3)
    grandchild = int(result.output.split()[0])
    strays.append(grandchild)
    assert result.timed_out
    assert result.signal == "SIGTERM"
    assert not alive(grandchild)


@pytest.mark.slow
async def test_time_limit_kills_what_ignores_sigterm(tmp_path: Path, strays: list[int]) -> None:
    command = "trap '' TERM; (trap '' TERM; sleep 100) & echo $!; sleep 100"
    with anyio.fail_after(5):
        result = await terminals(kill_grace=0.3).run(command, str(tmp_path), 0.3)
    grandchild = int(result.output.split()[0])
    strays.append(grandchild)
    assert (result.timed_out, result.signal) == (True, "SIGKILL")
    assert not alive(grandchild)


def read_fifo(path: Path) -> str:
    with open(path) as fifo:  # blocks until the command has written and closed it
        return fifo.read()


async def test_cancellation_kills_the_whole_group(tmp_path: Path, strays: list[int]) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    command = f"sleep 100 & echo $! > {fifo}; sleep 100"
    runner = terminals()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(runner.run, command, str(tmp_path), 60)
            grandchild = int(await anyio.to_thread.run_sync(read_fifo, fifo))
            strays.append(grandchild)
            assert alive(grandchild)
            started = start_time(grandchild)
            tasks.cancel_scope.cancel()
    # Gone (its pid, on a busy machine, may be another process's already: that one started later).
    assert not alive(grandchild) or start_time(grandchild) != started


async def test_background_jobs_do_not_outlive_the_command(tmp_path: Path, strays: list[int]) -> None:
    with anyio.fail_after(5):  # the job holds the output pipe: without the group kill this would hang
        result = await terminals().run("sleep 100 & echo $!", str(tmp_path), 60)
    grandchild = int(result.output.split()[0])
    strays.append(grandchild)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert not alive(grandchild)


async def test_a_process_that_left_the_group_cannot_hold_the_output_open(tmp_path: Path, strays: list[int]) -> None:
    # setsid escapes the group (only a cgroup could follow it); the output is read for drain_seconds only.
    with anyio.fail_after(5):
        result = await terminals(drain_seconds=0.2).run("setsid sleep 30 & echo $!", str(tmp_path), 60)
    strays.append(int(result.output.split()[0]))
    assert result.exit_code == 0


async def test_credentials_are_not_passed_on(tmp_path: Path) -> None:
    env = {
        **BASE_ENV,
        "OPENAI_API_KEY": "sk-model-key",
        "OPENAI_BASE_URL": "https://user:pw@llm.example/v1",
        "ANTHROPIC_API_KEY": "sk-ant",
        "REFAGENT_CONFIG": "/x",
        "GITHUB_TOKEN": "ghp",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "PGPASSWORD": "pg",
        "TOKENIZERS_PARALLELISM": "false",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
        "KEEP_ME_TOKEN": "allowed",
    }
    result = await terminals(env=env, keep_env=["KEEP_ME_TOKEN"]).run("env", str(tmp_path), 10)
    names = {line.split("=", 1)[0] for line in result.output.splitlines()}
    assert {"PATH", "HOME", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "KEEP_ME_TOKEN"} <= names
    for secret in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "REFAGENT_CONFIG", "GITHUB_TOKEN"):
        assert secret not in names
    assert "sk-" not in result.output
    assert "LC_CTYPE" not in names  # the rlimit launcher (Python) must not add its locale coercion


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("OPENAI_ORG_ID", True),
        ("ANTHROPIC_AUTH_TOKEN", True),
        ("REFAGENT_LOG", True),
        ("GH_TOKEN", True),
        ("HF_TOKEN", True),
        ("NPM_TOKENS", True),
        ("MY_SERVICE_API_KEY", True),
        ("STRIPE_KEY", True),
        ("DB_PASSWORD", True),
        ("client_secret", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("HOME", False),
        ("SSH_AUTH_SOCK", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYMAP", False),
        ("LANG", False),
        ("VIRTUAL_ENV", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_scrub_env_keeps_exceptions() -> None:
    assert scrub_env({"A_TOKEN": "1", "B": "2", "C_TOKEN": "3"}, keep=["C_TOKEN"]) == {"B": "2", "C_TOKEN": "3"}


async def test_resource_limits_are_applied(tmp_path: Path) -> None:
    limits = ResourceLimits(file_size=4096, cpu_factor=2.0, min_cpu_seconds=5)
    command = (
        "python3 -c 'import resource as r; print(*(r.getrlimit(getattr(r, n)) for n in "
        '("RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_CORE")))\'; '
        f"head -c 10000 /dev/zero > {tmp_path}/big; echo status=$?"
    )
    result = await terminals(limits=limits).run(command, str(tmp_path), 10)
    lines = result.output.splitlines()
    assert lines[0] == "(4096, 4096) (20, 20) (0, 0)"
    assert lines[-1] == f"status={128 + signal.SIGXFSZ}"  # head was killed by SIGXFSZ
    assert (tmp_path / "big").stat().st_size == 4096


async def test_default_limits_leave_normal_tools_alone(tmp_path: Path) -> None:
    command = (
        "git init -q repo && cd repo && echo x > f && git add f && "
        "git -c user.name=t -c user.email=t@t commit -qm m && git log --oneline | wc -l && "
        "python3 -c 'import concurrent.futures as f; print(sum(f.ThreadPoolExecutor(32).map(abs, range(100))))'"
    )
    result = await terminals().run(command, str(tmp_path), 30)
    assert (result.exit_code, result.output) == (0, "1\n4950\n")


async def test_without_limits_the_shell_runs_directly(tmp_path: Path) -> None:
    none = ResourceLimits(cpu_factor=None, file_size=None, core_size=None, process_headroom=None)
    result = await terminals(limits=none, shell="/bin/sh").run("echo $0", str(tmp_path), 10)
    assert result.output == "/bin/sh\n"


async def test_bad_arguments_are_tool_errors(tmp_path: Path) -> None:
    runner = terminals()
    with pytest.raises(ToolError, match="does not exist"):
        await runner.run("true", str(tmp_path / "missing"), 10)
    with pytest.raises(ToolError, match="positive"):
        await runner.run("true", str(tmp_path), 0)
    with pytest.raises(ToolError, match="NUL"):
        await runner.run("echo a\x00b", str(tmp_path), 10)
