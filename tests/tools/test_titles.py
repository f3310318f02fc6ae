"""What the agent tells the editor in words built from a model's strings (a tool call's title, the name of a
permission option, a plan's entries) is one line that holds no control character: an ESC, a carriage
return or a C1 CSI the model put in a command or a path shows as ``\\x1b``, ``\\r``, ``\\x9b``
(:func:`refagent.acp.text.one_line`), so that no editor or terminal client obeys it. On the wire, every
message checked against the ACP schema.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, ClassVar

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import FakeClient, allow_once, connect
from refagent.tools.args import shown
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.plan import UpdatePlan, validate_entries
from tests.support.tool_fakes import bare_sandbox

pytestmark = pytest.mark.anyio

HOSTILE = "ls\x1b]52;c;cm0gLXJmIH4=\x07\r\x1b[2K\x9b1A\nrm -rf ~\x08\x7f"
"""A clipboard write, a carriage return and an erased line, a C1 cursor move, a line break, backspace, DEL."""
SHOWN = "ls\\x1b]52;c;cm0gLXJmIH4=\\x07\\r\\x1b[2K\\x9b1A rm -rf ~\\x08\\x7f"


class RawTitles(BaseTool):
    """A tool that puts the model's string into its titles and its permission label as it is, as a careless
    custom or MCP tool might: the runner must make them safe, not the tool."""

    name = "run_command"
    description = "run"
    kind = "execute"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
        "additionalProperties": False,
    }

    def title(self, args: dict[str, Any]) -> str:
        return f"Run `{args['command']}`"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        command = args["command"]

        async def execute() -> ToolResult:
            return ToolResult("ran")

        return Plan(
            title=f"Run `{command}` (planned)",
            execute=execute,
            mutating=True,
            permission_key="command:" + command,
            permission_label=f"`{command}`",
        )


def call(name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"model_{name}", name=name, arguments=json.dumps(args))


def settings(*responses: Any) -> Settings:
    model = ScriptedModel(list(responses))
    return Settings(
        make_model=lambda profile: model,
        make_sandbox=OwnSandboxes(bare_sandbox),
        tools=lambda: [RawTitles(), UpdatePlan()],
    )


def controls(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc"]


async def test_titles_and_option_names_on_the_wire_have_no_control_characters(check: Any) -> None:
    client = FakeClient(permission=allow_once)
    responses = [[call("run_command", command=HOSTILE)], [call(f"no\x1b[2Jsuch\rtool{HOSTILE}")], text("done")]
    async with connect(settings(*responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        titles = [u["title"] for u in editor.updates(sid) if "title" in u and "toolCallId" in u]
    assert titles == [
        f"Run `{SHOWN}`",
        f"Run `{SHOWN}` (planned)",
        f"Unknown tool no\\x1b[2Jsuch\\rtool{SHOWN}",
    ]
    [asked] = client.permission_requests
    assert asked["toolCall"]["title"] == f"Run `{SHOWN}` (planned)"
    names = [option["name"] for option in asked["options"]]
    assert f"Always allow `{SHOWN}`" in names
    assert not [name for name in [*titles, asked["toolCall"]["title"], *names] if controls(name)]


async def test_plan_entries_are_one_line_and_visible(check: Any) -> None:
    entries = [{"content": f"  step\r\n one {HOSTILE}  ", "status": "pending", "priority": "high"}]
    async with connect(settings([call("update_plan", entries=entries)], text("ok")), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "plan it")
        [plan] = [u for u in editor.updates(sid) if u["sessionUpdate"] == "plan"]
    assert plan["entries"][0]["content"] == f"step one {SHOWN}"


def test_a_model_string_in_a_title_is_one_short_visible_line() -> None:
    assert shown(f"  {HOSTILE}\t ") == "ls\\x1b]52;c;cm0gLXJmIH4=\\x07\\r\\x1b[2K\\x9b1A rm -rf ~\\x08\\x7f"
    short = shown("a\x1b" * 40, limit=20)  # cut after it is made visible: the limit is what is shown
    assert short.startswith("a\\x1ba\\x1b")
    assert short.endswith("…")
    assert len(short) == 20
    assert validate_entries([{"content": "\x1b[8mhidden", "status": "completed", "priority": "low"}]) == [
        {"content": "\\x1b[8mhidden", "status": "completed", "priority": "low"}
    ]
