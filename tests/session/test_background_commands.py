"""Background commands (``run_command`` with ``background: true``, ``command_output``, ``stop_command``,
``/jobs``, ``/stop``): the turn ends while the command runs, its tool call stays ``in_progress`` showing
its output and ends when the command does (recorded so, replayed so by ``session/load``); the model hears
of the end; cancel leaves it running; closing the session kills it. Local processes and an editor's
terminals alike."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect
from refagent.testing.terminals import FakeTerminalHost
from tests.support.procs import gone, survivors

pytestmark = pytest.mark.anyio


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"call_{n}", name=name, arguments=json.dumps(args))


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def updates_of(editor: Editor, sid: str, call_id: str) -> list[dict[str, Any]]:
    return [u for u in editor.updates(sid) if u.get("toolCallId") == call_id]


async def until(predicate: Callable[[], bool], seconds: float = 10) -> None:
    """Poll ``predicate`` (processes and the agent's own tasks give no event to wait on)."""
    with anyio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.02)


def tool_results(model: ScriptedModel, request: int) -> list[str]:
    return [m["content"] for m in model.requests[request].messages if m["role"] == "tool"]


def ended(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u.get("status") in ("completed", "failed")]


async def test_a_background_command_outlives_its_turn_and_is_read_and_stopped(
    tmp_path: Path, project: Path, check: Any
) -> None:
    script = "echo started; sleep 0.3; echo more; sleep 60"
    model = ScriptedModel(
        [
            [call(1, "run_command", command=script, background=True)],
            text("It runs."),
            [call(2, "command_output", job_id="job-1", wait_seconds=1)],
            [call(3, "stop_command", job_id="job-1")],
            [call(4, "command_output")],
            text("Stopped."),
        ]
    )
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        with anyio.fail_after(10):  # the turn does not wait for the command
            assert await editor.prompt(sid, "start the server") == {"stopReason": "end_turn"}
        (run,) = [u["toolCallId"] for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        started = updates_of(editor, sid, run)
        assert started[-1]["status"] == "in_progress"
        assert started[-1]["rawOutput"] == {"job": "job-1"}
        assert not ended(started)
        assert "background" in started[0]["title"]
        assert "job-1" in tool_results(model, 1)[0]
        # the output streams into the call while it runs (a local process: as content)
        await until(lambda: any("more" in json.dumps(u.get("content")) for u in updates_of(editor, sid, run)))

        await editor.cancel(sid)  # cancel is about turns: the command runs on
        await anyio.sleep(0.1)
        assert not ended(updates_of(editor, sid, run))

        assert await editor.prompt(sid, "how is it?") == {"stopReason": "end_turn"}
        output, stopped, listing = tool_results(model, 5)[-3:]
        assert "job-1" in output
        assert "running" in output
        assert "started" in output
        assert "more" in output
        assert "stopped with stop_command" in stopped
        assert stopped.endswith("(no new output)")  # what was read is not read again
        assert "job-1 (`echo started" in listing
        assert "stopped" in listing
        await until(lambda: bool(ended(updates_of(editor, sid, run))))
        (end,) = ended(updates_of(editor, sid, run))
        assert end["status"] == "completed"  # stopped as asked: not a failure
        assert end["rawOutput"]["stopped_by"] == "model"

    # a later agent replays the call as it ended
    async with connect(settings(tmp_path, ScriptedModel()), check=check) as editor:
        await editor.initialize()
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        replayed = updates_of(editor, sid, run)
    assert replayed[-1]["status"] == "completed"


async def test_the_model_hears_when_a_background_command_ends(tmp_path: Path, project: Path, check: Any) -> None:
    model = ScriptedModel(
        [[call(1, "run_command", command="echo bye; exit 3", background=True)], text("Started."), text("Noted.")]
    )
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "run it")
        (run,) = [u["toolCallId"] for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        await until(lambda: bool(ended(updates_of(editor, sid, run))))
        (end,) = ended(updates_of(editor, sid, run))
        assert end["status"] == "failed"
        shown = json.dumps(end["content"])
        assert "bye" in shown
        assert "Exited with code 3." in shown
        await editor.prompt(sid, "and?")
    reminder = [m["content"] for m in model.requests[2].messages if "Background commands ended" in str(m["content"])]
    assert len(reminder) == 1
    assert "job-1 (`echo bye; exit 3`): exited with code 3." in reminder[0]


async def test_closing_the_session_kills_its_background_commands(tmp_path: Path, project: Path, check: Any) -> None:
    marker = f"6{os.getpid() % 10000:04d}"  # this test's sleep, among all processes
    ready = project / "ready"
    model = ScriptedModel(
        [[call(1, "run_command", command=f"touch {ready}; exec sleep {marker}.1", background=True)], text("Started.")]
    )
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "run it")
        await until(ready.exists)
        await until(lambda: bool(survivors(marker)))  # exec of the sleep may trail the touch
        (run,) = [u["toolCallId"] for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        await editor.request("session/close", {"sessionId": sid})
        assert await gone(marker) == []
    async with connect(settings(tmp_path, ScriptedModel()), check=check) as editor:
        await editor.initialize()
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        replayed = updates_of(editor, sid, run)
    assert replayed[-1]["status"] == "failed"
    assert "the session was closed" in json.dumps(replayed[-1]["content"])


async def test_the_user_lists_and_stops_background_commands(tmp_path: Path, project: Path, check: Any) -> None:
    model = ScriptedModel(
        [
            [call(1, "run_command", command="sleep 60", background=True)],
            [call(2, "run_command", command="sleep 61", background=True)],
            text("Both run."),
        ]
    )
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "start two")
        runs = [u["toolCallId"] for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        before = len(editor.updates(sid))
        await editor.prompt(sid, "/jobs")
        listing = editor.text(sid)
        assert "job-1: `sleep 60`: running" in listing
        assert "job-2: `sleep 61`: running" in listing
        await editor.prompt(sid, "/stop job-2")
        assert "Stopped job-2 (`sleep 61`)." in editor.text(sid)
        await editor.prompt(sid, "/stop job-9")
        assert "There is no background command 'job-9' (known: job-1, job-2)." in editor.text(sid)
        await editor.prompt(sid, "/stop")
        assert "Stopped job-1 (`sleep 60`)." in editor.text(sid)
        await until(lambda: all(ended(updates_of(editor, sid, run)) for run in runs))
        assert "No background command is running." not in editor.text(sid)
        await editor.prompt(sid, "/stop all")
        assert "No background command is running." in editor.text(sid)
        for run in runs:
            (end,) = ended(updates_of(editor, sid, run))
            assert end["rawOutput"]["stopped_by"] == "user"
            assert "Stopped by the user" in json.dumps(end["content"])
        assert len(editor.updates(sid)) > before
    assert len(model.requests) == 3  # the slash commands never reached the model


async def test_in_an_editor_terminal_the_call_shows_the_terminal(tmp_path: Path, project: Path, check: Any) -> None:
    model = ScriptedModel(
        [
            [call(1, "run_command", command="echo hello; sleep 60", background=True)],
            text("Started."),
            [call(2, "command_output", job_id="job-1", wait_seconds=1)],
            [call(3, "stop_command", job_id="job-1")],
            text("Done."),
        ]
    )
    async with FakeTerminalHost() as host:
        client = FakeClient(extra=host.handlers())
        async with connect(settings(tmp_path, model), client=client, check=check) as editor:
            await editor.initialize({"terminal": True})
            sid = await editor.new_session(str(project))
            await editor.prompt(sid, "start it")
            (run,) = [u["toolCallId"] for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
            running = updates_of(editor, sid, run)[-1]
            assert running["status"] == "in_progress"
            assert running["content"] == [{"type": "terminal", "terminalId": "term_1"}]
            assert host.live == ["term_1"]  # held while it runs
            await editor.prompt(sid, "check and stop it")
            output = tool_results(model, 3)[-1]
            assert "hello" in output
            assert "running" in output
            await until(lambda: bool(ended(updates_of(editor, sid, run))))
            (end,) = ended(updates_of(editor, sid, run))
            assert end["content"][0] == {"type": "terminal", "terminalId": "term_1"}
            assert host.live == []  # released once it ended
            assert ("kill", {"sessionId": sid, "terminalId": "term_1"}) in host.calls


async def test_at_most_eight_run_at_once(tmp_path: Path, project: Path, check: Any) -> None:
    starts = [[call(n, "run_command", command=f"sleep {60 + n}", background=True)] for n in range(1, 10)]
    model = ScriptedModel([*starts, text("Enough.")])
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "start nine")
        last = tool_results(model, 9)[-1]
        assert "8 background commands are running already (job-1, job-2" in last
        assert "stop one with stop_command first" in last
        await editor.prompt(sid, "/stop")
