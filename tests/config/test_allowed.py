"""``[fetch] allow`` reaches the fetch tool a session gets (the other keys of refagent.config.allowed:
tests/mcp/test_own_servers.py, tests/session/test_prompt_commands.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent import config
from refagent.errors import ConfigError
from refagent.settings import Settings


def settings_of(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return Settings.from_config(config.load(None, {"REFAGENT_CONFIG": str(path)}))


@pytest.mark.parametrize("custom", ["", "tools = []\n"], ids=["built-in", "with-custom-tools-key"])
def test_the_fetch_tool_may_reach_what_the_config_allows(tmp_path: Path, custom: str) -> None:
    settings = settings_of(tmp_path, f'{custom}[fetch]\nallow = ["wiki.internal", "10.1.0.0/16"]\n')
    [fetch] = [tool for tool in settings.tools() if tool.name == "fetch"]
    gate = fetch.gate  # type: ignore[attr-defined]
    assert "wiki.internal" in gate.names
    assert [str(n) for n in gate.networks] == ["10.1.0.0/16"]


def test_without_the_table_only_public_addresses(tmp_path: Path) -> None:
    [fetch] = [tool for tool in settings_of(tmp_path, "").tools() if tool.name == "fetch"]
    assert not fetch.gate.names  # type: ignore[attr-defined]
    assert not fetch.gate.networks  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('fetch = "x"\n', "fetch must be a table"),
        ("[fetch]\nallow = [1]\n", "allow must be a list"),
        ('[fetch]\ndeny = ["x"]\n', "unknown key 'deny'"),
    ],
)
def test_mistakes_name_the_table(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_of(tmp_path, text)
