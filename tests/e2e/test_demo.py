"""The demo: ``make demo``'s entry point end to end, and the scripted demo model it plays by default.

The end-to-end tests run ``python -m refagent.client.demo`` (what ``make demo`` runs, without make and the
virtual environment) and check what the user would see, and that the bug is really fixed: the example
project's tests pass afterwards. The model tests drive the demo model through a real agent, the real tools
and sandbox (in memory, no pipes), including the ways a session can go off script.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refagent.client.demo import COPY_IGNORES, default_project
from refagent.llm.demo import DemoModel, demo_profile
from refagent.llm.protocol import ModelRequest, TextDelta, ToolCallRequest
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, PermissionPolicy, allow_once, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.transcript import Transcript
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env

pytestmark = pytest.mark.anyio

DEMO_PROJECT = default_project()
BUG = "if quantity > BULK_QUANTITY:"
FIX = "if quantity >= BULK_QUANTITY:"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(DEMO_PROJECT, copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def project_tests(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-B", "-m", "unittest"], cwd=project, capture_output=True, text=True, timeout=60, check=False
    )


def pricing(project: Path) -> str:
    return (project / "shop" / "pricing.py").read_text()


# -- the demo, as `make demo` runs it ---------------------------------------------------------------


def run_demo(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    workdir, transcript = tmp_path / "work", tmp_path / "wire.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "refagent.client.demo", "--workdir", str(workdir), "--transcript", str(transcript)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result, workdir / "demo-project", transcript


def validate(transcript: Path) -> Transcript:
    return checked_wire(transcript.read_text().splitlines())


@pytest.mark.slow
def test_refagent_demo_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """``refagent demo | head -3``: the reader leaves after three lines; the demo stops the agent and exits
    141, with no traceback on stderr, whatever it was drawing."""
    env = agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0")
    command = [sys.executable, "-m", "refagent", "demo", "--workdir", str(tmp_path / "work")]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        assert demo.stdout is not None
        assert demo.stderr is not None
        lines = [demo.stdout.readline() for _ in range(3)]
        demo.stdout.close()
        stderr = demo.stderr.read().decode()
        code = demo.wait(timeout=60)
    assert lines[0].startswith("━━ refagent demo".encode())
    assert code == 141, stderr
    assert "Traceback" not in stderr
    assert "BrokenPipe" not in stderr


@pytest.mark.slow
def test_the_demo_fixes_the_bug_in_front_of_the_user(tmp_path: Path) -> None:
    original = pricing(DEMO_PROJECT)
    result, copy, transcript = run_demo(tmp_path, agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0"))
    shown = result.stdout
    assert result.returncode == 0, shown + result.stderr

    # which model plays, said first
    assert "built-in SCRIPTED demo model" in shown.split("> The tests fail")[0]
    assert "model: Built-in demo model (scripted)" in shown
    # the plan, the calls with their statuses, the failing test, the diff, the permission prompts, the summary
    assert "Plan\n  ▸ Run the tests and read the failure" in shown
    assert "● Run `python3 -m unittest` (execute)" in shown or "-m unittest` (execute)" in shown
    assert "FAIL: test_discount_starts_at_the_bulk_quantity" in shown
    assert "● Search for `def line_total` (search)" in shown
    assert "● Read shop/pricing.py (read)" in shown
    assert f"-    {BUG}\n" in shown
    assert f"+    {FIX}\n" in shown
    assert "? Permission requested: Edit shop/pricing.py (edit)" in shown
    assert shown.count("→ Allow (auto-approved: the demo client approves") == 3
    assert "✓ completed" in shown
    assert "✗ failed" in shown  # the first test run
    assert "Plan\n  ✓ Run the tests and read the failure\n  ✓ Find the code behind the failing test\n" in shown
    assert "Fixed. In `shop/pricing.py`" in shown
    assert "[stop reason: end_turn]" in shown
    assert "✓ The bug is fixed: the project's tests pass." in shown

    # and it is true: the copy is fixed and its tests pass; the example itself still has its bug
    assert FIX in pricing(copy)
    assert project_tests(copy).returncode == 0
    assert pricing(DEMO_PROJECT) == original
    assert not (copy / "ruff.toml").exists()
    # every message the agent sent was valid ACP
    assert len(validate(transcript).sent_by("agent")) > 20


@pytest.mark.slow
def test_with_a_model_configured_the_demo_runs_it(tmp_path: Path) -> None:
    fix = ToolCall("edit_file", {"path": "shop/pricing.py", "old_string": BUG, "new_string": FIX})
    turns = [Turn(text="Let me fix the comparison.", tool_calls=[fix]), Turn(text="Fixed the off-by-one.")]
    with ScriptedOpenAIServer(turns, api_key="sk-demo") as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-demo")
        result, copy, _ = run_demo(tmp_path, env)
        asked = server.chat_requests[0].body
    shown = result.stdout
    assert result.returncode == 0, shown + result.stderr
    assert "A REAL model plays the session" in shown
    assert "SCRIPTED" not in shown
    assert "Fixed the off-by-one." in shown
    assert "python3 -m unittest" in asked["messages"][-1]["content"]  # the same task, on the same project
    assert project_tests(copy).returncode == 0


# -- the demo model ---------------------------------------------------------------------------------


async def play(project: Path, check: Any, permission: PermissionPolicy = allow_once) -> tuple[Any, DemoModel]:
    model = DemoModel(command=f"{sys.executable} -B -m unittest")
    client = FakeClient(permission=permission)
    async with connect(
        Settings(profiles=[demo_profile()], make_model=lambda p: model), client=client, check=check
    ) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "The tests fail. Fix the bug.") == {"stopReason": "end_turn"}
        return editor, model


def refuse(kind: str) -> PermissionPolicy:
    """Allow everything but calls of ``kind``."""

    async def policy(params: dict[str, Any]) -> dict[str, Any]:
        wanted = "reject_once" if params["toolCall"]["kind"] == kind else "allow_once"
        chosen = next(o for o in params["options"] if o["kind"] == wanted)
        return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}

    return policy


def calls(editor: Any) -> list[str]:
    return [u["kind"] for u in editor.updates() if u["sessionUpdate"] == "tool_call"]


@pytest.mark.slow
async def test_demo_model_plays_the_whole_session(project: Path, check: Any) -> None:
    editor, _ = await play(project, check)
    assert FIX in pricing(project)
    assert project_tests(project).returncode == 0
    assert calls(editor) == ["execute", "search", "read", "edit", "execute"]
    assert [r["toolCall"]["kind"] for r in editor.client.permission_requests] == ["execute", "edit", "execute"]
    plans = [[e["status"] for e in u["entries"]] for u in editor.updates() if u["sessionUpdate"] == "plan"]
    assert plans[0] == ["in_progress", "pending", "pending", "pending"]
    assert plans[-1] == ["completed"] * 4
    assert editor.text().endswith("and all 7 tests pass now.")
    assert editor.text(kind="agent_thought_chunk").startswith("The user says the tests fail.")


@pytest.mark.slow
async def test_a_declined_edit_leaves_the_file_and_says_how_to_fix_it(project: Path, check: Any) -> None:
    editor, _ = await play(project, check, refuse("edit"))
    assert BUG in pricing(project)
    assert calls(editor) == ["execute", "search", "read", "edit"]
    assert editor.text().endswith(f"The fix is to replace `{BUG}` with `{FIX}`.")


@pytest.mark.slow
async def test_refused_test_runs_do_not_stop_the_fix(project: Path, check: Any) -> None:
    editor, _ = await play(project, check, refuse("execute"))
    assert FIX in pricing(project)
    assert "I could not run the tests (you declined it)." in editor.text()
    assert editor.text().endswith("The fix is in place, but I could not run the tests (you declined it).")


@pytest.mark.slow
async def test_a_fixed_project_needs_nothing(project: Path, check: Any) -> None:
    (project / "shop" / "pricing.py").write_text(pricing(project).replace(BUG, FIX))
    editor, _ = await play(project, check)
    assert calls(editor) == ["execute"]
    assert editor.text().endswith("All 7 tests pass already: there is nothing to fix.")


async def test_another_project_gets_an_honest_answer(tmp_path: Path, check: Any) -> None:
    editor, _ = await play(tmp_path, check)
    assert "I found no tests to run here" in editor.text()


def test_decisions_come_from_the_results_not_the_ids() -> None:
    """Whatever the call ids and with a note from the file watcher in between, the next step follows
    from what the calls returned."""
    failing = (
        "F\n======\nFAIL: test_total (tests.test_x.T.test_total)\n------\nTraceback (most recent call last):\n"
        '  File "/p/tests/test_x.py", line 9, in test_total\n    self.assertEqual(compute_total(3), 6)\n'
        "AssertionError: 5 != 6\n\nRan 1 test in 0.001s\n\nFAILED (failures=1)\n\nExit code: 1"
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are refagent."},
        {"role": "user", "content": "fix it"},
        _assistant("x-17", "run_command", command="python3 -m unittest"),
        {"role": "tool", "tool_call_id": "x-17", "content": failing},
        {"role": "user", "content": "<system-reminder>These files changed: a.py</system-reminder>"},
    ]
    response = DemoModel(command="python3 -m unittest").respond(ModelRequest(messages))
    [grep] = [e for e in response if isinstance(e, ToolCallRequest) and e.name == "grep"]
    assert json.loads(grep.arguments)["pattern"] == "def compute_total"
    said = "".join(e.text for e in response if isinstance(e, TextDelta))
    assert "`test_total` with `AssertionError: 5 != 6`" in said


def _assistant(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }
