"""The model clients of one connection: one per profile, made when first needed and reused across turns
and sessions (that keeps each endpoint's HTTP connection pool warm)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from refagent.acp.errors import AuthRequired
from refagent.llm.profiles import ModelProfile, missing_key

if TYPE_CHECKING:  # an annotation here; its dataclasses cost some 5 ms on the way to session/new
    from refagent.llm.protocol import ModelClient

log = logging.getLogger(__name__)


class ModelPool:
    """``pool.get(profile)``: the client for ``profile``, made with ``make`` the first time."""

    def __init__(self, make: Callable[[ModelProfile], ModelClient]) -> None:
        self._make = make
        self._clients: dict[tuple[str, str], ModelClient] = {}
        self._retired: list[ModelClient] = []
        """Clients :meth:`reset` forgot: a turn may still stream from one, so they are closed with the pool."""

    def get(self, profile: ModelProfile) -> ModelClient:
        key = (profile.id, profile.model)
        if key not in self._clients:
            self._clients[key] = self._make(profile)
        return self._clients[key]

    def reset(self, make: Callable[[ModelProfile], ModelClient]) -> None:
        """Forget every client and make new ones with ``make`` (the configuration was read again); the old
        ones are closed by :meth:`aclose`."""
        self._make = make
        self._retired.extend(self._clients.values())
        self._clients.clear()

    async def aclose(self) -> None:
        """Close every client made (those :meth:`reset` forgot too): their HTTP connection pools. Left to the
        garbage collector, an adapter's close runs whenever it runs, on whatever event loop is current then
        (an in-memory agent's clients, on a later test's loop: "Event loop is closed")."""
        clients = [*self._retired, *self._clients.values()]
        self._retired.clear()
        self._clients.clear()
        for client in clients:
            close = getattr(client, "aclose", None)  # not part of ModelClient: the scripted models hold nothing
            if close is None:
                continue
            try:
                await close()
            except Exception as exc:  # the agent is exiting: a connection already gone changes nothing
                log.debug("closing a model client: %s", exc)


def require_key(profile: ModelProfile) -> None:
    """Raise ``-32000`` (authentication required) naming what to set, if ``profile`` needs a key it lacks."""
    problem = missing_key(profile)
    if problem is not None:
        raise AuthRequired(problem)
