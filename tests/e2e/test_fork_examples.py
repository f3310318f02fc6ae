"""The fork examples run as real agents: each ``examples/*/agent.py`` is started as a process over pipes,
as an editor starts it, every message it sends validated against the ACP schema (the ``check`` fixture),
and what the fork changes is there, before and after an ``authenticate`` that reads the configuration
again (``cli.main(customise=...)`` applies the change to the settings ``reload`` makes, too).

- ``examples/custom_tool/agent.py``: the model is offered the ``outline`` tool, and calls it, on a model
  the configuration names; after the configuration changes and ``authenticate`` reads it (another model),
  the tool is still offered and still works.
- ``examples/custom_model/agent.py``: a profile of the config file names the client kind ``echo`` that the
  example registers, and the echo model answers, before and after ``authenticate``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import ROOT, AgentProcess
from tests.support.process_sessions import config_path, env_for, prompt, said

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EXAMPLES = ROOT / "examples"
CUSTOM_TOOL = EXAMPLES / "custom_tool" / "agent.py"
CUSTOM_MODEL = EXAMPLES / "custom_model" / "agent.py"
TESTED = {CUSTOM_TOOL, CUSTOM_MODEL}


def test_every_fork_example_is_run_here() -> None:
    """A new ``examples/<name>/agent.py`` gets its test in this file."""
    assert set(EXAMPLES.glob("*/agent.py")) == TESTED


def fork(tmp_path: Path, example: Path, check: Any) -> Any:
    """``example`` as an agent process, with the default config file of :func:`config_path` (no model from
    the environment)."""
    return AgentProcess.spawn(tmp_path, [sys.executable, str(example)], check=check, env=env_for(tmp_path, None))


def write_config(tmp_path: Path, text: str) -> None:
    path = config_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def offered(request: Any) -> list[str]:
    """The tool names a chat request offered the model."""
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


def tool_results(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


async def test_the_custom_tool_is_offered_and_survives_authenticate(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "shapes.py").write_text("class Square:\n    def area(self):\n        return 1\n")
    outline = ToolCall("outline", {"path": "shapes.py"})
    turns = [Turn(tool_calls=[outline]), Turn(text="One class."), Turn(tool_calls=[outline]), Turn(text="Still.")]
    with ScriptedOpenAIServer(turns) as server:
        profile = f'[profiles.local]\nbase_url = "{server.base_url}"\nmodel = "first-model"\n'
        write_config(tmp_path, profile)
        async with fork(tmp_path, CUSTOM_TOOL, check) as agent:
            await agent.initialize()
            first = await agent.new_session(project)
            result, updates = await prompt(agent, first, "outline shapes.py")
            assert result["stopReason"] == "end_turn", agent.stderr()[-3000:]
            assert said(updates) == "One class."

            write_config(tmp_path, profile.replace("first-model", "second-model"))
            assert await agent.result("authenticate", {"methodId": "api-key"}) == {}
            second = await agent.new_session(project)
            result, updates = await prompt(agent, second, "again")
            assert result["stopReason"] == "end_turn", agent.stderr()[-3000:]
            assert said(updates) == "Still."
        requests = server.chat_requests
    assert [r.body["model"] for r in requests] == ["first-model"] * 2 + ["second-model"] * 2  # read again
    for request in requests:
        assert "outline" in offered(request)
        assert "read_file" in offered(request)  # refagent's own tools stay
    for request in (requests[1], requests[3]):
        assert tool_results(request) == ["    1: class Square\n    2:     def area(self)"]


async def test_the_custom_model_answers_and_survives_authenticate(tmp_path: Path, check: Any) -> None:
    write_config(tmp_path, 'default_profile = "echo"\n\n[profiles.echo]\nclient = "echo"\nmodel = "parrot"\n')
    async with fork(tmp_path, CUSTOM_MODEL, check) as agent:
        init = await agent.initialize()
        # A configured model that needs no key: the sign-in method is not the "run refagent login" one.
        assert "refagent login" not in init["authMethods"][0]["description"]
        first = await agent.new_session(tmp_path)
        result, updates = await prompt(agent, first, "hello there")
        assert result["stopReason"] == "end_turn", agent.stderr()[-3000:]
        assert said(updates) == "parrot: hello there"

        write_config(tmp_path, 'default_profile = "echo"\n\n[profiles.echo]\nclient = "echo"\nmodel = "myna"\n')
        assert await agent.result("authenticate", {"methodId": "api-key"}) == {}
        second = await agent.new_session(tmp_path)
        result, updates = await prompt(agent, second, "once more")
        assert result["stopReason"] == "end_turn", agent.stderr()[-3000:]
        assert said(updates) == "myna: once more"


async def test_plain_refagent_does_not_know_the_forks_client_kind(tmp_path: Path, check: Any) -> None:
    """The config file names a kind only the fork registers: plain refagent says so at the first prompt."""
    write_config(tmp_path, '[profiles.echo]\nclient = "echo"\n')
    async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, None)) as agent:
        await agent.initialize()
        session = await agent.new_session(tmp_path)
        _, updates = await prompt(agent, session, "hello")
    shown = said(updates)
    assert "[profiles.echo]: unknown model client 'echo' (known: anthropic, demo, openai, scripted)" in shown
    assert "refagent.config.clients.register" in shown
