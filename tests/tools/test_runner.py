"""The tool runner: tool calls on the wire, permissions in every mode, remembered choices, failures and
cancellation. Uses small tools written here, so it tests the runner, not the real tools."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import Hang, ScriptedModel, text
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import FakeClient, allow_once, connect, select
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.runner import ToolRunner
from tests.support.tool_fakes import bare_sandbox

pytestmark = pytest.mark.anyio


class Store:
    """What the fake tools change: a dict, so tests can see what ran."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.ran: list[str] = []


STORE = Store()


class FakeWrite(BaseTool):
    name = "write_file"
    description = "write"
    kind = "edit"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def title(self, args: dict[str, Any]) -> str:
        return f"Write {args['path']}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        path = "/ws/" + args["path"]
        if args["path"].startswith("/"):
            raise ToolError(f"{args['path']} is outside the workspace")
        old = STORE.files.get(path)

        async def execute() -> ToolResult:
            STORE.files[path] = args["content"]
            return ToolResult(
                f"wrote {path}", content=[{"type": "diff", "path": path, "oldText": old, "newText": args["content"]}]
            )

        return Plan(
            title=f"Write {args['path']}",
            execute=execute,
            locations=[{"path": path}],
            preview=[{"type": "diff", "path": path, "oldText": old, "newText": args["content"]}],
            mutating=True,
            permission_key="edit",
            permission_label="edits inside the workspace",
        )


class FakeRun(BaseTool):
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
            if command == "hang":
                await anyio.sleep_forever()
            if command == "crash":
                raise RuntimeError("boom")
            if command == "slow":
                await anyio.sleep(0.35)
            STORE.ran.append(command)
            return ToolResult(f"ran {command}", failed=command == "false")

        return Plan(
            title=f"Run `{command}`",
            execute=execute,
            mutating=True,
            permission_key="command:" + command.split()[0],
            permission_label=f"commands starting with `{command.split()[0]}`",
        )


class FakeRead(BaseTool):
    name = "read_file"
    description = "read"
    kind = "read"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        outside = args["path"].startswith("/")

        async def execute() -> ToolResult:
            return ToolResult(f"contents of {args['path']}")

        return Plan(
            title=f"Read {args['path']}",
            execute=execute,
            outside=outside,
            permission_key="read-outside:/" if outside else "",
            permission_label="reads outside the workspace",
        )


def call(name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"model_{name}", name=name, arguments=json.dumps(args))


def settings(*responses: Any) -> Settings:
    model = ScriptedModel(list(responses))
    return Settings(
        make_model=lambda profile: model,
        make_sandbox=OwnSandboxes(bare_sandbox),
        tools=lambda: [FakeWrite(), FakeRun(), FakeRead()],
    )


@pytest.fixture(autouse=True)
def fresh_store() -> None:
    STORE.files.clear()
    STORE.ran.clear()


def tool_messages(editor: Any, sid: str) -> list[str]:
    return [m["content"] for m in editor.agent.sessions[sid].history if m["role"] == "tool"]


async def test_edit_flow_on_the_wire(check: Any) -> None:
    client = FakeClient(permission=allow_once)
    async with connect(
        settings([call("write_file", path="a.py", content="x = 1\n")], text("done")), client=client, check=check
    ) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "write it") == {"stopReason": "end_turn"}
        kinds = [(u["sessionUpdate"], u.get("status")) for u in editor.updates(sid) if "toolCallId" in u]
        assert kinds == [
            ("tool_call", "pending"),
            ("tool_call_update", None),  # the plan: locations and the diff
            ("tool_call_update", "in_progress"),
            ("tool_call_update", "completed"),
        ]
        done = next(u for u in editor.updates(sid) if u.get("status") == "completed")
        assert done["content"][0] == {"type": "diff", "path": "/ws/a.py", "oldText": None, "newText": "x = 1\n"}
        [asked] = client.permission_requests
        assert asked["toolCall"]["content"][0]["type"] == "diff"
        assert {o["kind"] for o in asked["options"]} == {"allow_once", "allow_always", "reject_once", "reject_always"}
    assert STORE.files == {"/ws/a.py": "x = 1\n"}


