"""Writing the config file: the TOML serializer, the edits that keep the rest of the file, the 0600 writes."""

from __future__ import annotations

import datetime as dt
import math
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refagent import config
from refagent.config.writer import config_path, dumps, forget_keys, read, set_profile, write
from refagent.errors import ConfigError

# -- the serializer ---------------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)  # any string but lone surrogates
OFFSETS = st.builds(lambda minutes: dt.timezone(dt.timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60))
LEAVES = (
    TEXT
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.datetimes(timezones=st.none() | OFFSETS)
    | st.dates()
    | st.times()
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
DOCUMENTS = st.dictionaries(TEXT, VALUES, max_size=6)


@given(DOCUMENTS)
def test_dumps_round_trips_through_tomllib(data: dict[str, Any]) -> None:
    assert tomllib.loads(dumps(data)) == data


def test_dumps_writes_the_config_as_a_person_would() -> None:
    data = {
        "default_profile": "work",
        "tools": ["outline:Outline"],
        "retry": {"attempts": 4, "base_delay": 1.5},
        "profiles": {"work": {"model": "gpt-4.1", "images": True}, "my local": {"model": "q"}},
    }
    assert dumps(data) == (
        'default_profile = "work"\n'
        'tools = ["outline:Outline"]\n'
        "\n[retry]\nattempts = 4\nbase_delay = 1.5\n"
        '\n[profiles.work]\nmodel = "gpt-4.1"\nimages = true\n'
        '\n[profiles."my local"]\nmodel = "q"\n'
    )


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('say "hi"', r'"say \"hi\""'),
        ("C:\\path", r'"C:\\path"'),
        ("tab\tnew\nline\r", r'"tab\tnew\nline\r"'),
        ("\x00\x1b[31m\x7f", r'"\u0000\u001B[31m\u007F"'),
        ("héllo ☃ \u2028", '"héllo ☃ \u2028"'),
    ],
)
def test_strings_are_escaped(text: str, written: str) -> None:
    assert dumps({"k": text}) == f"k = {written}\n"
    assert tomllib.loads(dumps({"k": text})) == {"k": text}


def test_special_values() -> None:
    data = {"inf": math.inf, "neg": -math.inf, "tiny": 1e-300, "big": 1e300, "zero": -0.0, "whole": 2.0}
    assert tomllib.loads(dumps(data)) == data
    assert math.isnan(tomllib.loads(dumps({"nan": math.nan}))["nan"])
    tables = {"a": [{"b": 1}, {"c": {"d": 2}}], "empty": {}, "inline": [1, {"x": [{}]}]}
    assert tomllib.loads(dumps(tables)) == tables


