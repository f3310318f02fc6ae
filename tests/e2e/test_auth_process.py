"""Sign-in with a real ``refagent`` process: the ``terminal`` method is advertised only to a client with
``auth.terminal`` (or the older ``_meta["terminal-auth"]``), in the answer start-up gives before the event
loop; ``logout`` forgets the key stored in the config file and a new session then needs one (``-32000``);
and ``refagent <the agent's options> login``, as an editor runs the terminal method, starts the login in a
pseudo-terminal, saves to the config file those options name, and the agent started with them then
signs in with ``authenticate``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess, agent_env
from tests.support.process_sessions import config_path, env_for, prompt, said
from tests.support.terminal import Terminal

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-stored-0123456789"


@pytest.mark.parametrize(
    ("capabilities", "terminal"),
    [
        (None, False),
        ({"auth": {"terminal": False}}, False),
        ({"auth": {"terminal": True}}, True),
        ({"_meta": {"terminal-auth": True}}, True),
    ],
    ids=["none", "terminal-false", "auth-terminal", "meta-terminal-auth"],
)
async def test_the_terminal_method_only_for_a_client_that_runs_it(
    tmp_path: Path, check: Any, capabilities: dict[str, Any] | None, terminal: bool
) -> None:
    async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, None)) as agent:
        result = await agent.initialize(capabilities)
    methods = {m["id"]: m for m in result["authMethods"]}
    assert methods["api-key"].get("type", "agent") == "agent"
    assert "refagent login" in methods["api-key"]["description"]
    assert result["agentCapabilities"]["auth"] == {"logout": {}, "status": {}}  # a config file to forget keys in
    if terminal:
        assert methods["login"]["type"] == "terminal"
        assert methods["login"]["args"] == ["login"]
    else:
        assert set(methods) == {"api-key"}


async def test_logout_then_a_new_session_needs_a_key(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer(fallback=Turn(text="hello"), api_key=KEY) as server:
        path = config_path(tmp_path)
        path.parent.mkdir(parents=True)
        path.write_text(
            f'[profiles.work]\nbase_url = "{server.base_url}"\nmodel = "m"\nneeds_key = true\napi_key = "{KEY}"\n'
        )
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, None)) as agent:
            result = await agent.initialize()
            assert result["agentCapabilities"]["auth"] == {"logout": {}, "status": {}}
            sid = await agent.new_session(tmp_path)
            assert (await prompt(agent, sid, "hi"))[0]["stopReason"] == "end_turn"
            assert await agent.result("logout", {}) == {}
            assert "api_key" not in tomllib.loads(path.read_text())["profiles"]["work"]
            refused = await agent.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            again = await agent.request("authenticate", {"methodId": "api-key"})
        assert len(server.chat_requests) == 1
    assert refused["error"]["code"] == -32000
    assert "needs an API key" in refused["error"]["message"]
    assert again["error"]["code"] == -32000
    assert KEY not in refused["error"]["message"] + again["error"]["message"]


def test_login_after_the_log_file_option_prompts(tmp_path: Path) -> None:
    """``refagent --log-file X login``: the login starts (and asks where the endpoint is), on the default file."""
    env = agent_env(tmp_path / "home", PYTHONDONTWRITEBYTECODE="1", TERM="dumb")
    term = Terminal(["--log-file", str(tmp_path / "agent.log"), "login"], env, tmp_path / "login-stderr.txt")
    try:
        term.expect(rf"The settings go to {re.escape(str(config_path(tmp_path)))}\.")
        term.expect(r"Which endpoint\?")
        term.expect(r"or type a URL \[Enter: \d\]: ")
    finally:
        term.kill()
    assert not config_path(tmp_path).exists()


async def test_login_appended_to_the_agents_command_line(tmp_path: Path, check: Any) -> None:
    """The editor runs the agent's own command line with ``login`` appended, in a terminal."""
    path = tmp_path / "editor" / "refagent.toml"
    log = tmp_path / "agent.log"
    options = ["--log-file", str(log), "--config", str(path)]
    with ScriptedOpenAIServer(fallback=Turn(text="set up")) as server:  # local: no key needed
        env = agent_env(tmp_path / "home", PYTHONDONTWRITEBYTECODE="1", TERM="dumb")
        term = Terminal([*options, "login"], env, tmp_path / "login-stderr.txt")
        try:
            term.expect(rf"The settings go to {re.escape(str(path))}\.")
            term.expect(r"or type a URL \[Enter: \d\]: ")
            term.type(server.base_url + "\r")
            term.expect(r"Choose a model: a number or a name \[Enter: scripted-model\]: ")
            term.type("\r")
            term.expect(r"\(input hidden; Enter: none\): ")
            term.type("\r")
            # the scripted server says no context window: login asks for it
            term.expect(r"context window in tokens, e\.g\. 32k \[Enter: [^\]]+\]: ")
            term.type("32k\r")
            term.expect(r"Name of the profile \[Enter: [^\]]+\]: ")
            term.type("mine\r")
            term.expect(r"Saved the default profile 'mine'")
            code = term.wait()
        finally:
            term.kill()
        assert code == 0, term.screen + term.stderr.read_text()
        saved = tomllib.loads(path.read_text())["profiles"]["mine"]
        assert saved["base_url"] == server.base_url
        assert saved["context_window"] == 32 * 1024

        # the agent started with the same options signs in and answers from the profile just saved
        async with AgentProcess.start(tmp_path, *options, check=check, env=agent_env(tmp_path / "home")) as agent:
            await agent.initialize({"auth": {"terminal": True}})
            assert await agent.result("authenticate", {"methodId": "api-key"}) == {}
            sid = await agent.new_session(tmp_path)
            _, shown = await prompt(agent, sid, "hi")
    assert said(shown) == "set up"
    assert server.chat_requests[-1].body["model"] == "scripted-model"