async def test_a_long_call_shows_it_is_alive_and_ends_with_its_own_title(
    check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that runs longer than ``alive_after`` says so in its title, with the time so far, every
    ``alive_every``; its last update gives it back its own title. A quick one sends no such update."""
    monkeypatch.setattr(ToolRunner, "alive_after", 0.1)
    monkeypatch.setattr(ToolRunner, "alive_every", 0.1)
    responses = [[call("run_command", command="slow")], [call("run_command", command="quick")], text("ok")]
    async with connect(settings(*responses), client=FakeClient(permission=allow_once), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "go")
        calls = [u for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call_update"]
    titles = [u.get("title") for u in calls if u.get("title")]
    running = [t for t in titles if "(running," in t]
    assert len(running) >= 2
    assert all(t.startswith("Run `slow` (running, ") and t.endswith(" s)") for t in running)
    last = [u for u in calls if u.get("status") == "completed"]
    assert last[0]["title"] == "Run `slow`"  # its own title again
    assert "title" not in last[1]  # the quick call's title never changed


async def test_each_tool_call_carries_the_tools_own_name(check: Any) -> None:
    """ACP's optional ``name`` on ``tool_call``: the tool's name as the model called it; an unknown tool's
    call has no tool to name, one with bad arguments does."""
    responses = [
        [call("write_file", path="a.py", content="x")],
        [call("no_such_tool")],
        [call("write_file")],
        text("ok"),
    ]
    async with connect(settings(*responses), client=FakeClient(permission=allow_once), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "go")
        announced = [u for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
    assert [u.get("name") for u in announced] == ["write_file", None, "write_file"]


async def test_reject_tells_the_model_and_the_turn_goes_on(check: Any) -> None:
    client = FakeClient(permission=select("reject_once"))
    async with connect(
        settings([call("write_file", path="a.py", content="x")], text("ok")), client=client, check=check
    ) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        assert "declined" in tool_messages(editor, sid)[0]
        assert [u["status"] for u in editor.updates(sid) if u.get("status")][-1] == "failed"
    assert STORE.files == {}


async def test_always_allow_is_scoped_to_the_command(check: Any) -> None:
    client = FakeClient(permission=select("allow_always"))
    responses = [
        [call("run_command", command="pytest -q")],
        [call("run_command", command="pytest tests")],
        [call("run_command", command="rm -rf x")],
        text("done"),
    ]
    async with connect(settings(*responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "go")
    # asked for the first pytest, not the second; asked again for rm
    assert [r["toolCall"]["title"] for r in client.permission_requests] == ["Run `pytest -q`", "Run `rm -rf x`"]
    assert STORE.ran == ["pytest -q", "pytest tests", "rm -rf x"]


async def test_always_reject_refuses_without_asking(check: Any) -> None:
    client = FakeClient(permission=select("reject_always"))
    responses = [[call("run_command", command="git push")], [call("run_command", command="git push -f")], text("ok")]
    async with connect(settings(*responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.prompt(sid, "go")
        assert len(client.permission_requests) == 1
        assert "always reject" in tool_messages(editor, sid)[1]
    assert STORE.ran == []


async def prompt_in_mode(mode: str, responses: list[Any], client: FakeClient, check: Any) -> list[str]:
    """One prompt, "go", of a new session in ``mode`` that the model answers with ``responses``; what the
    tools told the model."""
    async with connect(settings(*responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": mode})
        await editor.prompt(sid, "go")
        return tool_messages(editor, sid)


@pytest.mark.parametrize(
    ("mode", "asked", "ran"),
    [
        ("ask", ["Write a", "Run `make`"], ["make"]),
        ("accept-edits", ["Run `make`"], ["make"]),
        ("auto", ["Run `make`"], ["make"]),  # FakeRun's plan is not `confined`: it asks
        ("read-only", [], []),
        ("full-access", [], ["make"]),
    ],
)
async def test_modes(mode: str, asked: list[str], ran: list[str], check: Any) -> None:
    client = FakeClient(permission=allow_once)
    responses = [
        [call("write_file", path="a", content="1")],
        [call("run_command", command="make")],
        [call("read_file", path="r")],
        text("ok"),
    ]
    results = await prompt_in_mode(mode, responses, client, check)
    assert [r["toolCall"]["title"] for r in client.permission_requests] == asked
    assert STORE.ran == ran
    assert ("/ws/a" in STORE.files) == (mode != "read-only")
    if mode == "read-only":
        assert "read-only mode" in results[0]
    assert results[2] == "contents of r"  # reads never ask inside the roots


@pytest.mark.parametrize(
    ("mode", "asked"),
    [("ask", 3), ("accept-edits", 2), ("auto", 2), ("full-access", 0)],
)
async def test_files_git_or_an_editor_runs_ask_even_when_edits_do_not(mode: str, asked: int, check: Any) -> None:
    """``.vscode/tasks.json`` and ``.github/workflows/...`` run later, with the user's full power: the
    modes that let edits through ask for them, and "always allow edits" does not cover them."""
    client = FakeClient(permission=select("allow_always"))
    responses = [
        [call("write_file", path="notes.txt", content="1")],
        [call("write_file", path=".vscode/tasks.json", content="{}")],
        [call("write_file", path=".github/workflows/ci.yml", content="on: push")],
        text("ok"),
    ]
    await prompt_in_mode(mode, responses, client, check)
    titles = [r["toolCall"]["title"] for r in client.permission_requests]
    assert len(titles) == asked, titles
    later = [title for title in titles if "git or an editor runs it" in title]
    assert (
        later
        == [
            "Write .vscode/tasks.json (.vscode/tasks.json: git or an editor runs it)",
            "Write .github/workflows/ci.yml (.github/workflows/ci.yml: git or an editor runs it)",
        ][: len(later)]
    )
    assert len(later) == min(asked, 2)
    options = [o["name"] for r in client.permission_requests[-1:] for o in r["options"]]
    if asked:
        assert "Always allow changes to .github/workflows/ci.yml" in options
    assert set(STORE.files) == {"/ws/notes.txt", "/ws/.vscode/tasks.json", "/ws/.github/workflows/ci.yml"}


async def test_reading_outside_asks_even_in_full_access(check: Any) -> None:
    client = FakeClient(permission=allow_once)
    async with connect(
        settings([call("read_file", path="/etc/hosts")], text("ok")), client=client, check=check
    ) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        await editor.prompt(sid, "go")
    [asked] = client.permission_requests
    assert "outside the workspace" in asked["toolCall"]["title"]


async def test_model_mistakes_become_failed_results(check: Any) -> None:
    responses = [
        [
            ToolCallRequest("1", "no_such_tool", "{}"),
            ToolCallRequest("2", "write_file", "{not json"),
            ToolCallRequest("3", "write_file", json.dumps({"path": "a"})),
            ToolCallRequest("4", "write_file", json.dumps({"path": 3, "content": "x"})),
            ToolCallRequest("5", "write_file", json.dumps({"path": "a", "content": "x", "mode": 1})),
            ToolCallRequest("6", "write_file", json.dumps({"path": "/etc/x", "content": "x"})),
            ToolCallRequest("7", "run_command", json.dumps({"command": "crash"})),
        ],
        text("sorry"),
    ]
    async with connect(settings(*responses), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        results = tool_messages(editor, sid)
    assert "no tool named 'no_such_tool'" in results[0]
    assert "not valid JSON" in results[1]
    assert "Missing required argument(s): content" in results[2]
    assert "'path' must be of type string" in results[3]
    assert "Unknown argument(s): mode" in results[4]
    assert "outside the workspace" in results[5]
    assert "Internal error in run_command: RuntimeError: boom" in results[6]


async def test_cancel_while_permission_pending(check: Any) -> None:
    asked = anyio.Event()

    async def wait_forever(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError

    client = FakeClient(permission=wait_forever)
    async with connect(
        settings([call("write_file", path="a", content="1")], text("next")), client=client, check=check
    ) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        results: list[Any] = []

        async def run() -> None:
            results.append(await editor.prompt(sid, "go"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await asked.wait()
            await editor.cancel(sid)
        assert results == [{"stopReason": "cancelled"}]
        statuses = [u.get("status") for u in editor.updates(sid) if "toolCallId" in u]
        assert statuses[-1] == "failed"
        # the agent told the client to stop waiting for the answer
        assert any(m.get("method") == "$/cancel_request" for m in editor.transcript.sent_by("agent"))
        # and the history is valid for the next prompt: every tool call has a result
        assert await editor.prompt(sid, "again") == {"stopReason": "end_turn"}
    assert STORE.files == {}


async def test_cancelled_outcome_ends_the_turn(check: Any) -> None:
    async def cancelled(params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": {"outcome": "cancelled"}}

    client = FakeClient(permission=cancelled)
    async with connect(settings([call("write_file", path="a", content="1")]), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "go") == {"stopReason": "cancelled"}
    assert STORE.files == {}


async def test_permission_request_error_refuses(check: Any) -> None:
    async def broken(params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError("permission UI crashed")

    client = FakeClient(permission=broken)
    async with connect(settings([call("run_command", command="ls")], text("ok")), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        assert "permission UI crashed" in tool_messages(editor, sid)[0]
    assert STORE.ran == []


async def test_cancel_while_tool_runs(check: Any) -> None:
    async with connect(settings([call("run_command", command="hang")], text("next")), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        results: list[Any] = []

        async def run() -> None:
            results.append(await editor.prompt(sid, "go"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await editor.transcript.wait_for(
                lambda s, m: (
                    m.get("method") == "session/update" and m["params"]["update"].get("status") == "in_progress"
                )
            )
            await editor.cancel(sid)
        assert results == [{"stopReason": "cancelled"}]
        assert [u.get("status") for u in editor.updates(sid) if "toolCallId" in u][-1] == "failed"


async def test_hang_in_model_then_cancel_keeps_history_valid(check: Any) -> None:
    response = [*text("thinking"), call("run_command", command="ls"), Hang()]
    async with connect(settings(response, text("x")), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session("/ws")
        async with anyio.create_task_group() as tg:
            tg.start_soon(editor.prompt, sid, "go")
            await editor.transcript.wait_for_update("agent_message_chunk")
            await editor.cancel(sid)
        history = editor.agent.sessions[sid].history
        calls = [c["id"] for m in history if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        answered = [m["tool_call_id"] for m in history if m["role"] == "tool"]
        assert calls == answered


async def test_every_text_of_a_permission_request_is_shown_as_it_is(check: Any) -> None:
    """Not only the title: a change the user approves cannot hide what it does behind characters that
    reorder the text as it is drawn (U+202E, "Trojan Source"). The diff stays the file's text, followed by
    a line that names the line that holds them, as escapes (the request's text: :func:`for_a_person`)."""
    rlo = "\u202e"
    client = FakeClient(permission=allow_once)
    responses = [
        [call("write_file", path="safe.py", content=f"access = 'user' # {rlo} ;'nimda' = access\n")],
        text("ok"),
    ]
    await prompt_in_mode("ask", responses, client, check)
    [body] = [r["toolCall"]["content"] for r in client.permission_requests]
    [diff] = [block for block in body if block["type"] == "diff"]
    assert rlo in diff["newText"]  # the file's own text
    [note] = [block["content"]["text"] for block in body if block["type"] == "content"]
    assert note == (
        "/ws/safe.py: line 1 of the new text holds characters that a terminal obeys or that reorder the text "
        "as it is drawn, shown here as escapes: access = 'user' # \\u202e ;'nimda' = access"
    )


def test_a_requests_text_is_shown_with_escapes() -> None:
    """A command, a path or a reason in a request's body: what a terminal would obey, or what reorders
    the text, is written as an escape; line breaks and tabs stay."""
    from refagent.tools.text import for_a_person, text_content

    body = text_content("```sh\necho ok #\u202e\x1b[2K ;dlrow olleh ohce\n```\nWorking directory: /ws/\u2066x\tend")
    assert for_a_person([body]) == [
        text_content("```sh\necho ok #\\u202e\\x1b[2K ;dlrow olleh ohce\n```\nWorking directory: /ws/\\u2066x\tend")
    ]
