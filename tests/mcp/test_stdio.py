"""The hub against a real MCP server (the ``mcp`` SDK's) spawned over stdio: where and with what
environment it runs, tool-list changes in both protocol eras, a crash mid-call, servers that fail to
start, and no process left behind, whether the hub is closed or its task group cancelled.

A server written with the SDK takes a second or two to start (the SDK's import), so those tests are
marked slow; the failures to start do not import it and are fast."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from refagent.errors import ToolError
from refagent.mcp import McpHub
from tests.support.mcp_servers.harness import Problems, run, running_hub, stdio_entry, tool
from tests.support.procs import alive
from tests.support.tool_fakes import make_ctx

pytestmark = pytest.mark.anyio

AGENT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/home/someone",
    "OPENAI_API_KEY": "sk-model-key",
    "OPENAI_BASE_URL": "https://key@example.com/v1",
    "ANTHROPIC_API_KEY": "sk-ant",
    "REFAGENT_MODEL": "gpt",
    "GITHUB_TOKEN": "ghp-agent",
    "DB_PASSWORD": "hunter2",
    "LANG": "C.UTF-8",
}


@pytest.mark.slow
async def test_a_stdio_server_end_to_end(tmp_path: Path) -> None:
    """Started in the session cwd with the agent's environment minus credentials plus its own env;
    a banner on stdout is skipped; a tool-list change is picked up; closing ends its process group."""
    server_env = {"GITHUB_TOKEN": "ghp-for-this-server", "DEMO_MODE": "1"}
    entry = stdio_entry("demo", "noise", env=server_env)
    async with running_hub([entry], str(tmp_path), env=AGENT_ENV) as (hub, problems):
        assert problems == []
        [status] = hub.status()
        assert status.state == "connected"
        assert status.pid is not None
        assert alive(status.pid)

        seen = json.loads((await run(hub, "mcp__demo__environment")).output)
        assert seen["cwd"] == str(tmp_path)
        env = seen["env"]
        assert env["HOME"] == "/home/someone"
        assert env["LANG"] == "C.UTF-8"
        assert env["DEMO_MODE"] == "1"
        assert env["GITHUB_TOKEN"] == "ghp-for-this-server"  # the server's own entry, as configured
        for secret in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "REFAGENT_MODEL", "DB_PASSWORD"):
            assert secret not in env

        before = hub.version
        await run(hub, "mcp__demo__grow")
        with anyio.fail_after(5):
            while "mcp__demo__extra" not in {t.name for t in hub.tools()}:
                before = await hub.wait_changed(before)
        assert (await run(hub, "mcp__demo__extra", x=41)).output == "42"

        helper = int((await run(hub, "mcp__demo__spawn_helper")).output)
        assert alive(helper)
        await hub.aclose()
        assert not alive(status.pid)
        assert not alive(helper)  # the server exited when its stdin closed; its group went with it
        assert hub.tools() == []
    assert problems == []


@pytest.mark.slow
async def test_a_handshake_era_server_and_a_crash_mid_call(tmp_path: Path) -> None:
    """A server from before the 2026 protocol (``initialize``, ``notifications/tools/list_changed``); then it
    crashes during a call: the call fails with the reason, later calls say it is gone, the user is told."""
    async with running_hub([stdio_entry("old", "legacy")], str(tmp_path)) as (hub, problems):
        assert [s.state for s in hub.status()] == ["connected"]
        before = hub.version
        await run(hub, "mcp__old__grow")
        with anyio.fail_after(5):
            while "mcp__old__extra" not in {t.name for t in hub.tools()}:
                before = await hub.wait_changed(before)

        echo = tool(hub, "mcp__old__echo")
        pid = hub.status()[0].pid
        assert pid is not None
        with pytest.raises(ToolError) as crashed:
            await run(hub, "mcp__old__crash")
        assert str(crashed.value) == (
            "The MCP server old stopped while running crash (it exited with code 3). "
            "Its tools are unavailable for the rest of this session."
        )
        with pytest.raises(ToolError, match=r"The MCP server old is disconnected \(it exited with code 3"):
            await echo.prepare({"text": "x"}, make_ctx(str(tmp_path)))
        assert hub.tools() == []
        assert not alive(pid)
        [(server, message)] = problems
        assert server == "old"
        assert message.startswith("disconnected: it exited with code 3; its last output on stderr:\n")
        assert message.endswith("crashing on purpose")


@pytest.mark.slow
async def test_cancelling_the_task_group_ends_the_server(tmp_path: Path) -> None:
    """The agent exiting (its background task group cancelled) leaves no server behind."""
    hub = McpHub([stdio_entry("demo")], str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    async with anyio.create_task_group() as tasks:
        await hub.start(tasks)
        with anyio.fail_after(30):
            await hub.wait_ready()
        pid = hub.status()[0].pid
        assert pid is not None
        helper = int((await run(hub, "mcp__demo__spawn_helper")).output)
        assert alive(pid)
        tasks.cancel_scope.cancel()
    assert not alive(pid)
    assert not alive(helper)


@pytest.mark.slow
async def test_start_returns_at_once_and_the_sdk_import_does_not_block_the_loop(tmp_path: Path) -> None:
    """In a fresh process (the SDK not imported yet): start() returns at once, and while the SDK is
    imported and the server connects, the event loop keeps running (session/new is answered)."""
    script = """
