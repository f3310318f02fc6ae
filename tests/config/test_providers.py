"""Providers by name: the data file, ``provider/model`` names, a key variable alone, and overrides."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from refagent.config import DEFAULT_OPENAI_MODEL, add_arguments, load, missing_key
from refagent.config.clients import find as find_kind
from refagent.config.providers import FACT_KEYS, built_in, facts_for, split_name
from refagent.errors import ConfigError
from refagent.llm.profiles import ANTHROPIC_CLIENT, DEFAULT_CLIENT, RESPONSES_CLIENT

NAMED_IN_THE_ISSUE = (
    "openai",
    "anthropic",
    "openrouter",
    "gemini",
    "deepseek",
    "groq",
    "mistral",
    "xai",
    "ollama",
    "lmstudio",
    "llamacpp",
    "vllm",
)


@pytest.fixture(autouse=True)
def user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def with_file(tmp_path: Path, text: str, **env: str) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return {"REFAGENT_CONFIG": str(path), **env}


# -- the data file -------------------------------------------------------------------------------


def test_the_data_file_names_every_provider_with_a_kind_that_exists() -> None:
    providers = built_in()
    assert set(NAMED_IN_THE_ISSUE) <= set(providers)
    for provider in providers.values():
        assert provider.base_url.startswith(("https://", "http://127.0.0.1:")), provider.id
        find_kind(provider.client, provider.id)  # raises for a kind that is not registered
        if provider.local:
            assert provider.key_env is None
            continue
        assert provider.key_env, provider.id
        assert provider.key_env.endswith("_API_KEY"), provider.id
        assert provider.default_model in provider.models, provider.id
        for name, facts in provider.models.items():
            assert set(facts) <= FACT_KEYS.keys() | {"reasoning_effort"}, name
            assert facts["context_window"] >= 8192, name
            assert facts.get("input_price", 0) >= facts.get("cached_input_price", 0), name


def test_login_suggests_the_data_files_openai_model() -> None:
    assert built_in()["openai"].default_model == DEFAULT_OPENAI_MODEL


def test_the_native_apis_are_the_defaults_of_their_providers() -> None:
    assert built_in()["openai"].client == RESPONSES_CLIENT
    assert built_in()["anthropic"].client == ANTHROPIC_CLIENT
    assert built_in()["gemini"].client == DEFAULT_CLIENT


@pytest.mark.parametrize(
    ("name", "provider", "model"),
    [
        ("anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("openrouter/anthropic/claude-sonnet-4.5", "openrouter", "anthropic/claude-sonnet-4.5"),
        ("groq/openai/gpt-oss-120b", "groq", "openai/gpt-oss-120b"),
        ("OpenAI/gpt-5.1", "openai", "gpt-5.1"),
        ("anthropic/", "anthropic", "claude-sonnet-4-5"),
    ],
)
def test_provider_slash_model(name: str, provider: str, model: str) -> None:
    found = split_name(name, built_in())
    assert found is not None
    assert (found[0].id, found[1]) == (provider, model)


@pytest.mark.parametrize("name", ["gpt-5", "meta-llama/Llama-3-8b", ""])
def test_a_name_whose_first_part_is_no_provider_is_a_model(name: str) -> None:
    assert split_name(name, built_in()) is None


def test_a_dated_model_takes_its_familys_facts() -> None:
    anthropic = built_in()["anthropic"]
    assert facts_for(anthropic, "claude-sonnet-4-5-20250929") == anthropic.models["claude-sonnet-4-5"]
    assert facts_for(anthropic, "claude-unknown") == {}


# -- a key variable alone, and names -------------------------------------------------------------


def test_anthropic_api_key_alone_is_a_working_profile() -> None:
    loaded = load(None, {"ANTHROPIC_API_KEY": "sk-ant-1"})
    [profile] = loaded.profiles
    assert (profile.id, profile.client, profile.model, profile.api_key) == (
        "anthropic",
        ANTHROPIC_CLIENT,
        "claude-sonnet-4-5",
        "sk-ant-1",
    )
    assert profile.endpoint == "https://api.anthropic.com"
    assert profile.context_window == 200_000
    assert profile.input_price == pytest.approx(3e-6)
    assert profile.cached_input_price == pytest.approx(0.3e-6)
    assert profile.cache_write_price == pytest.approx(3.75e-6)
    assert profile.reasoning_efforts == ("low", "medium", "high")
    assert missing_key(profile) is None


def test_anthropic_base_url_is_honoured() -> None:
    profile = load(None, {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "https://proxy.example.com"}).profile
    assert profile.endpoint == "https://proxy.example.com"


def test_every_key_set_is_a_profile_in_the_picker_openai_first() -> None:
    loaded = load(None, {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "GROQ_API_KEY": "g"})
    assert [p.id for p in loaded.profiles] == ["openai", "anthropic", "groq"]
    assert loaded.profile.id == "openai"
    assert loaded.profile.client == RESPONSES_CLIENT
    assert loaded.profile.name == f"OpenAI: {DEFAULT_OPENAI_MODEL}"


@pytest.mark.parametrize("variable", ["REFAGENT_MODEL", "HARBOR_ACP_REQUESTED_MODEL"])
def test_a_provider_model_name_chooses_the_profile(variable: str) -> None:
    loaded = load(None, {"OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a", variable: "anthropic/claude-opus-4-5"})
    assert loaded.profile.id == "anthropic"
    assert loaded.profile.model == "claude-opus-4-5"
    assert loaded.profile.input_price == pytest.approx(5e-6)
    assert {p.id for p in loaded.profiles} == {"openai", "anthropic"}


def test_the_flag_beats_the_variables_and_harbor_comes_last() -> None:
    env = {"ANTHROPIC_API_KEY": "a", "HARBOR_ACP_REQUESTED_MODEL": "anthropic/claude-haiku-4-5"}
    assert load(None, env).profile.model == "claude-haiku-4-5"
    assert load(None, {**env, "REFAGENT_MODEL": "anthropic/claude-opus-4-5"}).profile.model == "claude-opus-4-5"
    assert load(parse("--model", "anthropic/claude-sonnet-4-5"), env).profile.model == "claude-sonnet-4-5"


def test_a_provider_without_its_key_says_which_variable_to_set() -> None:
    profile = load(parse("--model", "deepseek/deepseek-chat"), {}).profile
    assert (profile.id, profile.base_url) == ("deepseek", "https://api.deepseek.com/v1")
    message = missing_key(profile)
    assert message is not None
    assert "DEEPSEEK_API_KEY" in message


def test_a_local_server_by_name_needs_no_key() -> None:
    profile = load(parse("--model", "ollama/qwen3-coder"), {"OPENAI_API_KEY": "o"}).profile
    assert (profile.base_url, profile.model, profile.api_key) == ("http://127.0.0.1:11434/v1", "qwen3-coder", None)
    assert missing_key(profile) is None


def test_a_plain_model_name_changes_the_key_profiles_model_and_its_facts() -> None:
    profile = load(parse("--model", "gpt-4.1"), {"OPENAI_API_KEY": "o"}).profile
    assert (profile.id, profile.model, profile.context_window) == ("openai", "gpt-4.1", 1047576)
    assert profile.reasoning_efforts == ()


def test_a_name_with_a_profile_of_the_file_uses_that_profile(tmp_path: Path) -> None:
    text = '[profiles.anthropic]\nclient = "anthropic"\napi_key = "file-key"\nmodel = "claude-haiku-4-5"\n'
    profile = load(parse("--model", "anthropic/claude-opus-4-5"), with_file(tmp_path, text)).profile
    assert (profile.source.endswith("[profiles.anthropic]"), profile.model, profile.api_key) == (
        True,
        "claude-opus-4-5",
        "file-key",
    )


# -- the config file -----------------------------------------------------------------------------


def test_the_config_file_overrides_a_provider_and_adds_its_own(tmp_path: Path) -> None:
    text = """
