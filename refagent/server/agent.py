"""The ACP agent: the connection's handler (:class:`Agent`).

Every method a client may call is in :data:`refagent.server.methods.REQUESTS` (and ``session/cancel`` in
its ``NOTIFICATIONS``), each mapped to the :class:`Agent` method that answers it; anything else is
``-32601``. ``initialize`` and ``authenticate`` are answered here; the ``session/*`` methods by
:class:`refagent.session.manager.SessionManager` (``session/prompt`` by the session itself). Capabilities
advertised at ``initialize`` are exactly the ones implemented
(:func:`refagent.server.handshake.answer_initialize`).

The agent starts where start-up stopped (:mod:`refagent.server.boot`): it is made with what start-up
answered before the loop (:class:`~refagent.server.handshake.Started`: the client's ``initialize``, the
sessions it opened) and takes it over. The model client's heavy import (``openai``, most of a second of
CPU) waits until the first session's response is out and its workspace built, and no other session is
being opened: run earlier, it would hold the interpreter while those responses are being made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from refagent.acp import params as p
from refagent.acp import requests as typed
from refagent.acp.connection import Peer, Reply
from refagent.acp.errors import AuthRequired, InternalError, InvalidParams, InvalidRequest, MethodNotFound
from refagent.config.writer import forget_keys
from refagent.errors import ConfigError
from refagent.llm.pool import ModelPool, require_key
from refagent.llm.profiles import ModelProfile, missing_key, scripted_profile
from refagent.sandbox.confine.confinement import machine_support, remove_stale_cgroups
from refagent.sandbox.confine.private_tmp import remove_stale_private_dirs
from refagent.server.auth_status import auth_status
from refagent.server.handshake import AUTH_METHOD, Started, answer_initialize
from refagent.server.methods import NOTIFICATIONS, REQUESTS
from refagent.server.providers import Route, known_provider_profiles, listing, protocol_of, route_from, routed
from refagent.server.v2 import wants_v2
from refagent.server.v2.bridge import V2Bridge
from refagent.session.manager import SessionManager
from refagent.settings import Settings

__all__ = ["Agent", "Settings"]

if TYPE_CHECKING:
    from refagent.acp.types import ClientCapabilities
    from refagent.session.state import Session

log = logging.getLogger(__name__)

Params = dict[str, Any]
CLOSE_SECONDS = 2
"""How long the model clients may take to close when the agent exits."""


class Agent:
    """Serves one client connection. Sessions live as long as the connection.

    Use as an async context manager around :meth:`Connection.serve`: it owns the sessions' background
    tasks (file watchers, MCP servers) and stops them on exit.
    """

    def __init__(self, peer: Peer, settings: Settings | None = None, started: Started | None = None) -> None:
        self.peer = peer
        self.settings = settings or Settings()
        self.store = self.settings.store() if self.settings.store is not None else None
        self.client_capabilities: ClientCapabilities = {}
        self.initialized = False
        """Whether ``initialize`` has been answered (a later one keeps the protocol version: :meth:`handle_request`);
        its capabilities are taken for the sessions opened after it."""
        self.client_info: dict[str, Any] = {}
        self.models = ModelPool(self.settings.make_model)
        self._configured = self.settings
        """The settings as configured, before the editor's provider routings (:attr:`settings` has them)."""
        self._routes: dict[str, Route | None] = {}
        self._disabled: list[ModelProfile] = []
        self._background: TaskGroup | None = None
        self.v2: V2Bridge | None = None
        """Set when the client negotiated ACP v2 (:mod:`refagent.server.v2`)."""
        self._manager: SessionManager | None = None
        self.first_session = anyio.Event()
        """Set once the first session's response is written and its own after-work done (its workspace
        built): start-up is over (it turns the garbage collector back on)."""
        self._started = started
        self._auth_heard: dict[str, Any] | None = None
        """The sign-in status the client last heard (at ``initialize``, from ``auth/status``, or in an
        ``auth/status_update``): an update is sent only when it differs."""

    async def __aenter__(self) -> Agent:
        self._background = background = await anyio.create_task_group().__aenter__()
        started, self._started = self._started, None
        if started is not None and started.client is not None:  # take over what start-up answered
            self.adopt(started.client)
            background.start_soon(self.warm_up)
            for opened in started.opened:
                _, after = self.manager().open_new(opened.params, opened.session_id, opened.holding)
                background.start_soon(self._and_after_first_session(after))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        background, self._background = self._background, None
        if background is not None:
            background.cancel_scope.cancel()
            await background.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_SECONDS):
            await self.models.aclose()  # their connection pools, now, on this event loop

    @property
    def background_tasks(self) -> TaskGroup | None:
        """The task group of the sessions' background work (None outside ``async with``)."""
        return self._background

    @property
    def sessions(self) -> dict[str, Session]:
        """The open sessions by id."""
        return self.manager().sessions

    def manager(self) -> SessionManager:
        """The session machinery, made on first use."""
        if self._manager is None:
            self._manager = SessionManager(
                peer=self.peer,
                settings=self.settings,
                store=self.store,
                background=self._background,
                models=self.models,
                capabilities=self.client_capabilities,
            )
        return self._manager

    # -- dispatch (the connection's Handler protocol) -----------------------------------------

    async def handle_request(self, method: str, params: Params) -> Any:
        if method == "initialize" and self.initialized and wants_v2(params) != (self.v2 is not None):
            # The sessions, their updates and every request after are in the version the connection began
            # with: switching halfway would leave each half in the other's.
            raise InvalidRequest(
                f"Invalid Request: this connection was initialized with protocol version "
                f"{2 if self.v2 is not None else 1}; start the agent again to speak another"
            )
        if self.v2 is not None:  # the client negotiated v2: its requests are translated for the methods below
            return await self.v2.handle_request(method, params)
        if method == "initialize" and wants_v2(params):
            self.v2 = V2Bridge(self)
            return await self.v2.handle_request(method, params)
        return await self.handle_v1_request(method, params)

    async def handle_v1_request(self, method: str, params: Params) -> Any:
        """Answer a v1 request (:data:`REQUESTS`)."""
        route = REQUESTS.get(method)
        if route is None or (route.needs_store and self.store is None):
            raise MethodNotFound(f"Method not found: {_short(method)}")
        handler: Callable[[Params], Awaitable[Any]] = getattr(self, route.handler)
        return await handler(params)

    async def handle_notification(self, method: str, params: Params) -> None:
        name = NOTIFICATIONS.get(method)
        if name is None:
            raise MethodNotFound(f"Method not found: {_short(method)}")
        handler: Callable[[Params], None] = getattr(self, name)
        handler(params)

    # -- initialization ----------------------------------------------------------------------

    async def initialize(self, params: Params) -> Reply:
        """``initialize``: negotiate the version (ours is 1) and exchange capabilities."""
        result = answer_initialize(self.settings, self.store is not None, params)
        self.adopt(params)
        return Reply(result, after=self.warm_up)

    def adopt(self, params: Params) -> None:
        """Take the client's side of an ``initialize`` (answered here, or before the loop by start-up)."""
        self.client_capabilities = p.optional(params, "clientCapabilities", dict, {})  # type: ignore[assignment]
        self.client_info = p.optional(params, "clientInfo", dict, {})
        self.initialized = True
        self._auth_heard = auth_status(self.settings)  # what the answer's authMethods and auth/status would say
        if self._manager is not None:
            self._manager.capabilities = self.client_capabilities
        log.info("client %s %s", self.client_info.get("name", "?"), self.client_info.get("version", ""))

    async def warm_up(self) -> None:
        """After ``initialize`` is answered: finish probing the sandbox while the editor is busy with its
        own start-up. (What no response waits for comes after the first session's:
        :meth:`_after_first_session`.)"""
        await anyio.to_thread.run_sync(machine_support)  # cached: the first session does not wait for it

    async def _after_first_session(self) -> None:
        """Once, after the first session's response and its after-work: what no response waits for, kept
        off the way to it. The private directories dead agents left are removed, and the model client's
        heavy modules are imported (``Settings.warm_up``: ``openai``, most of a second of CPU), well before
        the user's first prompt in the common case."""
        if self.first_session.is_set():
            return
        self.first_session.set()
        await self.manager().none_opening()  # a session/new sent with the first is answered before this
        await anyio.to_thread.run_sync(remove_stale_private_dirs)
        await anyio.to_thread.run_sync(remove_stale_cgroups)
        if self.settings.warm_up is not None:
            try:
                await self.settings.warm_up()
            except Exception:  # only an optimisation: the first turn will import what it needs
                log.exception("warming up the model client failed")
        await self._prepare_model()

    async def _prepare_model(self) -> None:
        """Make the default profile's model client and let it prepare (import and build its HTTP client), so
        that a prompt sent soon after the first session does not wait for that (only an optimisation: a
        profile without its key, or a failure, is left to the first prompt to report)."""
        profile = self.settings.active_profile()
        if missing_key(profile) is not None:
            return
        prepare = getattr(self.models.get(profile), "prepare", None)  # not part of ModelClient: optional
        if prepare is None:
            return
        try:
            await prepare()
        except Exception as exc:
            log.debug("preparing the model client failed: %s", exc)

    def _then_after_first_session(self, reply: Reply) -> Reply:
        """``reply``, with :meth:`_after_first_session` after its own after-work."""
        return Reply(reply.result, after=self._and_after_first_session(reply.after))

    def _and_after_first_session(self, after: Callable[[], Awaitable[None]]) -> Callable[[], Coroutine[Any, Any, None]]:
        async def then() -> None:
            await after()
            await self._after_first_session()

        return then

    async def authenticate(self, params: Params) -> Reply:
        """``authenticate``: re-read the configuration (file and environment); succeed if the default
        profile has its key (then ``auth/status_update``, when the status changed)."""
        method_id = typed.AuthenticateParams.parse(params).method_id
        if method_id != AUTH_METHOD:
            raise InvalidParams(f"Invalid params: unknown authentication method {method_id!r}")
        if self.settings.reload is not None:
            self._reload()
            if all(pr.scripted for pr in self.settings.profiles):  # read again, and still no model set up
                raise AuthRequired(
                    "No model is set up yet: run `refagent login` in a terminal (or set OPENAI_API_KEY or "
                    "OPENAI_BASE_URL, or write a profile in the config file), then authenticate again."
                )
        require_key(self.settings.active_profile())
        return Reply({}, after=self._tell_auth_status)

    async def logout(self, params: Params) -> Reply:
        """``logout``: forget the keys stored in the config file (``refagent logout`` does the same), then read
        the configuration again: a new session needs a key again (a key from the environment stays: only the
        user can unset it). Sessions already open keep the model client they have. Then
        ``auth/status_update``, when the status changed."""
        path = self.settings.config_file
        if path is None:  # not advertised
            raise MethodNotFound("Method not found: logout")
        try:
            removed = await anyio.to_thread.run_sync(forget_keys, path)
        except ConfigError as exc:
            raise InternalError(f"Could not forget the stored keys: {exc}") from None
        log.info("logout: the stored keys of %d profile(s) are forgotten", len(removed))
        if self.settings.reload is not None:
            with contextlib.suppress(AuthRequired):  # a configuration broken meanwhile: the next sign-in says so
                self._reload()
        return Reply({}, after=self._tell_auth_status)

    async def auth_status(self, params: Params) -> dict[str, Any]:
        """``auth/status`` (unstable): whether a model is set up (:mod:`refagent.server.auth_status`); never
        ``-32000``, as a client asks it to learn whether it must sign in."""
        self._auth_heard = auth_status(self.settings)
        return self._auth_heard

    async def _tell_auth_status(self) -> None:
        """``auth/status_update`` (unstable, advertised with ``auth.status``): the sign-in status, once it
        differs from what the client last heard (the schema asks no more often)."""
        status = auth_status(self.settings)
        if self.initialized and status != self._auth_heard:
            self._auth_heard = status
            await self.peer.notify("auth/status_update", status)

    def _reload(self) -> None:
        """Read the configuration again; new sessions and prompts use it (with the editor's routings)."""
        assert self.settings.reload is not None
        try:
            self._configured = self.settings.reload()
        except Exception as exc:
            raise AuthRequired(f"The configuration could not be read again: {exc}") from None
        self._reconfigure()

    def _reconfigure(self) -> None:
        """Use the configuration with the editor's provider routings (:mod:`refagent.server.providers`)."""
        settings = self._configured
        if self._routes:
            kept, self._disabled = routed(settings.profiles, self._routes, known_provider_profiles())
            default = settings.default_profile if any(pr.id == settings.default_profile for pr in kept) else None
            settings = dataclasses.replace(settings, profiles=kept or [scripted_profile()], default_profile=default)
        self.settings = settings
        self.models.reset(settings.make_model)
        if self._manager is not None:
            self._manager.reconfigure(settings)

    # -- providers (unstable): the editor routes model requests (refagent.server.providers)

    async def list_providers(self, params: Params) -> dict[str, Any]:
        return listing([pr for pr in self.settings.profiles if not pr.scripted], self._disabled)

    async def set_provider(self, params: Params) -> Reply:
        provider_id, route = route_from(params)
        self._known_provider(provider_id)
        self._routes[provider_id] = route
        self._reconfigure()
        log.info(
            "providers/set %s: %s at %s (headers: %s)",
            provider_id,
            route.protocol,
            route.base_url,
            ", ".join(name for name, _ in route.headers) or "none",
        )
        return Reply({}, after=self._tell_auth_status)  # the default profile may be routed elsewhere now

    async def disable_provider(self, params: Params) -> Reply:
        provider_id = p.required(params, "providerId", str)
        self._known_provider(provider_id)
        self._routes[provider_id] = None
        self._reconfigure()
        return Reply({}, after=self._tell_auth_status)

    def _known_provider(self, provider_id: str) -> None:
        """Raise ``-32602`` unless ``provider_id`` is a provider of the configuration or the data file."""
        ids = {pr.id for pr in (*self._configured.profiles, *self._disabled) if protocol_of(pr) is not None}
        if provider_id not in ids and provider_id not in known_provider_profiles():
            listed = ", ".join(sorted(ids | set(known_provider_profiles())))
            raise InvalidParams(f"Invalid params: unknown provider {provider_id!r} (known: {listed})")

    # -- sessions: their params typed here (refagent.acp.requests, as `typed`), answered by the session manager
    # Each parse raises -32602 for params the schema does not allow, before the manager sees anything.

    async def new_session(self, params: Params) -> Reply:
        return self._then_after_first_session(await self.manager().new_session(typed.NewSessionParams.parse(params)))

    async def fork_session(self, params: Params) -> Reply:
        # A fork opens a session too, and may be a connection's first (an editor forks a saved session).
        return self._then_after_first_session(await self.manager().fork_session(typed.OpenSessionParams.parse(params)))

    async def load_session(self, params: Params) -> Reply:
        return self._then_after_first_session(
            await self.manager().load_session(typed.OpenSessionParams.parse_load(params))
        )

    async def resume_session(self, params: Params) -> Reply:
        return self._then_after_first_session(
            await self.manager().resume_session(typed.OpenSessionParams.parse(params))
        )

    async def list_sessions(self, params: Params) -> dict[str, Any]:
        return await self.manager().list_sessions(typed.ListSessionsParams.parse(params))

    async def close_session(self, params: Params) -> dict[str, Any]:
        return await self.manager().close_session(typed.SessionParams.parse(params))

    async def delete_session(self, params: Params) -> dict[str, Any]:
        return await self.manager().delete_session(typed.SessionParams.parse(params))

    async def archive_session(self, params: Params) -> dict[str, Any]:
        return await self.manager().archive_session(typed.SessionParams.parse(params))

    async def unarchive_session(self, params: Params) -> dict[str, Any]:
        return await self.manager().unarchive_session(typed.SessionParams.parse(params))

    async def session_status(self, params: Params) -> dict[str, Any]:
        return await self.manager().session_status(typed.SessionParams.parse(params))

    async def prompt(self, params: Params) -> dict[str, Any]:
        return await self.manager().prompt(typed.PromptParams.parse(params))

    async def set_title(self, params: Params) -> dict[str, Any]:
        return await self.manager().set_title(typed.SetTitleParams.parse(params))

    async def steer(self, params: Params) -> dict[str, Any]:
        """``_session/steering`` (an extension, as Claude's and Codex's adapters have it): a message for the
        running turn, with a prompt's params (:mod:`refagent.session.steering`)."""
        return await self.manager().steer(typed.PromptParams.parse(params))

    async def set_mode(self, params: Params) -> dict[str, Any]:
        return await self.manager().set_mode(typed.SetModeParams.parse(params))

    async def set_config_option(self, params: Params) -> dict[str, Any]:
        return await self.manager().set_config_option(typed.SetConfigOptionParams.parse(params))

    def cancel(self, params: Params) -> None:
        """``session/cancel``: ends the session's turn and the prompts queued behind it."""
        target = typed.SessionParams.parse_notification(params)
        if self._manager is not None and target is not None:  # no sessions yet: nothing to cancel
            self._manager.cancel(target)


def _short(text: str, limit: int = 100) -> str:
    """Client strings quoted in errors stay one concise sentence (a 10 MB method name is not repeated)."""
    return text if len(text) <= limit else text[:limit] + "..."
