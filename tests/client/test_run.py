"""``refagent run``: the terminal client against a real ``refagent`` process (over real pipes).

Most tests run the client in this process (:func:`refagent.client.run.run`, drawing on a string, answering
permission prompts from a list), with the agent on its demo model or on the scripted OpenAI-compatible
server; a few start the ``refagent run`` command itself, for Ctrl-C, ``--json`` and ``--help``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import MethodNotFound
from refagent.client.demo import COPY_IGNORES, default_project
from refagent.client.handler import TerminalClient
from refagent.client.render import Renderer
from refagent.client.run import EXIT_CODES, Outcome, Run, RunOptions, run
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env

pytestmark = pytest.mark.anyio

DEMO_PROJECT = default_project()
AGENT = [sys.executable, "-m", "refagent"]
KEY = "sk-test"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(DEMO_PROJECT, copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def demo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0", PYTHONDONTWRITEBYTECODE="1", **extra)


def server_env(tmp_path: Path, server: ScriptedOpenAIServer, **extra: str) -> dict[str, str]:
    return agent_env(
        tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m", **extra
    )


def answers(*lines: str) -> Any:
    """A ``read_line`` that types ``lines``, then reaches the end of input."""
    pending: Iterator[str] = iter(lines)

    async def read_line() -> str | None:
        return next(pending, None)

    return read_line


async def run_client(
    cwd: Path, env: dict[str, str], *, demo: bool = True, typed: tuple[str, ...] = (), **options: Any
) -> tuple[Outcome, str]:
    out = io.StringIO()
    run_options = RunOptions(
        prompt="The tests fail. Fix the bug.", cwd=str(cwd), agent=[*AGENT, *(["--demo"] if demo else [])], env=env
    )
    for name, value in options.items():
        setattr(run_options, name, value)
    with anyio.fail_after(30):
        outcome = await run(run_options, Renderer(out, cwd=str(cwd)), answers(*typed), handle_signals=False)
    return outcome, out.getvalue()


def buggy(project: Path) -> bool:
    return "quantity > BULK_QUANTITY" in (project / "shop" / "pricing.py").read_text()


# -- permissions ------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_yes_approves_everything_and_the_bug_gets_fixed(project: Path, tmp_path: Path) -> None:
    outcome, shown = await run_client(project, demo_env(tmp_path), yes=True)
    assert outcome.exit_code == 0
    assert outcome.stop_reason == "end_turn"
    assert outcome.model == "Built-in demo model (scripted)"
    assert not buggy(project)
    # One line each (the test run, the edit, the second test run): no menu to choose from.
    assert shown.count("✓ Approved:") == 3
    assert "(Allow, --yes)" in shown
    assert "Permission requested" not in shown
    assert "-    if quantity > BULK_QUANTITY:" in shown
    assert "+    if quantity >= BULK_QUANTITY:" in shown
    assert "[stop reason: end_turn]" in shown


@pytest.mark.slow
async def test_answers_typed_at_the_prompt(project: Path, tmp_path: Path) -> None:
    # y: run the tests; "maybe" is not an answer and is asked again; n: reject the edit
    outcome, shown = await run_client(project, demo_env(tmp_path), typed=("y", "maybe", "n"))
    assert outcome.exit_code == 0
    assert buggy(project)
    assert "Please answer one of: y / a / n / v" in shown
    assert "→ Reject" in shown
    assert "You declined the edit" in shown


@pytest.mark.slow
async def test_always_is_remembered_for_the_session(project: Path, tmp_path: Path) -> None:
    outcome, shown = await run_client(project, demo_env(tmp_path), typed=("a", "y"))
    assert outcome.exit_code == 0
    assert not buggy(project)
    assert shown.count("Permission requested") == 2  # the second test run was allowed by "always"
    assert "→ Always allow `python3 -m unittest` with reporting options" in shown


@pytest.mark.slow
async def test_never_and_end_of_input_reject(project: Path, tmp_path: Path) -> None:
    outcome, shown = await run_client(project, demo_env(tmp_path), typed=("never",))
    assert outcome.exit_code == 6  # the input ended before an answer: the change was not made
    assert buggy(project)
    assert "→ Always reject `python3 -m unittest` with reporting options" in shown
    assert "no answer (end of input)" in shown  # the edit was asked next, and input had ended


@pytest.mark.slow
async def test_read_only_mode_refuses_changes_without_asking(project: Path, tmp_path: Path) -> None:
    outcome, shown = await run_client(project, demo_env(tmp_path), read_only=True)
    assert outcome.exit_code == 0
    assert buggy(project)
    assert "mode: read-only" in shown
    assert "Permission requested" not in shown
    assert "read-only mode" in shown  # what the refused calls said


# -- the transcript and the stop reasons ------------------------------------------------------------


@pytest.mark.slow
async def test_json_transcript_is_the_whole_wire_and_valid_acp(project: Path, tmp_path: Path) -> None:
    transcript_out = io.StringIO()
    outcome, _ = await run_client(project, demo_env(tmp_path), yes=True, transcript=transcript_out)
    assert outcome.exit_code == 0
    transcript = checked_wire(transcript_out.getvalue().splitlines())
    sent = [m.get("method") for m in transcript.sent_by("client") if "method" in m]
    assert sent == ["initialize", "session/new", "session/prompt"]
    capabilities = transcript.sent_by("client")[0]["params"]["clientCapabilities"]
    assert capabilities == {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
    asked = [m for m in transcript.sent_by("agent") if m.get("method") == "session/request_permission"]
    assert len(asked) == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("turns", "extra", "stop"),
    [
        ([Turn(text="cut", finish_reason="length")], {}, "max_tokens"),
        ([Turn(refusal="No.")], {}, "refusal"),
        ([Turn(tool_calls=[ToolCall("glob", {"pattern": "*"})])], {"REFAGENT_MAX_REQUESTS": "1"}, "max_turn_requests"),
    ],
)
async def test_exit_code_reflects_the_stop_reason(
    tmp_path: Path, turns: list[Turn], extra: dict[str, str], stop: str
) -> None:
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        outcome, shown = await run_client(tmp_path, server_env(tmp_path, server, **extra), demo=False)
    assert outcome.stop_reason == stop
    assert outcome.exit_code == EXIT_CODES[stop]
    assert outcome.exit_code not in (0, 1, 2)
    assert f"[stop reason: {stop}]" in shown


class Watching(Renderer):
    """A renderer that says when the agent started talking."""

    def __init__(self, out: io.StringIO) -> None:
        super().__init__(out)
        self.talking = anyio.Event()

    def update(self, update: dict[str, Any]) -> None:
        super().update(update)
        if update.get("sessionUpdate") == "agent_message_chunk":
            self.talking.set()


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
async def test_interrupt_cancels_the_turn_then_quits(tmp_path: Path, presses: int) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.5)
    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        out = io.StringIO()
        renderer = Watching(out)
        options = RunOptions("go", str(tmp_path), AGENT, env=server_env(tmp_path, server))
        the_run = Run(options, renderer, answers(), interactive=False)
        outcome = Outcome(-1)

        async def client() -> None:
            nonlocal outcome
            outcome = await the_run.run()

        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client)
                await renderer.talking.wait()
                for _ in range(presses):
                    await the_run.interrupt()
    assert outcome.exit_code == 130
    assert "Cancelling…" in out.getvalue()
    if presses == 1:
        assert outcome.stop_reason == "cancelled"
        assert "[stop reason: cancelled]" in out.getvalue()
    else:
        assert "Quit." in out.getvalue()


# -- the handler ------------------------------------------------------------------------------------

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
ASK = {"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "Run `make`", "kind": "execute"}, "options": OPTIONS}


async def test_a_pending_question_answers_cancelled_after_session_cancel() -> None:
    typing = anyio.Event()

    async def never_answers() -> str | None:
        typing.set()
        await anyio.sleep_forever()
        return None

    out = io.StringIO()
    client = TerminalClient(Renderer(out), never_answers)
    answer: dict[str, Any] = {}

    async def ask() -> None:
        answer.update(await client.permission(ASK))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await typing.wait()
        client.cancel_prompts()
    assert answer == {"outcome": {"outcome": "cancelled"}}
    assert "→ cancelled" in out.getvalue()
    assert await client.permission(ASK) == {"outcome": {"outcome": "cancelled"}}  # and later ones too


async def test_the_client_offers_nothing_but_answers() -> None:
    client = TerminalClient(Renderer(io.StringIO()), answers(), approve="--yes")
    assert await client.permission(ASK) == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    for method in ("fs/read_text_file", "fs/write_text_file", "terminal/create"):
        with pytest.raises(MethodNotFound):
            await client.handle_request(method, {"sessionId": "s"})


# -- failures ---------------------------------------------------------------------------------------


async def test_an_agent_that_cannot_start_is_a_clear_failure(tmp_path: Path) -> None:
    out = io.StringIO()
    options = RunOptions("go", str(tmp_path), [str(tmp_path / "no-such-agent")])
    outcome = await run(options, Renderer(out), answers(), handle_signals=False)
    assert outcome.exit_code == 1
    assert "cannot start the agent" in out.getvalue()


@pytest.mark.slow
async def test_a_missing_key_says_what_to_set(tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", OPENAI_BASE_URL="https://models.example.com/v1", REFAGENT_MODEL="m")
    outcome, shown = await run_client(tmp_path, env, demo=False)
    assert outcome.exit_code == 1
    assert "OPENAI_API_KEY" in shown


# -- the command ------------------------------------------------------------------------------------


def command(*args: str) -> list[str]:
    return [*AGENT, "run", *args]


@pytest.mark.slow
def test_the_command_json_goes_to_stdout_and_the_session_to_stderr(project: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        command("--demo", "--yes", "--json", "--cwd", str(project), "fix it"),
        env=demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {entry["from"] for entry in lines} == {"client", "agent"}
    assert lines[-1]["message"]["result"] == {"stopReason": "end_turn"}
    assert "✓ Approved: Edit shop/pricing.py (Allow, --yes)" in result.stderr
    assert not buggy(project)


@pytest.mark.slow
def test_ctrl_c_cancels_the_turn(tmp_path: Path) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.5)
    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        client = subprocess.Popen(
            command("--cwd", str(tmp_path), "go"),
            env=server_env(tmp_path, server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 15
        while not server.chat_requests:  # wait until the turn is streaming
            assert time.monotonic() < deadline, "the model was never asked"
            time.sleep(0.02)
        os.kill(client.pid, signal.SIGINT)  # what Ctrl-C does (the agent is in its own process group)
        out, err = client.communicate(timeout=15)
        assert server.wait_for_disconnect(5)
    assert client.returncode == 130, err
    assert "[stop reason: cancelled]" in out


def test_help() -> None:
    top = subprocess.run([*AGENT, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert 'run "TASK"' in top
    assert "--demo" in top
    usage = subprocess.run(command("--help"), capture_output=True, text=True, timeout=30, check=True).stdout
    for flag in ("--yes", "--read-only", "--json", "--cwd", "--model", "--base-url"):
        assert flag in usage
    assert "130 cancelled" in " ".join(usage.split())


@pytest.mark.slow
async def test_the_header_says_which_model_a_named_profile_runs(tmp_path: Path) -> None:
    """A profile's name is the user's ("Work"): the header says the model and the endpoint too."""
    config_file = tmp_path / "config.toml"
    with ScriptedOpenAIServer([Turn(text=["ok"])], api_key=KEY) as server:
        config_file.write_text(
            f'default_profile = "work"\n[profiles.work]\nname = "Work"\nbase_url = "{server.base_url}"\n'
            f'model = "big-model"\napi_key = "{KEY}"\n'
        )
        env = agent_env(tmp_path / "home", REFAGENT_CONFIG=str(config_file))
        outcome, shown = await run_client(tmp_path, env, demo=False)
    assert outcome.exit_code == 0
    assert outcome.model == "Work"
    assert f"model: Work\nbig-model via {server.base_url}\n" in shown
