"""What the real-process tests of the client-facing features share (``tests/e2e/test_*_process.py``): the
environment of an agent talking to the scripted OpenAI-compatible server, and a prompt, a ``session/new``
and a ``session/load`` over real pipes that return what the agent showed for them. Every message the agent
writes is validated by :class:`~tests.support.helpers_process.AgentProcess`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.wires import ChatWire
from tests.support.helpers_process import AgentProcess, agent_env

KEY = "sk-test-key"


def env_for(tmp_path: Path, server: ScriptedOpenAIServer | None, **extra: str) -> dict[str, str]:
    """An agent on ``server`` (with :data:`KEY`), its sessions under ``tmp_path / "data"``; the config file is
    the default one, ``tmp_path / "home" / ".config" / "refagent" / "config.toml"`` (none unless written)."""
    model: dict[str, str] = {}
    if server is not None:
        model = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "REFAGENT_MODEL": "test-model"}
    return agent_env(tmp_path / "home", **model, XDG_DATA_HOME=str(tmp_path / "data"), **extra)


def config_path(tmp_path: Path) -> Path:
    """The default config file of an agent started with :func:`env_for`."""
    return tmp_path / "home" / ".config" / "refagent" / "config.toml"


def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "refagent" / "sessions"


async def answered(agent: AgentProcess, msg_id: int, sid: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read until the response to ``msg_id``, allowing every permission asked; its response and the updates
    of ``sid`` (of any session if None) that came before it."""
    shown: list[dict[str, Any]] = []
    while True:
        message = await agent.wait_for(lambda m: True)
        if message.get("method") == "session/update":
            if sid is None or message["params"]["sessionId"] == sid:
                shown.append(message["params"]["update"])
        elif message.get("method") == "session/request_permission":
            option = next(o for o in message["params"]["options"] if o["kind"] == "allow_once")
            outcome = {"outcome": "selected", "optionId": option["optionId"]}
            await agent.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
        elif message.get("id") == msg_id and "method" not in message:
            return message, shown


async def prompt(agent: AgentProcess, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run a prompt; its result and the updates of the turn."""
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    response, shown = await answered(agent, await agent.send_request("session/prompt", params), sid)
    assert "result" in response, f"{response}\n{agent.stderr()[-3000:]}"
    return response["result"], shown


async def load(agent: AgentProcess, sid: str, cwd: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``session/load``: its result and the updates it replayed before it."""
    params = {"sessionId": sid, "cwd": str(cwd), "mcpServers": []}
    response, replayed = await answered(agent, await agent.send_request("session/load", params), sid)
    assert "result" in response, f"{response}\n{agent.stderr()[-3000:]}"
    return response["result"], replayed


async def after_opening(agent: AgentProcess, sid: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` updates of ``sid`` (waiting for them): what a session hears after its response."""
    while len(agent.transcript.updates(sid)) < count:
        await agent.wait_for(lambda m: m.get("method") == "session/update" and m["params"]["sessionId"] == sid)
    return agent.transcript.updates(sid)[:count]


def said(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"].get("text", "") for u in updates if u["sessionUpdate"] == kind)


def thread(updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The messages of ``updates`` as (kind, text); a compaction as (kind, status)."""
    out = []
    for u in updates:
        kind = u["sessionUpdate"]
        if kind == "compaction_update":
            out.append((kind, u["status"]))
        elif kind in ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk"):
            out.append((kind, u["content"]["text"]))
    return out


async def prompted_sessions(tmp_path: Path, check: Any, env: dict[str, str], *places: tuple[Path, str]) -> list[str]:
    """A session in each directory (made if missing), with one prompt (its title), by one agent started with
    ``env``; their ids, oldest first."""
    ids = []
    async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
        await agent.initialize()
        for cwd, text in places:
            cwd.mkdir(parents=True, exist_ok=True)
            sid = await agent.new_session(cwd)
            await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
            ids.append(sid)
    return ids


def plan_in_parts(project: Path, steps: int) -> list[Turn]:
    """A tool loop of ``steps`` requests over ``project``: a file for each step but the last, read with a
    thought, then an answer. Each file is a few hundred tokens: what a step adds outweighs the system prompt
    and tools by the end, so that a prompt cache's 80% needs each step to read the previous step's write,
    not the system prompt's alone."""
    for step in range(steps - 1):
        (project / f"part{step}.txt").write_text("".join(f"part {step}, line {n} of the plan\n" for n in range(60)))
    reads = [
        Turn(reasoning=f"Next, part {step}.", tool_calls=[ToolCall("read_file", {"path": f"part{step}.txt"})])
        for step in range(steps - 1)
    ]
    return [*reads, Turn(text="I have read every part.")]


def chat_wire(server: ScriptedOpenAIServer) -> ChatWire:
    """The scripted server's Chat Completions wire (its usages, its signatures)."""
    found = server.wire("/chat/completions")
    assert isinstance(found, ChatWire)
    return found


def notes_read_with_thinking(project: Path) -> list[Turn]:
    """A project with ``notes.txt``, and a model that thinks before it reads them and before it answers: the
    tool loop in which a thinking model's reasoning must come back, signed ("I should read the notes.")."""
    (project / "notes.txt").write_text("remember the milk\n")
    return [
        Turn(reasoning="I should read the notes.", tool_calls=[ToolCall("read_file", {"path": "notes.txt"})]),
        Turn(reasoning="They mention milk.", text="It says to remember the milk."),
    ]
