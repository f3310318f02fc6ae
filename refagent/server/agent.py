"""The ACP agent: the connection's handler (:class:`Agent`) and what it is configured with
(:class:`Settings`).

Methods (ACP v1, agent side): ``initialize``, ``authenticate``, and the ``session/*`` methods, which
:class:`refagent.session.manager.Sessions` implements; ``session/cancel`` is a notification. Anything else is
``-32601``. Capabilities advertised at ``initialize`` are exactly the ones implemented.

Starting fast: this module imports little. The session machinery is imported when the first session
request arrives (or in the background right after ``initialize`` has been answered), so the editor's
``initialize`` is answered before any of it loads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from refagent.acp import params as p
from refagent.acp.connection import Reply
from refagent.acp.errors import AuthRequired, InvalidParams, MethodNotFound
from refagent.acp.types import ClientCapabilities
from refagent.llm.profiles import ModelProfile, missing_key
from refagent.llm.protocol import ModelClient
from refagent.server.handshake import AUTH_METHOD, answer_initialize
from refagent.settings import Settings

__all__ = ["Agent", "Settings"]

if TYPE_CHECKING:
    from refagent.session.manager import Sessions
    from refagent.session.state import Session

log = logging.getLogger(__name__)


class Peer(Protocol):
    """The client as the agent sees it (a :class:`refagent.acp.connection.Connection`)."""

    async def request(self, method: str, params: dict[str, Any]) -> Any: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def send_lines(self, data: bytes) -> None: ...


class Agent:
    """Serves one client connection. Sessions live as long as the connection.

    Use as an async context manager around :meth:`Connection.serve`: it owns the sessions' background
    tasks (file watchers) and stops them on exit.
    """

    def __init__(self, peer: Peer, settings: Settings | None = None) -> None:
        self.peer = peer
        self._background: TaskGroup | None = None
        self.settings = settings or Settings()
        self.store = self.settings.store() if self.settings.store is not None else None
        self.client_capabilities: ClientCapabilities = {}
        self.client_info: dict[str, Any] = {}
        self._models: dict[tuple[str, str], ModelClient] = {}
        self._sessions: Sessions | None = None
        self._methods: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
        }

    @property
    def sessions(self) -> dict[str, Session]:
        """The open sessions by id."""
        return self.manager().sessions

    def manager(self) -> Sessions:
        """The session machinery, imported on first use."""
        if self._sessions is None:
            from refagent.session.manager import Sessions

            self._sessions = Sessions(self)
        return self._sessions

    @property
    def background(self) -> TaskGroup | None:
        """Where sessions run their background tasks (file watchers); None outside ``async with``."""
        return self._background

    async def __aenter__(self) -> Agent:
        self._background = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        background, self._background = self._background, None
        if background is not None:
            background.cancel_scope.cancel()
            await background.__aexit__(None, None, None)

    # -- dispatch (the Handler protocol) -----------------------------------------------------

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._methods.get(method)
        if handler is not None:
            return await handler(params)
        if method in SESSION_METHODS and (method not in NEEDS_STORE or self.store is not None):
            return await getattr(self.manager(), SESSION_METHODS[method])(params)
        raise MethodNotFound(f"Method not found: {_short(method)}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel":
            if self._sessions is not None:
                self._sessions.cancel(params.get("sessionId"))
            return
        raise MethodNotFound(f"Method not found: {_short(method)}")

    # -- initialization --------------------------------------------------------------------

    async def initialize(self, params: dict[str, Any]) -> Reply:
        """Negotiate the version (ours is 1) and exchange capabilities."""
        result = answer_initialize(self.settings, self.store is not None, params)
        self.adopt(params)
        return Reply(result, after=self.warm_up)

    def adopt(self, params: dict[str, Any]) -> None:
        """Take the client's side of an ``initialize`` (answered here, or before the loop by the CLI)."""
        self.client_capabilities = p.optional(params, "clientCapabilities", dict, {})  # type: ignore[assignment]
        self.client_info = p.optional(params, "clientInfo", dict, {})
        log.info("client %s %s", self.client_info.get("name", "?"), self.client_info.get("version", ""))

    async def warm_up(self) -> None:
        """After ``initialize`` is answered: load the session machinery and the model client while the
        editor is busy with its own start-up."""
        await anyio.to_thread.run_sync(_import_sessions)
        await anyio.to_thread.run_sync(_probe_sandbox)
        if self.settings.warm_up is not None:
            try:
                await self.settings.warm_up()
            except Exception:  # only an optimisation: the first turn will import what it needs
                log.exception("warming up the model client failed")

    async def authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        """Re-read the configuration (file and environment); succeed if the default profile has its key."""
        method_id = p.required(params, "methodId", str)
        if method_id != AUTH_METHOD:
            raise InvalidParams(f"Invalid params: unknown authentication method {method_id!r}")
        if self.settings.reload is not None:
            try:
                self.settings = self.settings.reload()
            except Exception as exc:
                raise AuthRequired(f"The configuration could not be read again: {exc}") from None
            self._models.clear()
        self.require_key(self.default_profile())
        return {}

    @staticmethod
    def require_key(profile: ModelProfile) -> None:
        """``-32000`` with what to set, if ``profile`` needs a key it has not got."""
        problem = missing_key(profile)
        if problem is not None:
            raise AuthRequired(problem)

    def model(self, profile: ModelProfile) -> ModelClient:
        """One client per profile, reused across turns (keeps the HTTP connection pool warm)."""
        key = (profile.id, profile.model)
        if key not in self._models:
            self._models[key] = self.settings.make_model(profile)
        return self._models[key]

    def default_profile(self) -> ModelProfile:
        return self.settings.active_profile()


SESSION_METHODS = {
    "session/new": "new_session",
    "session/load": "load_session",
    "session/resume": "resume_session",
    "session/list": "list_sessions",
    "session/close": "close_session",
    "session/delete": "delete_session",
    "session/prompt": "prompt",
    "session/set_mode": "set_mode",
    "session/set_config_option": "set_config_option",
}
NEEDS_STORE = frozenset({"session/load", "session/resume", "session/list", "session/delete"})


def _probe_sandbox() -> None:
    from refagent.sandbox.confinement import machine_support, remove_stale_private_dirs

    machine_support()  # cached: the first session does not wait for it
    remove_stale_private_dirs()


def _import_sessions() -> None:
    import refagent.session.manager  # noqa: F401  (the import is the point)


def _short(text: str, limit: int = 100) -> str:
    """Client strings quoted in errors stay one concise sentence (a 10 MB method name is not repeated)."""
    return text if len(text) <= limit else text[:limit] + "..."
