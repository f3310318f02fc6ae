"""The model clients of one connection: one per profile, made when first needed and reused across turns
and sessions (that keeps each endpoint's HTTP connection pool warm)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from refagent.acp.errors import AuthRequired
from refagent.llm.profiles import ModelProfile, missing_key

if TYPE_CHECKING:  # an annotation here; its dataclasses cost some 5 ms on the way to session/new
    from refagent.llm.protocol import ModelClient


class ModelPool:
    """``pool.get(profile)``: the client for ``profile``, made with ``make`` the first time."""

    def __init__(self, make: Callable[[ModelProfile], ModelClient]) -> None:
        self._make = make
        self._clients: dict[tuple[str, str], ModelClient] = {}

    def get(self, profile: ModelProfile) -> ModelClient:
        key = (profile.id, profile.model)
        if key not in self._clients:
            self._clients[key] = self._make(profile)
        return self._clients[key]

    def reset(self, make: Callable[[ModelProfile], ModelClient]) -> None:
        """Forget every client and make new ones with ``make`` (the configuration was read again)."""
        self._make = make
        self._clients.clear()


def require_key(profile: ModelProfile) -> None:
    """Raise ``-32000`` (authentication required) naming what to set, if ``profile`` needs a key it lacks."""
    problem = missing_key(profile)
    if problem is not None:
        raise AuthRequired(problem)