import anyio, sys, time
from refagent.mcp import McpHub

async def main():
    hub = McpHub([{"name": "x", "command": sys.executable, "args": ["-c", "pass"], "env": []}], "/tmp")
    gaps, last = [], time.monotonic()
    async def tick():
        nonlocal last
        while True:
            await anyio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
    async with anyio.create_task_group() as tasks:
        started = time.monotonic()
        await hub.start(tasks)
        took = time.monotonic() - started
        tasks.start_soon(tick)
        await hub.wait_ready()
        tasks.cancel_scope.cancel()
    print(took, max(gaps), "mcp" in sys.modules, hub.status()[0].state)

anyio.run(main)
"""
    result = await anyio.run_process([sys.executable, "-c", script], check=True)
    took, worst_gap, imported, state = result.stdout.decode().split()
    assert float(took) < 0.05
    assert float(worst_gap) < 0.3  # the import ran in a thread (it takes a second or more here)
    assert (imported, state) == ("True", "failed")


async def test_a_command_that_does_not_exist(tmp_path: Path) -> None:
    entry = {"name": "gone", "command": "/nonexistent/mcp-server", "args": [], "env": []}
    async with running_hub([entry], str(tmp_path)) as (hub, problems):
        assert [s.state for s in hub.status()] == ["failed"]
        assert problems == [("gone", "cannot start `/nonexistent/mcp-server`: No such file or directory")]
        assert hub.tools() == []


async def test_a_server_that_exits_at_start(tmp_path: Path) -> None:
    async with running_hub([stdio_entry("quits", "exit", "3")], str(tmp_path)) as (hub, problems):
        [status] = hub.status()
        assert status.state == "failed"
        assert status.pid is not None
        assert not alive(status.pid)
    assert problems == [("quits", "exited with code 3; its last output on stderr:\ncannot start: no configuration")]


async def test_a_server_that_never_answers_times_out_and_is_killed(tmp_path: Path) -> None:
    with anyio.fail_after(5):
        async with running_hub([stdio_entry("mute", "mute")], str(tmp_path), connect_timeout=0.5, close_grace=0.2) as (
            hub,
            problems,
        ):
            [status] = hub.status()
            assert status.state == "failed"
            assert status.pid is not None
            assert not alive(status.pid)  # it ignored the end of its stdin: SIGTERM ended it
    assert problems == [("mute", "did not answer within 0.5 s; its last output on stderr:\nthinking")]


async def test_a_session_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone")
    async with running_hub([stdio_entry("demo")], missing) as (hub, problems):
        assert [s.state for s in hub.status()] == ["failed"]
    assert problems == [("demo", f"cannot start it: the session directory {missing} does not exist")]


async def test_broken_entries_are_reported_and_the_others_still_start(tmp_path: Path) -> None:
    servers = [{"name": "bad"}, stdio_entry("quits", "exit", "0")]
    async with running_hub(servers, str(tmp_path)) as (hub, problems):
        assert [(s.name, s.state) for s in hub.status()] == [("bad", "invalid"), ("quits", "failed")]
    assert problems[0] == ("bad", "this entry cannot be used: a stdio server needs a command")
    assert problems[1][0] == "quits"


async def test_closing_while_connecting_ends_the_server_at_once(tmp_path: Path) -> None:
    problems = Problems()
    hub = McpHub([stdio_entry("mute", "mute")], str(tmp_path), on_problem=problems, close_grace=0.2)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await hub.start(tasks)
            while hub.status()[0].pid is None:  # noqa: ASYNC110 - nothing announces the spawn
                await anyio.sleep(0.01)
            pid = hub.status()[0].pid
            assert pid is not None
            await hub.aclose()
            assert not alive(pid)
    assert [s.state for s in hub.status()] == ["closed"]
    assert problems == []


async def test_run_keeps_the_servers_until_cancelled(tmp_path: Path) -> None:
    """``hub.run()`` in a scope that a session cancels when it closes."""
    hub = McpHub([stdio_entry("mute", "mute")], str(tmp_path), close_grace=0.2)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hub.run)
            while not hub.status() or hub.status()[0].pid is None:  # noqa: ASYNC110 - nothing announces the spawn
                await anyio.sleep(0.01)
            pid = hub.status()[0].pid
            assert pid is not None
            assert alive(pid)
            tasks.cancel_scope.cancel()
    assert not alive(pid)
    assert [s.state for s in hub.status()] == ["closed"]


async def test_a_hub_without_servers_does_nothing(tmp_path: Path) -> None:
    async with running_hub([], str(tmp_path)) as (hub, problems):
        assert hub.tools() == []
        assert hub.status() == []
    assert problems == []
