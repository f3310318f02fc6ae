"""The answers start-up gives before the event loop (refagent.server.handshake): what they say, and
what they leave to the agent."""

from __future__ import annotations

import pytest

from refagent.acp.errors import AuthRequired, InvalidParams
from refagent.llm.profiles import ModelProfile
from refagent.server.handshake import Started, answer_initialize, early_initialize, early_new_session
from refagent.settings import OwnSandboxes, Settings
from tests.support.acp_schema import validate_agent_message


def test_answer_is_valid_and_honest() -> None:
    keyed = ModelProfile("openai", "OpenAI", model="gpt", api_key_env="OPENAI_API_KEY", images=True)
    with_store = answer_initialize(Settings(profiles=[keyed]), True, {"protocolVersion": 2})
    validate_agent_message({"jsonrpc": "2.0", "id": 0, "result": with_store}, "initialize")
    assert with_store["protocolVersion"] == 1
    assert with_store["agentCapabilities"]["loadSession"] is True
    assert with_store["agentCapabilities"]["promptCapabilities"]["image"] is True
    assert with_store["authMethods"][0]["id"] == "api-key"
    without = answer_initialize(Settings(store=None), False, {"protocolVersion": 1})
    assert without["agentCapabilities"]["loadSession"] is False
    session = without["agentCapabilities"]["sessionCapabilities"]
    assert set(session) == {"close", "additionalDirectories", "systemPrompt", "status"}
    # a client's system prompt, appended or in place of the built-in instructions (unstable)
    assert without["agentCapabilities"]["sessionCapabilities"]["systemPrompt"] == {"mode": {"override": {}}}
    assert without["authMethods"] == []
    with pytest.raises(InvalidParams, match="protocolVersion"):
        answer_initialize(Settings(), True, {})


def initialized(settings: Settings) -> Started:
    started = Started()
    assert early_initialize(settings, started, {"protocolVersion": 1}) is not None
    return started


def test_what_the_agent_refuses_is_left_to_it() -> None:
    # Start-up leaves the request to the agent, which answers it with the error (and keeps serving).
    settings = Settings(store=None)
    started = initialized(settings)
    with pytest.raises(InvalidParams):
        early_new_session(settings, started, {"cwd": "relative", "mcpServers": []})
    with pytest.raises(InvalidParams):
        early_new_session(settings, started, {"cwd": "/"})  # mcpServers is required
    keyless = ModelProfile("remote", "Remote", model="m", base_url="https://example.invalid/v1", api_key_env="K")
    with pytest.raises(AuthRequired):
        early_new_session(Settings(profiles=[keyless], store=None), started, {"cwd": "/", "mcpServers": []})
    assert started.opened == []


def test_a_sandbox_that_says_nothing_before_it_is_made_leaves_it_to_the_agent() -> None:
    own = OwnSandboxes(lambda cwd, additional: pytest.fail("not made before the loop"))
    settings = Settings(make_sandbox=own, store=None)
    started = initialized(settings)
    assert early_new_session(settings, started, {"cwd": "/", "mcpServers": []}) is None
    assert started.opened == []


def test_a_session_new_before_initialize_and_a_v2_initialize_are_left_to_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(store=None)
    started = Started()
    assert early_new_session(settings, started, {"cwd": "/", "mcpServers": []}) is None
    monkeypatch.setenv("REFAGENT_ACP_V2", "1")
    assert early_initialize(settings, started, {"protocolVersion": 2}) is None  # the v2 bridge answers it
    assert started.client is None
    assert early_initialize(settings, started, {"protocolVersion": 1}) is not None
    assert started.client == {"protocolVersion": 1}
