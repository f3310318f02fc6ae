"""Confinement end to end: a real ``refagent`` process in ``full-access`` mode (nothing asks), whose model
(the scripted OpenAI-compatible server on 127.0.0.1) writes the attacks as tool calls. The agent holds a
real API key in its environment, as it does in an editor."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.confine.confinement import machine_support
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.terminals import FakeTerminalHost
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.procs import alive, gone, survivors

MISSING = machine_support().missing("workspace")
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING) and not os.environ.get("REFAGENT_REQUIRE_SANDBOX"), reason="no sandbox here"),
]

KEY = "sk-live-secret-of-the-agent"


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    return agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")


async def full_access_session(agent: AgentProcess, cwd: Path) -> str:
    await agent.initialize()
    sid = await agent.new_session(cwd)
    await agent.result("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
    return sid


def prompt(sid: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}


async def test_a_command_cannot_read_the_agents_key_or_signal_it(tmp_path: Path, check: Any) -> None:
    attack = (
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u; "
        "kill -KILL $PPID 1 2>&1; kill -TERM -1 2>&1; echo survived"
    )
    turns = [Turn(tool_calls=[ToolCall("run_command", {"command": attack})]), Turn(text="done")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            sid = await full_access_session(agent, tmp_path)
            assert (await agent.result("session/prompt", prompt(sid)))["stopReason"] == "end_turn"
            assert alive(agent.pid)
            [result] = [m for m in server.chat_requests[1].body["messages"] if m["role"] == "tool"]
    assert KEY not in result["content"]
    assert "PATH=" in result["content"]  # it did read environments: its own, the only ones it can see


async def test_killing_the_agent_kills_everything_its_commands_started(tmp_path: Path, check: Any) -> None:
    marker = f"8{os.getpid() % 10000:04d}"
    escape = f"setsid sleep {marker}.1 & (setsid sleep {marker}.2 &) ; nohup sleep {marker}.3 & sleep {marker}.4"
    turns = [Turn(tool_calls=[ToolCall("run_command", {"command": escape, "timeout_seconds": 600})])]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            sid = await full_access_session(agent, tmp_path)
            await agent.send_request("session/prompt", prompt(sid))
            await agent.wait_for(lambda m: m.get("params", {}).get("update", {}).get("status") == "in_progress")
            while len(survivors(marker)) < 4:  # noqa: ASYNC110 - processes of another namespace
                await anyio.sleep(0.02)
            agent.process.kill()  # SIGKILL: the agent cleans up nothing
            await agent.process.wait()
    assert await gone(marker) == []


def escaping(marker: str) -> str:
    """A command whose processes try to outlive it: five ``sleep``s, two of which ignore SIGTERM, two in a
    session (and process group) of their own, one double-forked, one ``nohup``."""
    return (
        f"setsid sh -c 'trap \"\" TERM; exec sleep {marker}.1' & (setsid sleep {marker}.2 &); "
        f"nohup sleep {marker}.3 >/dev/null 2>&1 & sh -c 'trap \"\" TERM; exec sleep {marker}.4' & sleep {marker}.5"
    )


@pytest.mark.parametrize("disable", ["", "namespaces"], ids=["namespaces", "no namespaces"])
@pytest.mark.parametrize("level", ["workspace", "none"])
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
async def test_nothing_a_command_started_outlives_the_agent_killed(
    tmp_path: Path, check: Any, disable: str, level: str, background: bool
) -> None:
    """``kill -9`` of the agent, at every level, with and without namespaces (a machine without them, or
    level ``none``): the launcher's keeper ends everything the command started, whatever group it is in."""
    marker = f"6{os.getpid() % 10000:04d}"
    call = {"command": escaping(marker), "sandbox": level, "background": background, "timeout_seconds": 600}
    turns = [Turn(tool_calls=[ToolCall("run_command", call)]), Turn(text="started")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = {**env_for(tmp_path, server), "REFAGENT_SANDBOX_DISABLE": disable}
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            sid = await full_access_session(agent, tmp_path)
            asked = await agent.send_request("session/prompt", prompt(sid))
            if background:
                await agent.wait_for(lambda m: m.get("id") == asked)
            while len(survivors(marker)) < 5:  # noqa: ASYNC110 - processes of another namespace
                await anyio.sleep(0.02)
            holders = holders_of(agent.pid)
            agent.process.kill()  # SIGKILL: the agent cleans up nothing
            await agent.process.wait()
    assert await gone(marker) == []
    # The session's /tmp holder, where there are namespaces (not at level none, which has no private /tmp).
    assert len(holders) == (1 if not disable and level == "workspace" else 0)
    with anyio.fail_after(5):
        while any(alive(pid) for pid in holders):  # noqa: ASYNC110 - not our child: nothing to wait on
            await anyio.sleep(0.02)


def holders_of(agent: int) -> list[int]:
    """The session /tmp holders (``launcher.py --hold-tmp``) the agent ``agent`` started."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                command = file.read()
            with open(f"/proc/{entry}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"--hold-tmp" in command and parent == agent:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("disable", ["", "namespaces"], ids=["namespaces", "no namespaces"])
async def test_a_command_in_the_editors_terminal_ends_when_the_agent_is_killed(
    tmp_path: Path, check: Any, disable: str
) -> None:
    """The editor, not the agent, is the launcher's parent there: the launcher watches the agent
    (``--agent``) and ends with it, and so does everything the command started, while the editor (this
    test) still holds the terminal."""
    marker = f"5{os.getpid() % 10000:04d}"
    turns = [Turn(tool_calls=[ToolCall("run_command", {"command": escaping(marker), "timeout_seconds": 600})])]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = {**env_for(tmp_path, server), "REFAGENT_SANDBOX_DISABLE": disable}
        async with FakeTerminalHost() as host, AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize({"terminal": True})
            sid = await agent.new_session(tmp_path)
            await agent.result("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
            await agent.send_request("session/prompt", prompt(sid))
            create = await agent.wait_for(lambda m: m.get("method") == "terminal/create")
            assert "--agent" in create["params"]["args"]
            await agent.send({"jsonrpc": "2.0", "id": create["id"], "result": await host.create(create["params"])})
            while len(survivors(marker)) < 5:  # noqa: ASYNC110 - processes of another namespace
                await anyio.sleep(0.02)
            agent.process.kill()
            await agent.process.wait()
            assert await gone(marker) == []
            with anyio.fail_after(5):
                await host.terminals["term_1"].done.wait()  # the terminal's process ended too


async def answer_permissions_until_done(agent: AgentProcess, prompt_id: int) -> list[dict[str, Any]]:
    """Allow each permission request once until the prompt answers; the requests, in order."""
    asked = []
    while True:
        message = await agent.wait_for(
            lambda m: m.get("method") == "session/request_permission" or m.get("id") == prompt_id
        )
        if message.get("method") != "session/request_permission":
            assert message["result"]["stopReason"] == "end_turn"
            return asked
        asked.append(message["params"])
        allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        await agent.send({"jsonrpc": "2.0", "id": message["id"], "result": allow})


def commands(*calls: dict[str, Any]) -> list[Turn]:
    return [Turn(tool_calls=[ToolCall("run_command", args)]) for args in calls] + [Turn(text="done")]


async def auto_session(agent: AgentProcess, cwd: Path) -> tuple[str, dict[str, Any]]:
    await agent.initialize()
    new = await agent.result("session/new", {"cwd": str(cwd), "mcpServers": []})
    await agent.result("session/set_mode", {"sessionId": new["sessionId"], "modeId": "auto"})
    return new["sessionId"], new


async def test_auto_runs_sandboxed_commands_and_asks_for_more(tmp_path: Path, check: Any) -> None:
    turns = commands(
        {"command": "echo hi > made-here.txt"},
        {"command": "echo net", "sandbox": "network", "reason": "fetch the dependencies"},
    )
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            sid, new = await auto_session(agent, tmp_path)
            asked = await answer_permissions_until_done(agent, await agent.send_request("session/prompt", prompt(sid)))
    assert [a["toolCall"]["title"] for a in asked] == ["Run `echo net` (network access)"]
    assert "Reason: fetch the dependencies" in asked[0]["toolCall"]["content"][0]["content"]["text"]
    assert (tmp_path / "made-here.txt").read_text() == "hi\n"
    [auto] = [m for m in new["modes"]["availableModes"] if m["id"] == "auto"]
    assert "run sandboxed commands" in auto["description"]


async def test_where_the_machine_cannot_confine_auto_asks_and_says_why(tmp_path: Path, check: Any) -> None:
    """``REFAGENT_SANDBOX_DISABLE`` plays a machine without namespaces (a distribution that blocks them)."""
    turns = commands({"command": "echo hi > made-here.txt"})
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = {**env_for(tmp_path, server), "REFAGENT_SANDBOX_DISABLE": "namespaces"}
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            sid, new = await auto_session(agent, tmp_path)
            asked = await answer_permissions_until_done(agent, await agent.send_request("session/prompt", prompt(sid)))
            said = agent.text(sid)
    assert [a["toolCall"]["title"] for a in asked] == ["Run `echo hi > made-here.txt` (not sandboxed here)"]
    shown = asked[0]["toolCall"]["content"][0]["content"]["text"]
    assert "This machine cannot confine it from" in shown
    assert "other processes" in shown
    assert "Sandbox: commands are not fully confined on this machine" in said
    [auto] = [m for m in new["modes"]["availableModes"] if m["id"] == "auto"]
    assert "Commands still ask" in auto["description"]


ATTACKS = (
    "echo pwned > {home}/.bashrc-refagent-test; echo pwned > /tmp/refagent-host-{tag}; echo pwned > {outside}/x; "
    "ln -s {outside} escape && echo pwned > escape/y; ln {outside}/keep hard; "
    "chmod 000 {outside}/keep; touch -d 2001-01-01 {outside}/keep; "
    "setsid sleep {marker}.1 & (nohup sleep {marker}.2 &); "
    "kill -TERM {agent}; test -e /proc/{agent}/environ && echo AGENT-VISIBLE; "
    "{python} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3)'; echo ran"
)


@pytest.mark.parametrize("backend", ["local", "editor"])
async def test_full_access_attacks_in_process(backend: str, tmp_path: Path, check: Any) -> None:
    """The model's attacks in one approved command, in ``full-access`` (nothing asks), through the agent's
    real tools and sandbox, on the local path and the editor's terminal alike."""
    outside = Path(tempfile.mkdtemp(prefix="refagent-outside-", dir="/var/tmp"))
    (outside / "keep").write_text("keep\n")
    before = (outside / "keep").stat()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = f"9{os.getpid() % 1000:03d}{len(backend)}"
    tag = f"{os.getpid()}-{tmp_path.name}"  # the pid too: parallel workers' tmp_path names repeat
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        command = ATTACKS.format(
            home=Path.home(),
            tag=tag,
            outside=outside,
            marker=marker,
            agent=os.getpid(),
            python=sys.executable,
            port=listener.getsockname()[1],
        )
        model = ScriptedModel([[ToolCallRequest("c1", "run_command", json.dumps({"command": command}))], text("ok")])
        async with FakeTerminalHost() as host:
            client = FakeClient(extra=host.handlers())
            capabilities = {"terminal": True} if backend == "editor" else {}
            async with connect(Settings(make_model=lambda p: model), client=client, check=check) as editor:
                await editor.initialize(capabilities)
                sid = await editor.new_session(str(workspace))
                await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
                assert (await editor.prompt(sid, "go"))["stopReason"] == "end_turn"
            assert client.permission_requests == []
            with pytest.raises(BlockingIOError):
                listener.accept()
    try:
        result = next(m for m in model.requests[-1].messages if m["role"] == "tool")["content"]
        assert "ran" in result  # the command ran to its end
        assert "AGENT-VISIBLE" not in result
        assert_untouched(outside, Path(f"/tmp/refagent-host-{tag}"), workspace, before)
        assert await gone(marker) == []
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def assert_untouched(outside: Path, host_tmp_file: Path, workspace: Path, before: os.stat_result) -> None:
    assert not (Path.home() / ".bashrc-refagent-test").exists()
    assert not host_tmp_file.exists()
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    after = (outside / "keep").stat()
    assert (outside / "keep").read_text() == "keep\n"
    assert (after.st_mode, after.st_mtime, after.st_nlink) == (before.st_mode, before.st_mtime, 1)
    assert not (workspace / "hard").exists()


@pytest.mark.parametrize("ending", ["stdin closed", "SIGKILL"])
async def test_a_background_command_dies_with_the_agent(tmp_path: Path, check: Any, ending: str) -> None:
    """The turn ends while the command runs; the agent's exit, clean or killed, ends it and all it started."""
    marker = f"7{os.getpid() % 10000:04d}"
    server_like = f"sleep {marker}.1 & setsid sleep {marker}.2 & sleep {marker}.3"
    turns = [Turn(tool_calls=[ToolCall("run_command", {"command": server_like, "background": True})]), Turn(text="up")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            sid = await full_access_session(agent, tmp_path)
            assert (await agent.result("session/prompt", prompt(sid)))["stopReason"] == "end_turn"
            while len(survivors(marker)) < 3:  # noqa: ASYNC110 - processes of another namespace
                await anyio.sleep(0.02)
            if ending == "SIGKILL":
                agent.process.kill()
            else:
                await agent.close_stdin()
            with anyio.fail_after(20):
                await agent.process.wait()
    assert await gone(marker) == []