[providers.anthropic]
default_model = "claude-haiku-4-5"
[providers.anthropic.models."claude-haiku-4-5"]
input_price = 0.8

[providers.work]
base_url = "https://llm.example.com/v1"
key_env = "WORK_API_KEY"
"""
    env = with_file(tmp_path, text, ANTHROPIC_API_KEY="a")
    anthropic = load(None, env).profile
    assert (anthropic.model, anthropic.context_window) == ("claude-haiku-4-5", 200_000)
    assert anthropic.input_price == pytest.approx(0.8e-6)
    work = load(parse("--model", "work/big"), {**env, "WORK_API_KEY": "w"}).profile
    assert (work.id, work.base_url, work.model, work.api_key, work.client) == (
        "work",
        "https://llm.example.com/v1",
        "big",
        "w",
        DEFAULT_CLIENT,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[providers.work]\nkey_env = "W"\n', "needs base_url"),
        ('[providers.openai]\ncolour = "blue"\n', "unknown key 'colour'"),
        ('[providers.openai.models.gpt-5]\ncontext_window = "big"\n', "context_window must be a whole number"),
        ('providers = "openai"\n', "providers must be a table"),
    ],
)
def test_provider_mistakes_name_the_table(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(None, with_file(tmp_path, text, OPENAI_API_KEY="o"))


def test_a_file_profile_on_openais_host_speaks_the_responses_api_with_what_is_known(tmp_path: Path) -> None:
    text = '[profiles.fast]\nmodel = "gpt-5-mini"\ncontext_window = 100000\n\n[profiles.chat]\nclient = "openai"\n'
    fast, chat = load(None, with_file(tmp_path, text, OPENAI_API_KEY="o")).profiles
    assert (fast.client, fast.context_window) == (RESPONSES_CLIENT, 100_000)
    assert fast.input_price == pytest.approx(0.25e-6)
    assert fast.reasoning_efforts == ("minimal", "low", "medium", "high")
    assert chat.client == DEFAULT_CLIENT  # said otherwise


def test_a_default_effort_is_checked_against_the_levels_known_of_the_model(tmp_path: Path) -> None:
    text = '[profiles.codex]\nmodel = "gpt-5.1-codex"\ndefault_reasoning_effort = "high"\n'
    [codex] = load(None, with_file(tmp_path, text, OPENAI_API_KEY="o")).profiles
    assert (codex.reasoning_efforts, codex.default_reasoning_effort) == (("low", "medium", "high"), "high")
    with pytest.raises(ConfigError, match="not one of reasoning_effort"):
        load(None, with_file(tmp_path, text.replace('"high"', '"extreme"'), OPENAI_API_KEY="o"))


def test_a_file_profile_of_the_anthropic_kind_honours_anthropic_base_url(tmp_path: Path) -> None:
    text = '[profiles.claude]\nclient = "anthropic"\nmodel = "claude-haiku-4-5"\n'
    env = with_file(tmp_path, text, ANTHROPIC_API_KEY="a", ANTHROPIC_BASE_URL="https://proxy.example.com")
    [claude] = load(None, env).profiles
    assert (claude.endpoint, claude.api_key, claude.context_window) == ("https://proxy.example.com", "a", 200_000)
    [plain] = load(None, with_file(tmp_path, text, ANTHROPIC_API_KEY="a")).profiles
    assert (plain.endpoint, plain.api_key) == ("https://api.anthropic.com", "a")


def test_a_plain_model_name_changes_a_file_profiles_facts_but_not_what_the_file_says(tmp_path: Path) -> None:
    """A file's profile of one model, run with ``--model`` naming another: what is known of the model named
    fills in what the table leaves out (not the table's model's window and prices); what it says stays."""
    text = '[profiles.work]\nbase_url = "https://api.openai.com/v1"\napi_key = "k"\nmodel = "gpt-5-mini"\n'
    gpt_41 = load(parse("--model", "gpt-4.1"), with_file(tmp_path, text)).profile
    assert (gpt_41.id, gpt_41.model, gpt_41.context_window) == ("work", "gpt-4.1", 1047576)
    assert gpt_41.reasoning_efforts == ()  # gpt-5-mini's levels were the table's model's, not gpt-4.1's
    assert gpt_41.input_price == load(parse("--model", "openai/gpt-4.1"), {"OPENAI_API_KEY": "o"}).profile.input_price
    said = text + "context_window = 5000\ninput_price = 1.0\n"
    kept = load(parse("--model", "gpt-4.1"), with_file(tmp_path, said)).profile
    assert (kept.model, kept.context_window, kept.input_price, kept.api_key) == ("gpt-4.1", 5000, 1.0 / 1_000_000, "k")


def test_a_file_profile_of_a_providers_own_api_without_a_model_takes_its_default(tmp_path: Path) -> None:
    """A profile that speaks a provider's own API at its own host and names no model gets the provider's
    default (what its key variable alone gives), with what is known of it; behind another host (a proxy,
    whose names may differ) it stays without one; Chat Completions asks its endpoint's list, as before."""
    claude = load(None, with_file(tmp_path, '[profiles.claude]\nclient = "anthropic"\napi_key = "k"\n')).profile
    assert (claude.model, claude.context_window, claude.api_key) == ("claude-sonnet-4-5", 200000, "k")
    proxy = '[profiles.p]\nclient = "anthropic"\nbase_url = "https://proxy.example.com"\napi_key = "k"\n'
    assert load(None, with_file(tmp_path, proxy)).profile.model == ""
    gpt = load(None, with_file(tmp_path, '[profiles.o]\nbase_url = "https://api.openai.com/v1"\napi_key = "k"\n'))
    assert (gpt.profile.client, gpt.profile.model) == ("openai-responses", "gpt-5-mini")
    chat = '[profiles.c]\nbase_url = "http://127.0.0.1:9/v1"\n'
    assert load(None, with_file(tmp_path, chat)).profile.model == ""
