"""Configuration (refagent.config): file < environment < flags, profiles, keys, and what goes wrong."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refagent import config
from refagent.config import DEFAULT_OPENAI_MODEL, Config, add_arguments, load, missing_key
from refagent.config.clients import make_model
from refagent.config.limits import SubagentLimits
from refagent.errors import ConfigError
from refagent.llm.openai_client import OpenAIModel
from refagent.llm.profiles import SCRIPTED, ModelProfile, is_local, needs_key, scripted_profile
from refagent.llm.retry import RetryPolicy
from refagent.llm.scripted import ScriptedModel
from refagent.settings import Settings

TWO_PROFILES = """
default_profile = "local"
max_requests = 12

[profiles.work]
base_url = "https://llm.example.com/v1"
api_key_env = "WORK_KEY"
model = "big-model"
name = "Work"
context_window = 200000
images = true
input_price = 3
output_price = 15.5
currency = "EUR"

[profiles.local]
base_url = "http://localhost:11434/v1"
model = "qwen2.5-coder"
"""


@pytest.fixture(autouse=True)
def user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default config directory into ``tmp_path``: the developer's own config never leaks in."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "refagent"


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def with_file(path: Path, **env: str) -> dict[str, str]:
    return {"REFAGENT_CONFIG": str(path), **env}


# -- nothing, or only the environment -----------------------------------------------------------


def test_nothing_configured_means_the_scripted_profile_only() -> None:
    loaded = load(None, {})
    assert loaded.profiles == [scripted_profile()]
    assert loaded.profile.scripted
    assert loaded.path is None
    assert loaded.max_requests is None
    assert missing_key(loaded.profile) is None
    assert isinstance(make_model(loaded.profile), ScriptedModel)


def test_openai_api_key_alone_is_enough() -> None:
    loaded = load(None, {"OPENAI_API_KEY": "sk-1"})
    [profile] = loaded.profiles
    assert (profile.id, profile.model, profile.base_url, profile.api_key, profile.client) == (
        "openai",
        DEFAULT_OPENAI_MODEL,
        "https://api.openai.com/v1",
        "sk-1",
        "openai-responses",  # OpenAI's own API on its own host
    )
    assert profile.name == f"OpenAI: {DEFAULT_OPENAI_MODEL}"
    assert profile.endpoint == "https://api.openai.com/v1"
    assert missing_key(profile) is None
    assert isinstance(make_model(profile), OpenAIModel)


def test_a_local_base_url_alone_needs_no_key_and_no_model() -> None:
    [profile] = load(None, {"OPENAI_BASE_URL": "http://127.0.0.1:1234/v1"}).profiles
    assert (profile.id, profile.model, profile.api_key) == ("custom", "", None)
    assert "local" in profile.name
    assert missing_key(profile) is None


def test_a_remote_base_url_without_a_key_says_what_to_set() -> None:
    [profile] = load(None, {"OPENAI_BASE_URL": "https://openrouter.ai/api/v1", "REFAGENT_MODEL": "x/y"}).profiles
    assert profile.model == "x/y"
    message = missing_key(profile)
    assert message is not None
    assert "OPENAI_API_KEY" in message
    assert "openrouter.ai" in message


def test_empty_variables_count_as_unset() -> None:
    assert load(None, {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": " ", "REFAGENT_MODEL": ""}).profile.scripted


def test_flags_alone_form_a_profile() -> None:
    [profile] = load(parse("--model", "gpt-4.1", "--base-url", "http://localhost:8000/v1"), {}).profiles
    assert (profile.model, profile.base_url) == ("gpt-4.1", "http://localhost:8000/v1")


# -- the file ----------------------------------------------------------------------------------


def test_several_profiles_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_PROFILES)
    loaded = load(None, with_file(path, WORK_KEY="wk-1"))
    assert [p.id for p in loaded.profiles] == ["work", "local"]
    assert loaded.default_profile == "local"
    assert loaded.max_requests == 12
    assert loaded.path == str(path)
    work, local = loaded.profiles
    assert work == ModelProfile(
        id="work",
        name="Work",
        model="big-model",
        base_url="https://llm.example.com/v1",
        api_key="wk-1",
        api_key_env="WORK_KEY",
        api_key_from="WORK_KEY",
        context_window=200000,
        images=True,
        input_price=3 / 1_000_000,
        output_price=15.5 / 1_000_000,
        currency="EUR",
        description="big-model via https://llm.example.com/v1",
        source=f"{path} [profiles.work]",
    )
    assert local.name == "local: qwen2.5-coder (local, localhost:11434)"
    assert missing_key(work) is None
    assert missing_key(local) is None


def test_the_default_file_in_the_user_config_directory_is_read(user_dirs: Path) -> None:
    user_dirs.mkdir(parents=True)
    write(user_dirs, TWO_PROFILES)
    loaded = load(None, {})
    assert loaded.path == str(user_dirs / "config.toml")
    assert loaded.default_profile == "local"


def test_config_flag_beats_the_environment_variable(tmp_path: Path) -> None:
    flag = write(tmp_path, '[profiles.a]\nbase_url = "http://localhost:1/v1"\n', "a.toml")
    env = write(tmp_path, '[profiles.b]\nbase_url = "http://localhost:2/v1"\n', "b.toml")
    assert load(parse("--config", str(flag)), with_file(env)).default_profile == "a"
    assert load(None, with_file(env)).default_profile == "b"


def test_retry_settings(tmp_path: Path) -> None:
    path = write(tmp_path, "[retry]\nattempts = 2\nbase_delay = 0.5\n")
    loaded = load(None, with_file(path))
    assert loaded.retry == RetryPolicy(attempts=2, base_delay=0.5)
    assert loaded.profile.scripted  # a file without profiles changes nothing else
    model = Config([ModelProfile("x", "x", base_url="http://localhost:1/v1")], "x", retry=loaded.retry)
    made = model.make_model(model.profile)
    assert isinstance(made, OpenAIModel)
    assert made.retry == loaded.retry


def test_subagent_limits(tmp_path: Path) -> None:
    assert load(None, with_file(write(tmp_path, ""))).subagents == SubagentLimits()
    path = write(tmp_path, "[subagents]\nmax_depth = 2\nmax_running = 1\nmax_seconds = 30\nmax_turns = 3\n")
    loaded = load(None, with_file(path))
    assert loaded.subagents == SubagentLimits(max_depth=2, max_running=1, max_seconds=30.0)
    assert any("[subagents]: unknown key 'max_turns'" in w for w in loaded.warnings)
    assert Settings.from_config(loaded).subagents == loaded.subagents


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_running = 0", "max_running must be at least 1"),
        ("max_depth = -1", "max_depth must be at least 0"),
        ('max_tokens = "many"', "max_tokens must be"),
    ],
)
def test_subagent_limits_that_cannot_work_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(None, with_file(write(tmp_path, f"[subagents]\n{text}\n")))


# -- precedence --------------------------------------------------------------------------------


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_PROFILES)
    assert load(None, with_file(path)).profile.model == "qwen2.5-coder"
    env = with_file(path, REFAGENT_MODEL="env-model", OPENAI_BASE_URL="http://localhost:9/v1")
    from_env = load(None, env).profile
    assert (from_env.id, from_env.model, from_env.base_url) == ("local", "env-model", "http://localhost:9/v1")
    assert from_env.name == "local: env-model (local, localhost:9)"
    from_flags = load(parse("--model", "flag-model", "--base-url", "http://localhost:7/v1"), env).profile
    assert (from_flags.model, from_flags.base_url) == ("flag-model", "http://localhost:7/v1")
    # Only the active profile is overridden.
    assert load(parse("--model", "flag-model"), env).profiles[0].model == "big-model"


def test_profile_selection_file_then_environment_then_flag(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_PROFILES)
    assert load(None, with_file(path)).default_profile == "local"
    assert load(None, with_file(path, REFAGENT_PROFILE="work")).default_profile == "work"
    assert load(parse("--profile", "local"), with_file(path, REFAGENT_PROFILE="work")).default_profile == "local"


def test_the_scripted_profile_can_be_asked_for(tmp_path: Path) -> None:
    loaded = load(parse("--profile", SCRIPTED), with_file(write(tmp_path, TWO_PROFILES)))
    assert [p.id for p in loaded.profiles] == ["work", "local", SCRIPTED]
    assert loaded.profile.scripted


def test_max_requests_file_then_environment_then_flag(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_PROFILES)
    assert load(None, with_file(path, REFAGENT_MAX_REQUESTS="30")).max_requests == 30
    assert load(parse("--max-requests", "5"), with_file(path, REFAGENT_MAX_REQUESTS="30")).max_requests == 5
    with pytest.raises(ConfigError, match="REFAGENT_MAX_REQUESTS"):
        load(None, {"REFAGENT_MAX_REQUESTS": "lots"})
    with pytest.raises(ConfigError, match="at least 1"):
        load(parse("--max-requests", "0"), {})


# -- keys --------------------------------------------------------------------------------------


def test_a_key_variable_that_is_not_set_is_named_with_the_config_entry(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_PROFILES)
    work = load(parse("--profile", "work"), with_file(path)).profile
    message = missing_key(work)
    assert message is not None
    assert "WORK_KEY" in message
    assert f"{path} [profiles.work]" in message
    assert "api_key" in message


def test_an_openai_profile_without_key_entries_reads_openai_api_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.gpt]\nmodel = "gpt-4.1"\n')
    assert load(None, with_file(path, OPENAI_API_KEY="sk-2")).profile.api_key == "sk-2"
    message = missing_key(load(None, with_file(path)).profile)
    assert message is not None
    assert "OPENAI_API_KEY" in message


def test_an_openai_key_is_not_sent_to_another_host_by_accident(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.other]\nbase_url = "https://llm.example.com/v1"\n')
    profile = load(None, with_file(path, OPENAI_API_KEY="sk-3")).profile
    assert profile.api_key is None
    message = missing_key(profile)
    assert message is not None
    assert "OPENAI_API_KEY" not in message
    assert "[profiles.other]" in message
    # ...unless the base URL itself came from the environment, paired with the key as usual.
    paired = load(None, with_file(path, OPENAI_API_KEY="sk-3", OPENAI_BASE_URL="https://x.example/v1")).profile
    assert paired.api_key == "sk-3"


@pytest.mark.parametrize(
    "entry", ['api_key = ""', "needs_key = false", 'base_url = "http://[::1]:8080/v1"', 'base_url = "http://127.0.0.2"']
)
def test_profiles_that_need_no_key(tmp_path: Path, entry: str) -> None:
    path = write(tmp_path, f"[profiles.p]\n{entry}\n")
    profile = load(None, with_file(path)).profile
    assert not needs_key(profile)
    assert missing_key(profile) is None


def test_an_inline_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.p]\nbase_url = "https://llm.example.com/v1"\napi_key = "inline"\n')
    assert load(None, with_file(path, OPENAI_API_KEY="sk-4")).profile.api_key == "inline"


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:11434/v1", True),
        ("http://LOCALHOST/v1", True),
        ("http://127.0.0.1:8080", True),
        ("http://[::1]:1234/v1", True),
        ("http://api.localhost/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://10.0.0.5:8000/v1", False),
        ("http://localhost.example.com/v1", False),
        (None, False),
    ],
)
def test_is_local(url: str | None, local: bool) -> None:
    assert is_local(url) is local


# -- what goes wrong ---------------------------------------------------------------------------


def test_a_malformed_file_names_the_file_and_the_toml_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[profiles.x\nmodel = 1\n")
    with pytest.raises(ConfigError) as caught:
        load(None, with_file(path))
    assert str(path) in str(caught.value)
    assert "line 1" in str(caught.value)


def test_a_wrong_type_names_the_entry(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.x]\ncontext_window = "big"\n')
    with pytest.raises(ConfigError, match=r"\[profiles.x\]: context_window must be a whole number, not 'big'"):
        load(None, with_file(path))


def test_unknown_keys_are_warned_about_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(
        tmp_path, 'colour = "blue"\n[retry]\ntries = 3\n[profiles.x]\nbase_url = "http://localhost:1"\nmodle = "m"\n'
    )
    with caplog.at_level(logging.WARNING, logger="refagent.config"):
        loaded = load(None, with_file(path))
    assert loaded.profile.id == "x"
    assert len(loaded.warnings) == 3
    assert any("'modle'" in w and "[profiles.x]" in w for w in loaded.warnings)
    assert "'colour'" in caplog.text
    assert "'tries'" in caplog.text


def test_an_explicit_file_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load(parse("--config", str(tmp_path / "nope.toml")), {})


def test_an_unknown_profile_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'nope' .*work, local"):
        load(parse("--profile", "nope"), with_file(write(tmp_path, TWO_PROFILES)))
    with pytest.raises(ConfigError, match="'missing'"):
        load(None, with_file(write(tmp_path, 'default_profile = "missing"\n[profiles.a]\nmodel = "m"\n')))


def test_the_scripted_id_is_reserved(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        load(None, with_file(write(tmp_path, '[profiles.scripted]\nmodel = "m"\n')))


def test_a_profile_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[profiles.p\]: must be a table"):
        load(None, with_file(write(tmp_path, '[profiles]\np = "gpt"\n')))


# -- trimmed environments ----------------------------------------------------------------------


def test_no_home_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    path = config.default_config_path()
    assert path is None or os.path.isabs(path)
    assert load(None, {}).profiles  # whatever the platform finds, loading works


LOAD = (
    "import json, os; from refagent.config import load; c = load(None, os.environ); "
    "print(json.dumps([c.default_profile, c.profile.model, str(c.path)]))"
)


def run_trimmed(env: dict[str, str]) -> Any:
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)


def test_a_process_started_with_only_path(tmp_path: Path) -> None:
    assert run_trimmed({"PATH": os.environ.get("PATH", "/usr/bin")})[0] == SCRIPTED


def test_a_process_started_like_the_python_sdk_starts_agents_reads_the_file(tmp_path: Path) -> None:
    # HOME, PATH, SHELL, TERM, USER, LOGNAME and nothing else: no key, no XDG variables.
    home = tmp_path / "home"
    (home / ".config" / "refagent").mkdir(parents=True)
    write(home / ".config" / "refagent", TWO_PROFILES)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin"), "SHELL": "/bin/sh", "TERM": "dumb"}
    env |= {"USER": "u", "LOGNAME": "u"}
    default, model, path = run_trimmed(env)
    assert (default, model) == ("local", "qwen2.5-coder")
    assert path == str(home / ".config" / "refagent" / "config.toml")


# -- custom tools ------------------------------------------------------------------------------


def test_custom_tools_are_listed_not_imported(tmp_path: Path) -> None:
    path = write(tmp_path, 'tools = ["no_such_module_anywhere:Tool", "pkg.mod:Other"]\ntool_path = ["tools", "/abs"]\n')
    loaded = load(None, with_file(path))
    assert loaded.tools == ["no_such_module_anywhere:Tool", "pkg.mod:Other"]
    assert loaded.tool_path == [tmp_path / "tools", Path("/abs")]  # relative: from the file's directory
    assert loaded.warnings == []
    assert "no_such_module_anywhere" not in sys.modules


def test_tool_path_expands_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    loaded = load(None, with_file(write(tmp_path, 'tools = ["t:T"]\ntool_path = ["~/my-tools"]\n')))
    assert loaded.tool_path == [tmp_path / "home" / "my-tools"]


def test_no_custom_tools_by_default(tmp_path: Path) -> None:
    loaded = load(None, with_file(write(tmp_path, "max_requests = 3\n")))
    assert (loaded.tools, loaded.tool_path) == ([], [])
    assert (load(None, {}).tools, load(None, {}).tool_path) == ([], [])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('tools = "outline:Outline"', "tools must be a list of strings, not 'outline:Outline'"),
        ("tools = [1]", r"tools must be a list of strings, not \[1\]"),
        ("tool_path = '.'", "tool_path must be a list of strings"),
        ("[tools]\nextra = ['a:B']", "tools must be a list of strings"),
    ],
)
def test_custom_tool_keys_of_the_wrong_type(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load(None, with_file(path))
    assert str(path) in str(caught.value)


# -- reasoning effort ------------------------------------------------------------------------------


def reasoning_profile(tmp_path: Path, lines: str) -> ModelProfile:
    path = write(tmp_path, f'[profiles.r]\nbase_url = "http://localhost:1/v1"\nmodel = "m"\n{lines}\n')
    return load(None, with_file(path)).profile


def test_a_profile_without_reasoning_effort_takes_none(tmp_path: Path) -> None:
    profile = reasoning_profile(tmp_path, "")
    assert (profile.reasoning_efforts, profile.default_reasoning_effort) == ((), None)
    assert (scripted_profile().reasoning_efforts, scripted_profile().default_reasoning_effort) == ((), None)


@pytest.mark.parametrize(
    ("lines", "levels", "default"),
    [
        ('reasoning_effort = ["low", "medium", "high"]', ("low", "medium", "high"), "medium"),
        (
            'reasoning_effort = ["minimal", "low", "medium", "high"]\ndefault_reasoning_effort = "high"',
            ("minimal", "low", "medium", "high"),
            "high",
        ),
        ('reasoning_effort = ["low", "high"]', ("low", "high"), "low"),  # no "medium": the first
        ('reasoning_effort = ["on"]', ("on",), "on"),
    ],
)
def test_reasoning_effort_levels_and_default(tmp_path: Path, lines: str, levels: tuple[str, ...], default: str) -> None:
    profile = reasoning_profile(tmp_path, lines)
    assert profile.reasoning_efforts == levels
    assert profile.default_reasoning_effort == default
    hash(profile)  # still usable as a key


def test_reasoning_effort_keys_are_not_unknown(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.r]\nmodel = "m"\nreasoning_effort = ["low"]\ndefault_reasoning_effort = "low"\n')
    assert load(None, with_file(path)).warnings == []


def test_reasoning_effort_survives_a_model_override(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.r]\nmodel = "m"\nreasoning_effort = ["low", "high"]\n')
    profile = load(parse("--model", "other"), with_file(path)).profile
    assert (profile.model, profile.reasoning_efforts, profile.default_reasoning_effort) == (
        "other",
        ("low", "high"),
        "low",
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('reasoning_effort = "high"', r"reasoning_effort must be a list of the levels .*, not 'high'"),
        ("reasoning_effort = [1, 2]", r"reasoning_effort must be a list of the levels .*, not \[1, 2\]"),
        ('reasoning_effort = ["low", ""]', "reasoning_effort must be a list of the levels .* non-empty strings"),
        ("reasoning_effort = true", "reasoning_effort must be a list"),
        ("reasoning_effort = []", "reasoning_effort must list at least one level"),
        ('reasoning_effort = ["low", "high", "low"]', "reasoning_effort lists 'low' more than once"),
        (
            'reasoning_effort = ["low", "high"]\ndefault_reasoning_effort = "medium"',
            r"default_reasoning_effort 'medium' is not one of reasoning_effort \('low', 'high'\)",
        ),
        (
            'reasoning_effort = ["low"]\ndefault_reasoning_effort = 1',
            "default_reasoning_effort must be a string, not 1",
        ),
        ('default_reasoning_effort = "low"', "default_reasoning_effort needs reasoning_effort"),
    ],
)
def test_reasoning_effort_mistakes(tmp_path: Path, lines: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        reasoning_profile(tmp_path, lines)
    assert r"[profiles.r]" in str(caught.value)
