"""The agent's own files and the user's credentials inside a root (a session opened in ``$HOME``): the file
tools treat them as outside the roots, so reading one asks and writing one is refused, while commands never
see them (``test_confinement_trust.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.local import local_sandbox


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for name in (".ssh/id_ed25519", ".config/refagent/config.toml", "project/main.py", ".sshrc"):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text("x\n")
    monkeypatch.setenv("HOME", str(home))
    for variable in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "REFAGENT_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    return home


def test_private_paths_count_as_outside(home: Path) -> None:
    policy = RootPolicy(str(home), private=[str(home / ".ssh"), str(home.parent / "elsewhere")])
    assert policy.private == (str(home / ".ssh"),)  # only what lies inside a root matters here
    assert not policy.resolve(".ssh/id_ed25519").inside
    assert not policy.resolve(".ssh").inside
    assert policy.resolve(".sshrc").inside  # a name that starts the same is another file
    assert policy.resolve("project/main.py").inside
    with pytest.raises(ToolError, match="credentials"):
        policy.check_write(".ssh/authorized_keys")


def test_a_session_in_home_keeps_the_agents_files_and_credentials_out(home: Path) -> None:
    log = home / "project" / "agent.log"
    log.write_text("the agent logs here\n")
    sandbox = local_sandbox(str(home), [], private=[str(log)])
    try:
        policy = sandbox.policy
        assert not policy.resolve(".config/refagent/config.toml").inside
        assert not policy.resolve(".ssh/id_ed25519").inside
        assert not policy.resolve("project/agent.log").inside
        assert policy.resolve("project/main.py").inside
    finally:
        sandbox.close()
