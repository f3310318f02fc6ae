"""refagent.dirs: the user's directories, computed without platformdirs on Linux, are platformdirs' own."""

from __future__ import annotations

import sys

import platformdirs
import pytest

from refagent.dirs import Kind, user_dir

KINDS: list[Kind] = ["config", "data", "state"]

ENVIRONMENTS = {  # the cases where platformdirs 4.0 (the floor) and the newest agree
    "home": {"HOME": "/home/ada"},
    "home with a trailing slash": {"HOME": "/home/ada/"},
    "home at the root": {"HOME": "/"},
    "xdg set": {
        "HOME": "/home/ada",
        "XDG_CONFIG_HOME": "/xdg/config",
        "XDG_DATA_HOME": "/xdg/data",
        "XDG_STATE_HOME": "/xdg/state",
    },
    "xdg blank (ignored)": {"HOME": "/home/ada", "XDG_CONFIG_HOME": " ", "XDG_DATA_HOME": "", "XDG_STATE_HOME": ""},
    "xdg with a trailing slash": {"HOME": "/home/ada", "XDG_CONFIG_HOME": "/xdg/", "XDG_DATA_HOME": "/xdg/"},
}


@pytest.mark.skipif(sys.platform != "linux", reason="computed here on Linux only; platformdirs answers elsewhere")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("env", ENVIRONMENTS.values(), ids=ENVIRONMENTS.keys())
def test_the_directories_are_platformdirs_own(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], kind: Kind) -> None:
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert user_dir(kind) == getattr(platformdirs, f"user_{kind}_dir")("refagent")


@pytest.mark.skipif(sys.platform != "linux", reason="computed here on Linux only")
def test_a_relative_xdg_directory_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the XDG Base Directory specification says (and platformdirs since 4.3; before, it used them as given).
    monkeypatch.setenv("HOME", "/home/ada")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    monkeypatch.setenv("XDG_DATA_HOME", "~/data")

    assert user_dir("config") == "/home/ada/.config/refagent"
    assert user_dir("data") == "/home/ada/.local/share/refagent"


def test_without_an_absolute_home_platformdirs_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "relative-home")
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)

    try:
        expected: str | type[Exception] = platformdirs.user_config_dir("refagent")
    except Exception as exc:
        expected = type(exc)
    if isinstance(expected, str):
        assert user_dir("config") == expected
    else:
        with pytest.raises(expected):
            user_dir("config")
