"""``examples/minimal_agent.py`` is a complete ACP agent: driven as a real process, every message it sends is
valid ACP v1 (``tests/support/acp_schema.py``), and a turn goes as its docstring says.

Two ways: over pipes from Python (fast, no Node.js), and from the official TypeScript SDK client
(``tests/js/sdk-client.mjs``, @agentclientprotocol/sdk pinned in ``tests/js/package.json``) through
``tests/js/tee_agent.py``, which logs every line both ways for the schema check. Without Node.js 18+ or the
installed packages (``make js-deps``) the SDK tests are skipped, saying why; with
``REFAGENT_REQUIRE_REAL_CLIENTS=1`` they fail instead.
"""

from __future__ import annotations

import json
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.testing.transcript import Transcript
from tests.support.acp_schema import validate_agent_message
from tests.support.helpers_process import ROOT, AgentProcess, agent_env
from tests.support.node import JS, SDK, SDK_CLIENT, SDK_NODE, TEE, newest_enough, node_versions, unavailable

pytestmark = pytest.mark.anyio

EXAMPLE = ROOT / "examples" / "minimal_agent.py"
TIMEOUT = 60
TESTS = "the SDK client tests"
TURN = ["agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]
"""The session updates of every turn that is not cancelled."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


def said(updates: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")


def check_announced(update: dict[str, Any], project: Path, old: str | None, new: str) -> None:
    """The ``tool_call``: an edit of hello.txt in the session's cwd, with its diff."""
    path = str(project / "hello.txt")
    assert update["sessionUpdate"] == "tool_call"
    assert (update["kind"], update["status"], update["title"]) == ("edit", "pending", "Write hello.txt")
    assert update["content"] == [{"type": "diff", "path": path, "oldText": old, "newText": new}]
    assert update["locations"] == [{"path": path}]


# -- over pipes, from Python ------------------------------------------------------------------------


def minimal_agent(tmp_path: Path) -> AbstractAsyncContextManager[AgentProcess]:
    """The example as a process; every line it writes is validated against the schema."""
    return AgentProcess.spawn(tmp_path, [sys.executable, str(EXAMPLE)], check=validate_agent_message)


async def start_prompt(agent: AgentProcess, session_id: str, text: str) -> tuple[int, dict[str, Any]]:
    """Send ``session/prompt``; return its id and the permission request the agent sends for it."""
    prompt_id = await agent.send_request(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    )
    request = await agent.wait_for(lambda m: m.get("method") == "session/request_permission")
    return prompt_id, request


async def answer(agent: AgentProcess, request: dict[str, Any], reply: dict[str, Any]) -> None:
    await agent.send({"jsonrpc": "2.0", "id": request["id"], **reply})


def selected(option_id: str) -> dict[str, Any]:
    return {"result": {"outcome": {"outcome": "selected", "optionId": option_id}}}


async def test_pipes_handshake_errors_and_shutdown(tmp_path: Path, project: Path) -> None:
    async with minimal_agent(tmp_path) as agent:
        init = await agent.initialize({"fs": {"readTextFile": False, "writeTextFile": False}})
        assert init["protocolVersion"] == 1
        assert init["authMethods"] == []
        assert init["agentInfo"]["name"] == "minimal-agent"
        unknown = await agent.request("session/load", {"sessionId": "x", "cwd": str(project), "mcpServers": []})
        assert unknown["error"]["code"] == -32601
        no_session = await agent.request("session/prompt", {"sessionId": "nope", "prompt": []})
        assert no_session["error"]["code"] == -32002
        relative = await agent.request("session/new", {"cwd": "project", "mcpServers": []})
        assert relative["error"]["code"] == -32602
        assert (await agent.new_session(project)).startswith("sess_")
        await agent.notify("session/cancel", {"sessionId": "nope"})  # nothing running: ignored
        await agent.notify("_unknown/notification", {})  # ignored too
        await agent.close_stdin()
        assert await agent.read_to_eof() == []
        assert await agent.wait_exit(5) == 0
        assert "Traceback" not in agent.stderr()


@pytest.mark.parametrize(
    ("reply", "status", "stop_reason", "written"),
    [
        (selected("allow"), "completed", "end_turn", True),
        (selected("reject"), "failed", "end_turn", False),
        ({"error": {"code": -32000, "message": "no UI to ask"}}, "failed", "end_turn", False),
        ({"result": {"outcome": {"outcome": "cancelled"}}}, None, "cancelled", False),
        ({"result": None}, "failed", "end_turn", False),
        ({"result": {"outcome": "allow"}}, "failed", "end_turn", False),
    ],
    ids=["allow", "reject", "client-error", "outcome-cancelled", "null", "malformed"],
)
async def test_pipes_permission_answers(
    tmp_path: Path, project: Path, reply: dict[str, Any], status: str | None, stop_reason: str, written: bool
) -> None:
    async with minimal_agent(tmp_path) as agent:
        await agent.initialize()
        session_id = await agent.new_session(project)
        prompt_id, request = await start_prompt(agent, session_id, "Hello, ACP!")
        [announced] = agent.transcript.updates(session_id)[1:]
        check_announced(announced, project, None, "Hello, ACP!\n")
        params = request["params"]
        assert params["sessionId"] == session_id
        assert params["toolCall"]["toolCallId"] == announced["toolCallId"]
        assert [o["kind"] for o in params["options"]] == ["allow_once", "reject_once"]
        await answer(agent, request, reply)
        response = await agent.wait_for(lambda m: m.get("id") == prompt_id and "method" not in m)
        assert response["result"] == {"stopReason": stop_reason}
        updates = agent.transcript.updates(session_id)
        if status is None:
            assert kinds(updates) == TURN[:2]
        else:
            assert kinds(updates) == TURN
            assert (updates[2]["toolCallId"], updates[2]["status"]) == (announced["toolCallId"], status)
        await agent.close_stdin()
        await agent.read_to_eof()
        assert await agent.wait_exit(5) == 0
    hello = project / "hello.txt"
    assert hello.exists() == written
    if written:
        assert hello.read_text() == "Hello, ACP!\n"


async def test_pipes_session_cancel_while_asking_withdraws_the_request(tmp_path: Path, project: Path) -> None:
    async with minimal_agent(tmp_path) as agent:
        await agent.initialize()
        session_id = await agent.new_session(project)
        prompt_id, request = await start_prompt(agent, session_id, "never written")
        await agent.notify("session/cancel", {"sessionId": session_id})
        withdrawn = await agent.wait_for(lambda m: m.get("method") == "$/cancel_request")
        assert withdrawn["params"] == {"requestId": request["id"]}
        response = await agent.wait_for(lambda m: m.get("id") == prompt_id and "method" not in m)
        assert response["result"] == {"stopReason": "cancelled"}
        await answer(agent, request, {"result": {"outcome": {"outcome": "cancelled"}}})  # late, as clients do: ignored
        assert not (project / "hello.txt").exists()

        # The session goes on: the next prompt is a whole turn again.
        prompt_id, request = await start_prompt(agent, session_id, "second")
        await answer(agent, request, selected("allow"))
        response = await agent.wait_for(lambda m: m.get("id") == prompt_id and "method" not in m)
        assert response["result"] == {"stopReason": "end_turn"}
        await agent.close_stdin()
        await agent.read_to_eof()
        assert await agent.wait_exit(5) == 0
    assert (project / "hello.txt").read_text() == "second\n"


# -- the official TypeScript SDK client -------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    versions = node_versions()
    if not versions:
        unavailable(TESTS, "no `node` on PATH")
    if not SDK.exists():
        unavailable(TESTS, "the npm packages are not installed")
    found = newest_enough(versions, SDK_NODE)
    if found is None:
        unavailable(TESTS, f"found Node {sorted(versions.values())}, the SDK needs 18+")
    return found


class Wire:
    """The tee log of one run: every line between the SDK client and the example."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def transcript(self) -> Transcript:
        """The log replayed through a :class:`Transcript` that validates every agent message."""
        transcript = Transcript(check=validate_agent_message)
        for line in self.path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            transcript.record(entry["from"], entry["line"].encode())
        assert transcript.sent_by("agent"), "the agent sent nothing"
        return transcript

    def stop_reasons(self) -> list[str]:
        """The ``stopReason`` of every ``session/prompt`` response, in order (and the schema check)."""
        prompts: set[Any] = set()
        reasons = []
        for sender, message in self.transcript().messages:
            if sender == "client" and message.get("method") == "session/prompt":
                prompts.add(message["id"])
            elif sender == "agent" and "method" not in message and message.get("id") in prompts:
                reasons.append(message["result"]["stopReason"])
        return reasons


async def sdk_client(
    node: str, tmp_path: Path, project: Path, *flags: str, prompts: tuple[str, ...] = ("Hello, ACP!",)
) -> tuple[dict[str, Any], Wire]:
    wire = Wire(tmp_path / "wire.jsonl")
    command = [node, str(SDK_CLIENT), "--cwd", str(project), *flags]
    for prompt in prompts:
        command += ["--prompt", prompt]
    command += ["--", sys.executable, str(TEE), str(wire.path), "--", sys.executable, str(EXAMPLE)]
    with anyio.fail_after(TIMEOUT):
        result = await anyio.run_process(command, cwd=JS, env=agent_env(tmp_path / "home"), check=False)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["exit"] == {"code": 0, "signal": None}, report["exit"]  # the agent exited on EOF, cleanly
    assert "Traceback" not in result.stderr.decode()
    return report, wire


@pytest.mark.slow
async def test_sdk_allow_writes_the_file(node: str, tmp_path: Path, project: Path) -> None:
    report, wire = await sdk_client(node, tmp_path, project)
    assert report["initialize"]["protocolVersion"] == 1
    assert report["initialize"]["agentInfo"]["name"] == "minimal-agent"
    [turn] = report["turns"]
    assert turn["stopReason"] == "end_turn"
    updates = turn["updates"]
    assert kinds(updates) == TURN
    check_announced(updates[1], project, None, "Hello, ACP!\n")
    call_id = updates[1]["toolCallId"]
    assert (updates[2]["toolCallId"], updates[2]["status"]) == (call_id, "completed")
    assert said(updates) == "I will write your prompt into hello.txt.\nDone: hello.txt is written."
    [request] = report["permissionRequests"]
    assert request["sessionId"] == report["sessionId"]
    assert request["toolCall"]["toolCallId"] == call_id
    assert [o["kind"] for o in request["options"]] == ["allow_once", "reject_once"]
    assert (project / "hello.txt").read_text() == "Hello, ACP!\n"
    assert wire.stop_reasons() == ["end_turn"]


@pytest.mark.slow
async def test_sdk_reject_leaves_no_file(node: str, tmp_path: Path, project: Path) -> None:
    report, wire = await sdk_client(node, tmp_path, project, "--permission", "reject")
    [turn] = report["turns"]
    assert turn["stopReason"] == "end_turn"
    assert kinds(turn["updates"]) == TURN
    assert turn["updates"][2]["status"] == "failed"
    assert said(turn["updates"]).endswith("OK, I left hello.txt alone.")
    assert len(report["permissionRequests"]) == 1
    assert not (project / "hello.txt").exists()
    assert wire.stop_reasons() == ["end_turn"]


@pytest.mark.slow
async def test_sdk_second_turn_diffs_against_the_first(node: str, tmp_path: Path, project: Path) -> None:
    report, wire = await sdk_client(node, tmp_path, project, prompts=("one", "two"))
    assert [t["stopReason"] for t in report["turns"]] == ["end_turn", "end_turn"]
    first, second = (t["updates"] for t in report["turns"])
    check_announced(first[1], project, None, "one\n")
    check_announced(second[1], project, "one\n", "two\n")
    assert first[1]["toolCallId"] != second[1]["toolCallId"]
    assert len(report["permissionRequests"]) == 2
    assert (project / "hello.txt").read_text() == "two\n"
    assert wire.stop_reasons() == ["end_turn", "end_turn"]


@pytest.mark.slow
async def test_sdk_cancel_ends_the_turn_cancelled(node: str, tmp_path: Path, project: Path) -> None:
    # The client sends session/cancel on the first message chunk and answers any permission request with
    # "cancelled" (as ACP asks of a client that cancels): either way the turn ends cancelled, nothing written.
    report, wire = await sdk_client(node, tmp_path, project, "--cancel-after-update", "--permission", "cancel")
    [turn] = report["turns"]
    assert turn["stopReason"] == "cancelled"
    assert kinds(turn["updates"])[0] == "agent_message_chunk"
    assert "completed" not in [u.get("status") for u in turn["updates"]]
    assert not (project / "hello.txt").exists()
    assert wire.stop_reasons() == ["cancelled"]
    sent = wire.transcript().sent_by("client")
    assert {"sessionId": report["sessionId"]} in [m["params"] for m in sent if m.get("method") == "session/cancel"]
