from __future__ import annotations

import pytest
from hypothesis import settings

from refagent.config.providers import built_in
from tests.support.acp_schema import validate_agent_message

# The same examples on every run (tests are deterministic), and no example database left behind.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's config or writes sessions into the user's data directory."""
    for provider in built_in().values():  # a key of the runner's would form a profile of its own
        for name in (provider.key_env, provider.base_url_env):
            if name and name != "OPENAI_API_KEY":  # tests that read the environment clear or set this one
                monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HARBOR_ACP_REQUESTED_MODEL", raising=False)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def check():  # type: ignore[no-untyped-def]
    """The schema check every fake editor in the tests uses."""
    return validate_agent_message