@pytest.mark.parametrize(
    ("value", "error"),
    [("\ud800", ValueError), (dt.time(1, tzinfo=dt.UTC), ValueError), (object(), TypeError), ({1: 2}, TypeError)],
)
def test_what_toml_cannot_hold_is_refused(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        dumps({"k": value})


# -- writing --------------------------------------------------------------------------------------------


def test_write_is_0600_in_a_0700_directory_it_makes(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "config.toml"
    write(path, "x = 1\n")
    assert path.read_text() == "x = 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert os.listdir(path.parent) == ["config.toml"]  # no temporary file left


def test_write_tightens_an_existing_file_and_follows_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "refagent.toml"
    real.parent.mkdir()
    real.write_text("x = 1\n")
    real.chmod(0o644)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    set_profile(link, "p", {"model": "m", "api_key": "sk-1"})
    assert link.is_symlink()
    assert tomllib.loads(real.read_text())["profiles"]["p"] == {"model": "m", "api_key": "sk-1"}
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_a_file_that_cannot_be_written_is_a_config_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(ConfigError, match="cannot write the config file"):
        write(blocked / "config.toml", "x = 1\n")


def test_read(tmp_path: Path) -> None:
    assert read(tmp_path / "missing.toml") == {}
    (tmp_path / "bad.toml").write_bytes(b"\xff = 1")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read(tmp_path / "bad.toml")


# -- set_profile ------------------------------------------------------------------------------------------

HAND_WRITTEN = """\
# refagent, as I like it
max_requests = 12   # per turn
tools = [
  "outline:Outline",  # mine
]

[retry]
attempts = 2

# the work one
[profiles.work]  # paid for by work
base_url = "https://llm.example.com/v1"
api_key = "sk-work-secret"  # rotated monthly
model = "big"
input_price = 3

[profiles.local]
base_url = "http://localhost:11434/v1"
model = "qwen2.5-coder"
"""


def test_set_profile_in_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    set_profile(path, "openai", {"base_url": "https://api.openai.com/v1", "model": "gpt-4.1", "api_key": 'k"\\'})
    assert path.read_text() == (
        'default_profile = "openai"\n\n'
        '[profiles.openai]\nbase_url = "https://api.openai.com/v1"\nmodel = "gpt-4.1"\napi_key = "k\\"\\\\"\n'
    )
    loaded = config.load(None, {"REFAGENT_CONFIG": str(path)})
    assert (loaded.default_profile, loaded.profile.api_key) == ("openai", 'k"\\')


def test_set_profile_edits_the_lines_and_keeps_the_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(HAND_WRITTEN)
    set_profile(path, "work", {"model": "bigger", "api_key": "sk-new", "input_price": None, "api_key_env": None})
    assert path.read_text() == (
        "# refagent, as I like it\n"
        "max_requests = 12   # per turn\n"
        "tools = [\n"
        '  "outline:Outline",  # mine\n'
        "]\n"
        'default_profile = "work"\n'
        "\n"
        "[retry]\n"
        "attempts = 2\n"
        "\n"
        "# the work one\n"
        "[profiles.work]  # paid for by work\n"
        'base_url = "https://llm.example.com/v1"\n'
        'api_key = "sk-new"  # rotated monthly\n'
        'model = "bigger"\n'
        "\n"
        "[profiles.local]\n"
        'base_url = "http://localhost:11434/v1"\n'
        'model = "qwen2.5-coder"\n'
    )


def test_set_profile_adds_a_profile_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(HAND_WRITTEN.rstrip("\n"))  # no newline at the end
    set_profile(path, "groq", {"base_url": "https://api.groq.com/openai/v1", "model": "llama"}, default=False)
    text = path.read_text()
    assert text == HAND_WRITTEN + '\n[profiles.groq]\nbase_url = "https://api.groq.com/openai/v1"\nmodel = "llama"\n'


def test_set_profile_replaces_default_profile_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('default_profile = "local"  # for now\n\n[profiles.local]\nmodel = "q"\n')
    set_profile(path, "other", {"model": "m"})
    assert path.read_text() == (
        'default_profile = "other"  # for now\n\n[profiles.local]\nmodel = "q"\n\n[profiles.other]\nmodel = "m"\n'
    )


def test_set_profile_keeps_windows_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'max_requests = 3\r\n\r\n[profiles.a]\r\nmodel = "x"\r\n')
    set_profile(path, "a", {"model": "y"})
    assert path.read_bytes() == b'max_requests = 3\r\ndefault_profile = "a"\r\n\r\n[profiles.a]\r\nmodel = "y"\r\n'


@pytest.mark.parametrize(
    "layout",
    [
        'profiles = { a = { model = "x", api_key = "sk-1" } }\nmax_requests = 3\n',
        '[profiles]\na = { model = "x", api_key = "sk-1" }\n',
        'profiles.a.model = "x"\nprofiles.a.api_key = "sk-1"\n',
        '[profiles.a]\nmodel = """\nx"""\napi_key = "sk-1"\n',
    ],
    ids=["inline", "inline-in-table", "dotted", "multi-line"],
)
def test_a_layout_the_edit_does_not_follow_is_written_anew_with_the_same_content(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(layout)
    before = tomllib.loads(layout)
    set_profile(path, "a", {"model": "y"}, default=False)
    before["profiles"]["a"]["model"] = "y"
    assert tomllib.loads(path.read_text()) == before
    assert forget_keys(path) == ["a"]
    del before["profiles"]["a"]["api_key"]
    assert tomllib.loads(path.read_text()) == before


def test_set_profile_refuses_a_broken_file_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[profiles\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        set_profile(path, "a", {"model": "m"})
    path.write_text('profiles = "oops"\n')
    with pytest.raises(ConfigError, match="is not a table"):
        set_profile(path, "a", {"model": "m"})
    assert path.read_text() == 'profiles = "oops"\n'


# -- forget_keys ------------------------------------------------------------------------------------------


def test_forget_keys_removes_only_the_stored_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(HAND_WRITTEN.replace("[profiles.local]\n", '[profiles.local]\napi_key = ""\n'))
    path.chmod(0o644)
    assert forget_keys(path) == ["work"]
    assert path.read_text() == HAND_WRITTEN.replace('api_key = "sk-work-secret"  # rotated monthly\n', "").replace(
        "[profiles.local]\n",
        '[profiles.local]\napi_key = ""\n',  # "needs no key" is not a key
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.stat().st_mtime_ns
    assert forget_keys(path) == []
    assert path.stat().st_mtime_ns == before  # nothing to forget: not written


def test_forget_keys_without_a_file_or_profiles(tmp_path: Path) -> None:
    assert forget_keys(tmp_path / "missing.toml") == []
    assert not (tmp_path / "missing.toml").exists()
    (tmp_path / "c.toml").write_text("max_requests = 2\n")
    assert forget_keys(str(tmp_path / "c.toml")) == []


def test_config_path(tmp_path: Path) -> None:
    assert config_path(str(tmp_path / "x.toml"), {"REFAGENT_CONFIG": "/elsewhere"}) == tmp_path / "x.toml"
    assert config_path(None, {"REFAGENT_CONFIG": str(tmp_path / "y.toml")}) == tmp_path / "y.toml"
    default = config.default_config_path()
    assert config_path("", {"REFAGENT_CONFIG": " "}) == (Path(default) if default is not None else None)
