"""The model client kinds (refagent.config.clients): a profile names its kind, the registry makes the client,
a fork adds a kind, and a kind nobody registered is said plainly."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from refagent.config import clients, load
from refagent.config.clients import ClientKind, make_model, register, warm_up_for
from refagent.errors import ConfigError, ModelConfigError
from refagent.llm.demo import DemoModel, demo_profile
from refagent.llm.openai_client import OpenAIModel
from refagent.llm.profiles import DEFAULT_CLIENT, ModelProfile, missing_key, scripted_profile
from refagent.llm.protocol import Finished, ModelEvent, ModelRequest
from refagent.llm.retry import RetryPolicy
from refagent.llm.scripted import ScriptedModel
from refagent.settings import Settings

pytestmark = pytest.mark.anyio


class Silent:
    """A fork's client: says nothing, and remembers what it was made with."""

    def __init__(self, profile: ModelProfile, retry: RetryPolicy | None) -> None:
        self.profile = profile
        self.retry = retry

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield Finished("stop")


@pytest.fixture
def fork_kinds() -> Iterator[None]:
    """The registry as it was, after the test (kinds a test registers do not leak into the next)."""
    saved = dict(clients._KINDS)
    yield
    clients._KINDS.clear()
    clients._KINDS.update(saved)


def configured(tmp_path: Path, text: str, **env: str) -> list[ModelProfile]:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load(None, {"REFAGENT_CONFIG": str(path), **env}).profiles


def test_the_built_in_kinds() -> None:
    assert clients.kinds() == ["anthropic", "demo", "openai", "scripted"]
    assert isinstance(make_model(scripted_profile()), ScriptedModel)
    assert isinstance(make_model(demo_profile()), DemoModel)
    retry = RetryPolicy(attempts=2)
    made = make_model(ModelProfile("x", "x", base_url="http://localhost:1/v1"), retry)
    assert isinstance(made, OpenAIModel)
    assert made.retry == retry


def test_a_profile_without_client_is_openai(tmp_path: Path) -> None:
    [profile] = configured(tmp_path, '[profiles.a]\nbase_url = "http://localhost:1/v1"\n')
    assert profile.client == DEFAULT_CLIENT == "openai"


def test_a_profile_can_name_the_scripted_and_demo_models(tmp_path: Path) -> None:
    offline, demo = configured(tmp_path, '[profiles.off]\nclient = "scripted"\n[profiles.show]\nclient = "demo"\n')
    assert isinstance(make_model(offline), ScriptedModel)
    assert isinstance(make_model(demo), DemoModel)
    for profile in (offline, demo):  # no endpoint: no key, none read from the environment, named after the kind
        assert missing_key(profile) is None
        assert profile.api_key is None
    assert offline.name == "off (scripted model)"
    assert demo.description == "the first model listed via the demo model client"


def test_an_unknown_kind_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        configured(tmp_path, '[profiles.a]\nclient = "gemini"\n')
    message = str(info.value)
    assert "[profiles.a]: unknown model client 'gemini' (known: anthropic, demo, openai, scripted)" in message
    assert "refagent.config.clients.register" in message
    with pytest.raises(ConfigError, match="client must be a string"):
        configured(tmp_path, "[profiles.a]\nclient = 1\n")


def test_a_fork_registers_a_kind_the_file_then_names(tmp_path: Path, fork_kinds: None) -> None:
    register(ClientKind("silent", Silent, endpoint=False))
    assert "silent" in clients.kinds()
    [profile] = configured(tmp_path, '[retry]\nattempts = 2\n[profiles.s]\nclient = "silent"\nmodel = "m"\n')
    settings = Settings.from_config(load(None, {"REFAGENT_CONFIG": str(tmp_path / "config.toml")}))
    made = settings.make_model(settings.active_profile())
    assert isinstance(made, Silent)
    assert made.profile == profile
    assert made.retry == RetryPolicy(attempts=2)  # the configuration's retry policy reaches every kind
    assert settings.warm_up is None  # the kind has nothing to warm up


def test_a_kind_reads_its_own_key_only_for_its_own_hosts(tmp_path: Path, fork_kinds: None) -> None:
    register(ClientKind("vendor", Silent, key_env="VENDOR_KEY", key_hosts=frozenset({"api.vendor.example"})))
    own, elsewhere, vendors = configured(
        tmp_path,
        '[profiles.own]\nclient = "vendor"\n'
        '[profiles.elsewhere]\nclient = "vendor"\nbase_url = "https://proxy.example/v1"\n'
        '[profiles.plain]\nclient = "vendor"\nbase_url = "https://api.vendor.example/v1"\n',
        VENDOR_KEY="vk-1",
        OPENAI_API_KEY="sk-never-sent-to-a-vendor",
    )
    assert (own.api_key, own.api_key_env) == ("vk-1", "VENDOR_KEY")
    assert (elsewhere.api_key, elsewhere.api_key_env) == (None, None)  # a key never goes to another host
    assert vendors.api_key == "vk-1"  # its own host, named
    assert missing_key(elsewhere) is not None  # an endpoint that is not this machine's needs one


def test_register_refuses_a_taken_or_odd_name(fork_kinds: None) -> None:
    with pytest.raises(ValueError, match="registered already"):
        register(ClientKind("openai", Silent))
    with pytest.raises(ValueError, match="letters, digits"):
        register(ClientKind("two words", Silent))
    register(ClientKind("openai", Silent), replace=True)  # a fork may swap a built-in kind's client
    assert isinstance(make_model(ModelProfile("x", "x")), Silent)


async def test_a_profile_made_in_code_with_an_unknown_kind_fails_each_turn() -> None:
    model = make_model(ModelProfile("x", "x", client="nobody"))
    with pytest.raises(ModelConfigError, match="unknown model client 'nobody'"):
        async for _ in model.stream(ModelRequest(messages=[{"role": "user", "content": "hi"}])):
            pass


async def test_warm_up_runs_each_kind_once(fork_kinds: None) -> None:
    ran: list[str] = []

    async def warm() -> None:
        ran.append("silent")

    register(ClientKind("silent", Silent, warm_up=warm, endpoint=False))
    profiles = [ModelProfile(name, name, client="silent") for name in ("a", "b")] + [scripted_profile()]
    step = warm_up_for(profiles)
    assert step is not None
    await step()
    assert ran == ["silent"]
    assert warm_up_for([scripted_profile(), demo_profile()]) is None
