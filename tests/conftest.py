from __future__ import annotations

import pytest

from tests.acp_schema import validate_agent_message


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def check():  # type: ignore[no-untyped-def]
    """The schema check every fake editor in the tests uses."""
    return validate_agent_message
