"""``refagent run``'s input: the prompt from stdin (``-``), permission answers then read at the terminal or,
with none, rejected with a note; Ctrl-C at a permission prompt, which cancels the turn and logs nothing.

The command runs as a person runs it: a subprocess whose controlling terminal is a pseudo-terminal (the test
types on its master side), the session on stderr (``--json``) and the transcript on stdout, every message the
agent sends checked against the ACP schema.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from refagent.client import run as run_module
from refagent.client.demo import COPY_IGNORES, default_project
from refagent.client.run import NO_TERMINAL
from refagent.testing.transcript import Transcript
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env

AGENT = [sys.executable, "-m", "refagent"]
WITH_TERMINAL = (
    "import os, sys\n"
    "os.close(os.open(sys.argv[1], os.O_RDWR))\n"  # a session leader opening a terminal: its controlling one
    "os.execv(sys.executable, [sys.executable, '-m', 'refagent', *sys.argv[2:]])\n"
)
"""Runs refagent with the pseudo-terminal as its controlling terminal, as a shell would (``/dev/tty`` is it,
and Ctrl-C typed there reaches the foreground process group)."""
TASK = "The tests fail. Fix the bug."
LOG_LINE = (" WARNING ", " ERROR ", "Traceback", "Exception ignored")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(default_project(), copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def buggy(project: Path) -> bool:
    return "quantity > BULK_QUANTITY" in (project / "shop" / "pricing.py").read_text()


def checked(stdout: str) -> Transcript:
    return checked_wire(stdout.splitlines())


def prompt_sent(transcript: Transcript) -> str:
    [prompt] = [m for m in transcript.sent_by("client") if m.get("method") == "session/prompt"]
    [block] = prompt["params"]["prompt"]
    return str(block["text"])


class OnTerminal:
    """``refagent run ...`` with a pseudo-terminal as its controlling terminal; stdin the terminal or a pipe,
    stdout and stderr files (a pipe nobody reads while the test types could fill up and block the client)."""

    def __init__(self, args: list[str], env: dict[str, str], files: Path, *, stdin_is_the_terminal: bool) -> None:
        self.master, slave = os.openpty()
        self.stdout = files / "stdout"
        self.stderr = files / "stderr"
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WITH_TERMINAL, os.ttyname(slave), "run", *args],
                stdin=slave if stdin_is_the_terminal else subprocess.PIPE,
                stdout=out,
                stderr=err,
                env={**env, "NO_COLOR": "1"},  # the lines as they read, whatever FORCE_COLOR the runner has
                start_new_session=True,
            )
        os.close(slave)

    def finish(self, timeout: float = 60) -> str:
        """Wait for the exit; the transcript (stdout)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"still running:\n{self.shown()}"
            self._drain()
            time.sleep(0.02)
        return self.stdout.read_text(encoding="utf-8")

    def shown(self) -> str:
        """The session so far (``--json`` draws it on stderr)."""
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, text: str, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.shown().count(text) < count:
            assert self.process.poll() is None, f"exited before showing {text!r}:\n{self.shown()}"
            assert time.monotonic() < deadline, f"never shown: {text!r}:\n{self.shown()}"
            self._drain()
            time.sleep(0.02)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def _drain(self) -> None:  # the terminal's echo of what was typed: read it so it never fills up
        import select

        while select.select([self.master], [], [], 0)[0]:
            try:
                if not os.read(self.master, 4096):
                    return
            except OSError:
                return


@contextmanager
def on_terminal(
    args: list[str], env: dict[str, str], tmp_path: Path, *, stdin_is_the_terminal: bool
) -> Iterator[OnTerminal]:
    terminal = OnTerminal(args, env, tmp_path, stdin_is_the_terminal=stdin_is_the_terminal)
    try:
        yield terminal
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.process.wait()
        os.close(terminal.master)


# -- the prompt from stdin --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_prompt_from_stdin_without_a_terminal_rejects_what_asks(project: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [*AGENT, "run", "--json", "--demo", "--cwd", str(project), "-"],
        input=f"  {TASK}\nIt is in shop/.\n",
        env=agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0", NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,  # no controlling terminal: /dev/tty cannot be opened
    )
    assert result.returncode == 6, result.stderr  # the turn ended, without the change: a script can tell
    transcript = checked(result.stdout)
    assert prompt_sent(transcript) == f"{TASK}\nIt is in shop/."  # all of stdin, its ends trimmed
    asked = [m for m in transcript.sent_by("agent") if m.get("method") == "session/request_permission"]
    assert asked
    assert result.stderr.count(f"→ rejected: {NO_TERMINAL}") == len(asked)
    assert "Allow?" not in result.stderr
    assert f"error: {len(asked)} permission request(s) were rejected: no one could answer them" in result.stderr
    assert buggy(project)


@pytest.mark.slow
def test_a_prompt_from_stdin_asks_at_the_terminal(project: Path, tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0")
    with on_terminal(
        ["--json", "--demo", "--cwd", str(project), "-"], env, tmp_path, stdin_is_the_terminal=False
    ) as terminal:
        assert terminal.process.stdin is not None
        terminal.process.stdin.write(TASK.encode())
        terminal.process.stdin.close()
        for answered in range(1, 4):  # the test run, the edit, the test run again
            terminal.wait_for("Allow?", answered)
            terminal.type("y\r")
        stdout = terminal.finish()
    assert terminal.process.returncode == 0, terminal.shown()
    assert prompt_sent(checked(stdout)) == TASK
    assert terminal.shown().count("→ Allow") == 3
    assert not buggy(project)


# -- Ctrl-C at a permission prompt ------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_at_a_permission_prompt_cancels_the_turn_and_logs_nothing(project: Path, tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0")
    with on_terminal(
        ["--json", "--demo", "--cwd", str(project), TASK], env, tmp_path, stdin_is_the_terminal=True
    ) as terminal:
        terminal.wait_for("Allow?")
        terminal.type("\x03")  # the terminal sends SIGINT to the client's process group, not the agent's
        stdout = terminal.finish()
    shown = terminal.shown()
    assert terminal.process.returncode == 130, shown
    transcript = checked(stdout)
    assert [m["method"] for m in transcript.sent_by("client") if m.get("method") == "session/cancel"] == [
        "session/cancel"
    ]
    assert "→ cancelled" in shown
    assert "[stop reason: cancelled]" in shown
    for sign in LOG_LINE:  # neither side logs: cancelling at a prompt is normal
        assert sign not in shown, shown
    assert buggy(project)


def test_a_ctrl_c_while_the_event_loop_closes_is_still_a_quiet_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second Ctrl-C of a quit can land after the run, as the loop closes: no traceback, exit 130."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module.anyio, "run", interrupted)
    monkeypatch.setattr(run_module, "_log_to_stderr", lambda level: None)  # leave the test runner's logging be
    assert run_module.main(["--cwd", str(tmp_path), "hi"]) == 130
