"""Every method a client may call (ACP v1, agent side), in one table: which method of
:class:`refagent.server.agent.Agent` answers it, whether it exists only when sessions are saved, and
which start-up answers too, before the event loop (:mod:`refagent.server.boot`).

Light to import (start-up reads it before its first answer): the handlers are named, not imported, and
``tests/server/test_agent.py`` holds each name to a method of the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from refagent.server.handshake import Started, early_initialize, early_new_session
from refagent.settings import Settings

Params: TypeAlias = dict[str, Any]
Early: TypeAlias = Callable[[Settings, Started, Params], "dict[str, Any] | None"]
"""Start-up's answer to a request: the result (what the agent takes over recorded in :class:`Started`),
or None to leave the request to the agent. A :class:`~refagent.acp.errors.RequestError` leaves it to the
agent too, which answers with the error."""


class Route:
    """Who answers a request method. (A plain class: a frozen dataclass takes half a millisecond to
    create, on the way to the first answer.)"""

    __slots__ = ("early", "handler", "needs_store")

    def __init__(self, handler: str, *, needs_store: bool = False, early: Early | None = None) -> None:
        self.handler = handler
        """The name of the :class:`~refagent.server.agent.Agent` coroutine method that answers it."""
        self.needs_store = needs_store
        """It exists only when sessions are saved (else: method not found)."""
        self.early = early
        """How start-up answers it before the event loop, if it can."""


REQUESTS: Final[Mapping[str, Route]] = {
    "initialize": Route("initialize", early=early_initialize),
    "authenticate": Route("authenticate"),
    "logout": Route("logout"),
    "auth/status": Route("auth_status"),  # unstable
    "session/new": Route("new_session", early=early_new_session),
    "session/load": Route("load_session", needs_store=True),
    "session/resume": Route("resume_session", needs_store=True),
    "session/fork": Route("fork_session", needs_store=True),  # unstable
    "session/list": Route("list_sessions", needs_store=True),
    "session/close": Route("close_session"),
    "session/delete": Route("delete_session", needs_store=True),
    "session/archive": Route("archive_session", needs_store=True),  # unstable
    "session/unarchive": Route("unarchive_session", needs_store=True),  # unstable
    "session/status": Route("session_status"),  # unstable
    "session/set_title": Route("set_title", needs_store=True),  # unstable
    "session/prompt": Route("prompt"),
    "session/set_mode": Route("set_mode"),
    "session/set_config_option": Route("set_config_option"),
    "providers/list": Route("list_providers"),  # unstable
    "providers/set": Route("set_provider"),  # unstable
    "providers/disable": Route("disable_provider"),  # unstable
    "_session/steering": Route("steer"),  # an extension: advertised in initialize's _meta
}
"""Every request method the agent answers."""

NOTIFICATIONS: Final[Mapping[str, str]] = {
    "session/cancel": "cancel",
}
"""Every notification the agent acts on, and the name of the :class:`~refagent.server.agent.Agent` method
that does."""
