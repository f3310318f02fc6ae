"""The ``thought_level`` config option in a real ``refagent`` process whose config file gives a profile
``reasoning_effort = [...]``: the level reaches the Chat Completions request body as ``reasoning_effort``
(the real OpenAI adapter, the scripted server records the bodies), changes with
``session/set_config_option``, is refused when invalid (``-32602``), and is neither offered nor sent once the
session switches to a profile without efforts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.process_sessions import prompt

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def config(server: ScriptedOpenAIServer) -> str:
    return (
        'default_profile = "thinker"\n\n'
        "[profiles.thinker]\n"
        f'base_url = "{server.base_url}"\n'
        'model = "o-think"\n'
        'reasoning_effort = ["low", "medium", "high"]\n\n'
        "[profiles.plain]\n"
        f'base_url = "{server.base_url}"\n'
        'model = "plain-model"\n'
    )


def thought_level(options: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((o for o in options if o["id"] == "thought_level"), None)


async def test_the_level_reaches_the_request_body(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ScriptedOpenAIServer(fallback=Turn(text="ok")) as server:  # local: no key needed
        path = tmp_path / "config.toml"
        path.write_text(config(server))
        env = agent_env(tmp_path / "home", REFAGENT_CONFIG=str(path), XDG_DATA_HOME=str(tmp_path / "data"))
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            opened = await agent.result("session/new", {"cwd": str(project), "mcpServers": []})
            sid = opened["sessionId"]
            await prompt(agent, sid, "at the default")

            def set_option(config_id: str, value: Any) -> Any:
                return agent.request(
                    "session/set_config_option", {"sessionId": sid, "configId": config_id, "value": value}
                )

            high = (await set_option("thought_level", "high"))["result"]["configOptions"]
            await prompt(agent, sid, "harder")
            refused = await set_option("thought_level", "maximum")
            plain = (await set_option("model", "plain"))["result"]["configOptions"]
            await prompt(agent, sid, "plainly")
            gone = await set_option("thought_level", "high")
        bodies = [r.body for r in server.chat_requests]

    level = thought_level(opened["configOptions"])
    assert level is not None
    assert (level["category"], level["currentValue"]) == ("thought_level", "medium")
    assert [o["value"] for o in level["options"]] == ["low", "medium", "high"]
    assert (thought_level(high) or {}).get("currentValue") == "high"
    assert refused["error"]["code"] == -32602
    assert "unknown reasoning effort 'maximum'" in refused["error"]["message"]
    assert thought_level(plain) is None
    assert gone["error"]["code"] == -32602

    assert [(b["model"], b.get("reasoning_effort")) for b in bodies] == [
        ("o-think", "medium"),
        ("o-think", "high"),
        ("plain-model", None),
    ]
    assert "reasoning_effort" not in bodies[2]  # not sent at all, not sent as null


async def test_a_profile_without_efforts_sends_none(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer(fallback=Turn(text="ok")) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, REFAGENT_MODEL="m")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            opened = await agent.result("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            await prompt(agent, opened["sessionId"], "hi")
    assert thought_level(opened["configOptions"]) is None
    assert "reasoning_effort" not in server.chat_requests[0].body
