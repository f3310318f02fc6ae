from __future__ import annotations

import pytest
from hypothesis import settings

from tests.support.acp_schema import validate_agent_message

# The same examples on every run (tests are deterministic), and no example database left behind.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the user's config or writes sessions into the user's data directory."""
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
