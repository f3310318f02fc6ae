"""The tool set as the model and the runner see it: names, kinds and schemas (the README's tool list), and
update_plan, which talks to the editor directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.tools.plan import UpdatePlan, validate_entries
from refagent.tools.registry import by_name, default_tools
from refagent.tools.runner import parse_arguments
from tests.support.tool_fakes import make_ctx, sent

pytestmark = pytest.mark.anyio

CONTRACT = {
    "read_file": ("read", {"path"}, {"offset", "limit"}),
    "glob": ("search", {"pattern"}, {"path"}),
    "grep": ("search", {"pattern"}, {"path", "glob"}),
    "fetch": ("fetch", {"url"}, {"max_chars", "offset"}),
    "edit_file": ("edit", {"path", "old_string", "new_string"}, {"replace_all"}),
    "write_file": ("edit", {"path", "content"}, set()),
    "apply_patch": ("edit", {"patch"}, set()),
    "delete_path": ("delete", {"path"}, {"recursive"}),
    "move_path": ("move", {"source", "destination"}, set()),
    "run_command": ("execute", {"command"}, {"timeout_seconds", "background"}),
    "command_output": ("read", set(), {"job_id", "wait_seconds"}),
    "stop_command": ("execute", {"job_id"}, set()),
    "update_plan": ("think", {"entries"}, set()),
    "ask_user": ("other", {"question"}, {"choices", "allow_other"}),
}


def test_the_tool_set_matches_the_design() -> None:
    tools = default_tools()
    assert [t.name for t in tools] == list(CONTRACT)
    for tool in tools:
        kind, required, optional = CONTRACT[tool.name]
        assert tool.kind == kind
        schema = tool.parameters
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) == required
        assert required | optional <= set(schema["properties"])
        assert tool.description
        assert len(tool.description) < 700
        assert tool.silent == (tool.name == "update_plan")


def test_by_name() -> None:
    named = by_name()
    assert named["grep"].name == "grep"
    tools = default_tools()
    with pytest.raises(ValueError, match=r"two tools"):
        by_name([*tools, tools[0]])


def test_titles_need_no_io_and_survive_odd_arguments() -> None:
    for tool in default_tools():
        assert isinstance(tool.title({}), str)
    named = by_name()
    assert named["read_file"].title({"path": "src/app.py"}) == "Read src/app.py"
    assert named["edit_file"].title({"path": "src/app.py"}) == "Edit src/app.py"
    assert named["run_command"].title({"command": "pytest -q"}) == "Run `pytest -q`"
    assert named["grep"].title({"pattern": "foo", "path": "src"}) == "Search for `foo` in src"
    assert named["glob"].title({"pattern": "**/*.py"}) == "Find `**/*.py`"
    assert named["delete_path"].title({"path": "x"}) == "Delete x"
    assert named["move_path"].title({"source": "a", "destination": "b"}) == "Move a to b"
    assert named["fetch"].title({"url": "https://example.com/a\nb"}) == "Fetch https://example.com/a b"


# -- update_plan ----------------------------------------------------------------------------------

ENTRIES = [
    {"content": "Read the code", "status": "completed", "priority": "high"},
    {"content": "Fix the bug", "status": "in_progress", "priority": "high"},
    {"content": "Run the tests", "status": "pending", "priority": "medium"},
]


async def test_update_plan_sends_the_whole_plan(tmp_path: Path) -> None:
    ctx = make_ctx(str(tmp_path))
    args = parse_arguments(json.dumps({"entries": ENTRIES}), UpdatePlan.parameters)
    plan = await UpdatePlan().prepare(args, ctx)
    assert not plan.mutating
    assert not plan.outside
    result = await plan.execute()
    assert sent(ctx) == [{"sessionUpdate": "plan", "entries": ENTRIES}]
    assert result.output == "Plan updated: 3 steps (1 completed, 1 in progress, 1 pending)."


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("not a list", "must be a list"),
        (["a step"], r"entries\[0\] must be an object"),
        ([{"content": "x", "status": "done", "priority": "high"}], r"entries\[0\].status must be one of"),
        ([{"content": "x", "status": "pending", "priority": "urgent"}], r"priority must be one of"),
        ([{"content": "x", "status": "pending"}], r"priority must be one of .* got None"),
        ([{"content": " ", "status": "pending", "priority": "low"}], r"content must be a non-empty string"),
        ([{"content": "x", "status": "pending", "priority": "low", "id": 1}], r"unknown field\(s\): id"),
        ([{"content": "x" * 600, "status": "pending", "priority": "low"}], "longer than"),
        ([{"content": "x", "status": "pending", "priority": "low"}] * 51, "at most 50"),
    ],
)
def test_plan_entries_are_validated_strictly(entries: object, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        validate_entries(entries)


def test_an_empty_plan_clears_it() -> None:
    assert validate_entries([]) == []
