"""A whole scripted session with the real tools and sandbox: the model plans, reads, greps, edits with
a diff, runs the tests and updates its plan; the editor sees each step and approves the changes. Run
against both backends: the local disk and processes, and the editor's fs and terminals."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, allow_once, connect
from refagent.testing.terminals import FakeTerminalHost

pytestmark = pytest.mark.anyio

BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('tests passed')\n"


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


def plan(*statuses: str) -> list[dict[str, str]]:
    steps = ["Find the bug", "Fix it", "Run the tests"]
    return [{"content": s, "status": st, "priority": "high"} for s, st in zip(steps, statuses, strict=True)]


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            [*text("Let me look."), call(1, "update_plan", entries=plan("in_progress", "pending", "pending"))],
            [call(2, "grep", pattern="def add"), call(3, "read_file", path="calc.py")],
            [call(4, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")],
            [call(5, "run_command", command=f"{sys.executable} test_calc.py")],
            [call(6, "update_plan", entries=plan("completed", "completed", "completed"))],
            text("Fixed: `add` subtracted instead of adding. The tests pass."),
        ]
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text(BUGGY)
    (tmp_path / "test_calc.py").write_text(TEST)
    return tmp_path


@pytest.mark.parametrize("backend", ["local", "editor"])
async def test_fix_a_bug_end_to_end(project: Path, backend: str, check: Any) -> None:
    model = script()
    async with FakeTerminalHost() as host:
        client = FakeClient(permission=allow_once, extra=host.handlers(), save=True)
        capabilities: dict[str, Any] = {}
        if backend == "editor":
            client.files[str(project / "calc.py")] = BUGGY
            capabilities = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
        async with connect(Settings(make_model=lambda p: model), client=client, check=check) as editor:
            await editor.initialize(capabilities)
            sid = await editor.new_session(str(project))
            assert await editor.prompt(sid, "The tests fail. Fix the bug.") == {"stopReason": "end_turn"}
            updates = editor.updates(sid)
        assert host.live == []

    # the plan went out complete, twice
    plans = [u["entries"] for u in updates if u["sessionUpdate"] == "plan"]
    assert [[e["status"] for e in p] for p in plans] == [
        ["in_progress", "pending", "pending"],
        ["completed", "completed", "completed"],
    ]
    # each tool call was announced with a kind and ended completed
    calls = {u["toolCallId"]: u for u in updates if u["sessionUpdate"] == "tool_call"}
    assert [c["kind"] for c in calls.values()] == ["search", "read", "edit", "execute"]
    final = {u["toolCallId"]: u["status"] for u in updates if u.get("status") in ("completed", "failed")}
    assert set(final.values()) == {"completed"}, final
    # the edit carried the whole file before and after, and the read located the file
    edit_id = next(i for i, c in calls.items() if c["kind"] == "edit")
    edit_content = [c for u in updates if u.get("toolCallId") == edit_id for c in u.get("content") or []]
    diffs = [c for c in edit_content if c["type"] == "diff"]
    assert diffs[-1] == {
        "type": "diff",
        "path": str(project / "calc.py"),
        "oldText": BUGGY,
        "newText": BUGGY.replace("a - b", "a + b"),
    }
    read_id = next(i for i, c in calls.items() if c["kind"] == "read")
    locations = [loc for u in updates if u.get("toolCallId") == read_id for loc in u.get("locations") or []]
    assert locations
    assert locations[0]["path"] == str(project / "calc.py")
    # only the edit and the command asked
    assert [r["toolCall"]["kind"] for r in client.permission_requests] == ["edit", "execute"]
    shown = client.permission_requests[1]["toolCall"]["content"][0]["content"]["text"]
    assert "test_calc.py" in shown
    assert f"Working directory: {project}" in shown
    # the fix landed where the backend keeps files, and the tests passed
    fixed = client.files[str(project / "calc.py")] if backend == "editor" else (project / "calc.py").read_text()
    assert fixed == BUGGY.replace("a - b", "a + b")
    results = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert "tests passed" in results[-2]["content"]
    if backend == "editor":
        run_id = next(i for i, c in calls.items() if c["kind"] == "execute")
        embedded = [c for u in updates if u.get("toolCallId") == run_id for c in u.get("content") or []]
        assert {"type": "terminal", "terminalId": "term_1"} in embedded
