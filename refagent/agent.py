"""ACP methods -> sessions. The :class:`Agent` is the connection's handler.

Methods (ACP v1, agent side): ``initialize``, ``authenticate``, ``session/new``, ``session/prompt``,
``session/cancel`` (notification), ``session/set_mode``, ``session/set_config_option``. Anything else is
``-32601``. Capabilities advertised at ``initialize`` are exactly the ones implemented here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from refagent import __version__
from refagent.acp import params as p
from refagent.acp import updates
from refagent.acp.connection import Reply
from refagent.acp.errors import AuthRequired, InvalidParams, MethodNotFound, ResourceNotFound
from refagent.acp.types import PROTOCOL_VERSION, ClientCapabilities
from refagent.content import user_message
from refagent.ids import new_id
from refagent.llm.profiles import ModelProfile, key_hint, missing_key, scripted_profile
from refagent.llm.protocol import ModelClient, Usage
from refagent.prompt import system_prompt
from refagent.session import Session
from refagent.tools.base import BaseTool
from refagent.turn import DEFAULT_MAX_REQUESTS, Turn, run_prompt
from refagent.workspace import Sandbox, Watcher, default_tools, local_sandbox
from refagent.workspace import build as build_workspace

if TYPE_CHECKING:
    from refagent.llm.config import Config

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 10 * 1024 * 1024
AUTH_METHOD = "api-key"


class Peer(Protocol):
    """The client as the agent sees it (a :class:`refagent.acp.connection.Connection`)."""

    async def request(self, method: str, params: dict[str, Any]) -> Any: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...


def _offline_model(profile: ModelProfile) -> ModelClient:
    from refagent.testing.scripted_model import offline_model

    return offline_model()


@dataclass
class Settings:
    """What the agent is configured with. Defaults: the built-in scripted model, the local sandbox and
    the standard tools. Tests pass their own."""

    profiles: list[ModelProfile] = field(default_factory=lambda: [scripted_profile()])
    default_profile: str | None = None
    make_model: Callable[[ModelProfile], ModelClient] = _offline_model
    max_requests: int = DEFAULT_MAX_REQUESTS
    make_sandbox: Callable[[str, list[str]], Sandbox] = local_sandbox
    tools: Callable[[], Sequence[BaseTool]] = default_tools
    reload: Callable[[], Settings] | None = None
    """Reads the configuration again (``authenticate`` does, after the user set a key)."""
    warm_up: Callable[[], Awaitable[None]] | None = None
    """Run once ``initialize`` has been answered: imports the model client's heavy modules early."""

    @classmethod
    def from_config(cls, config: Config, reload: Callable[[], Settings] | None = None) -> Settings:
        from refagent.llm.openai_client import warm_up

        needs_client = any(not p.scripted for p in config.profiles)
        return cls(
            profiles=config.profiles,
            default_profile=config.default_profile,
            make_model=config.make_model,
            max_requests=config.max_requests or DEFAULT_MAX_REQUESTS,
            reload=reload,
            warm_up=warm_up if needs_client else None,
        )


class Agent:
    """Serves one client connection. Sessions live as long as the connection.

    Use as an async context manager around :meth:`Connection.serve`: it owns the sessions' background
    tasks (file watchers) and stops them on exit.
    """

    def __init__(self, peer: Peer, settings: Settings | None = None) -> None:
        self.peer = peer
        self._background: TaskGroup | None = None
        self.settings = settings or Settings()
        self.client_capabilities: ClientCapabilities = {}
        self.client_info: dict[str, Any] = {}
        self.sessions: dict[str, Session] = {}
        self._models: dict[tuple[str, str], ModelClient] = {}
        self._methods = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option,
        }

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
        if handler is None:
            raise MethodNotFound(f"Method not found: {method}")
        return await handler(params)

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel":
            session = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
            if session is not None:  # cancel for an unknown or idle session: nothing to do
                session.cancel()
            return
        raise MethodNotFound(f"Method not found: {method}")

    # -- initialization --------------------------------------------------------------------

    async def initialize(self, params: dict[str, Any]) -> Reply:
        """Negotiate the version (ours is 1) and exchange capabilities."""
        p.required(params, "protocolVersion", int)
        capabilities = p.optional(params, "clientCapabilities", dict, {})
        self.client_capabilities = capabilities  # type: ignore[assignment]
        self.client_info = p.optional(params, "clientInfo", dict, {})
        log.info("client %s %s", self.client_info.get("name", "?"), self.client_info.get("version", ""))
        result = {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {
                    "image": self._default_profile().images,
                    "audio": False,
                    "embeddedContext": True,
                },
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {},
            },
            "authMethods": self._auth_methods(),
            "agentInfo": {"name": "refagent", "title": "refagent", "version": __version__},
        }
        return Reply(result, after=self._warm_up)

    async def _warm_up(self) -> None:
        if self.settings.warm_up is not None:
            try:
                await self.settings.warm_up()
            except Exception:  # only an optimisation: the first turn will import what it needs
                log.exception("warming up the model client failed")

    def _auth_methods(self) -> list[dict[str, Any]]:
        """One method: the agent re-reads its configuration, after the user set the key it names."""
        keyed = [p for p in self.settings.profiles if not p.scripted]
        if not keyed:
            return []
        hint = key_hint(self._default_profile())
        return [
            {
                "id": AUTH_METHOD,
                "name": "API key",
                "description": f"{hint}, then authenticate: refagent reads its configuration again.",
            }
        ]

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
        self._require_key(self._default_profile())
        return {}

    @staticmethod
    def _require_key(profile: ModelProfile) -> None:
        problem = missing_key(profile)
        if problem is not None:
            raise AuthRequired(problem)

    # -- sessions --------------------------------------------------------------------------

    async def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = p.absolute_path(params, "cwd")
        servers = p.required(params, "mcpServers", list)
        extra = p.absolute_paths(params, "additionalDirectories")
        self._require_key(self._default_profile())
        session_id = new_id("sess")
        session = self._create_session(session_id, cwd, extra, servers)
        log.info("session %s in %s", session.id, cwd)
        return {"sessionId": session.id, "modes": session.modes(), "configOptions": session.config_options()}

    def _create_session(self, session_id: str, cwd: str, extra: list[str], servers: list[Any]) -> Session:
        session = Session(
            id=session_id,
            cwd=cwd,
            additional_directories=extra,
            mcp_servers=servers,
            client_capabilities=self.client_capabilities,
            profiles=self.settings.profiles,
            profile_id=self._default_profile().id,
            send=functools.partial(self._send_update, session_id),
        )
        sandbox = self.settings.make_sandbox(cwd, extra)
        workspace = build_workspace(
            session_id=session_id,
            cwd=cwd,
            additional=extra,
            capabilities=self.client_capabilities,
            peer=self.peer,
            sandbox=sandbox,
            tools=self.settings.tools(),
            permissions=session.permissions,
            mode=lambda: session.mode_id,
            send_update=session.update,
            cancel_turn=session.cancel,
        )
        session.tools = workspace.runner
        if sandbox.watcher is not None and self._background is not None:
            self._background.start_soon(_watch, sandbox.watcher)
            session.changed_files = sandbox.watcher.drain
        self.sessions[session.id] = session
        return session

    def _session(self, params: dict[str, Any]) -> Session:
        session_id = p.required(params, "sessionId", str)
        session = self.sessions.get(session_id)
        if session is None:
            raise ResourceNotFound(f"Session not found: {session_id}")
        return session

    async def _send_update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    async def set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        await session.set_mode(p.required(params, "modeId", str))
        return {}

    async def set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        config_id = p.required(params, "configId", str)
        if "value" not in params:
            raise InvalidParams("Invalid params: missing required field 'value'")
        if config_id == "model":
            chosen = next((pr for pr in session.profiles if pr.id == params["value"]), None)
            if chosen is not None:
                self._require_key(chosen)
        return {"configOptions": await session.set_config_option(config_id, params["value"])}

    # -- the prompt turn -------------------------------------------------------------------

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session(params)
        blocks = p.required(params, "prompt", list)
        message = await user_message(blocks, images=session.profile.images, read_text=self._reader(session))
        turn = Turn(
            model=self._model(session.profile),
            history=session.history,
            send=session.update,
            system_prompt=system_prompt(session.cwd, session.roots),
            tools=session.tools,
            max_requests=self.settings.max_requests,
            on_usage=functools.partial(self._report_usage, session),
            changed_files=session.changed_files,
        )
        scope = session.open_turn()
        try:
            stop = await run_prompt(turn, message, scope, session.turn_lock)
        finally:
            session.close_turn(scope)
        return {"stopReason": stop}

    async def _report_usage(self, session: Session, usage: Usage) -> None:
        """``usage_update``: tokens in context after this response, the window, and the session's cost."""
        profile = session.profile
        cost: tuple[float, str] | None = None
        if profile.input_price is not None or profile.output_price is not None:
            session.cost += usage.prompt_tokens * (profile.input_price or 0.0)
            session.cost += usage.completion_tokens * (profile.output_price or 0.0)
            cost = (round(session.cost, 6), profile.currency)
        used = usage.prompt_tokens + usage.completion_tokens
        await session.update(updates.usage(used, profile.context_window, cost))

    def _model(self, profile: ModelProfile) -> ModelClient:
        """One client per profile, reused across turns (keeps the HTTP connection pool warm)."""
        key = (profile.id, profile.model)
        if key not in self._models:
            self._models[key] = self.settings.make_model(profile)
        return self._models[key]

    def _default_profile(self) -> ModelProfile:
        wanted = self.settings.default_profile
        for profile in self.settings.profiles:
            if profile.id == wanted:
                return profile
        return self.settings.profiles[0]

    def _reader(self, session: Session) -> Callable[[str], Any]:
        """How ``resource_link``s are read: through the editor when it can, else from disk."""

        async def read(path: str) -> str:
            if session.client_capabilities.get("fs", {}).get("readTextFile"):
                result = await self.peer.request("fs/read_text_file", {"sessionId": session.id, "path": path})
                content = result.get("content") if isinstance(result, dict) else None
                if not isinstance(content, str):
                    raise ValueError("the editor returned no content")
                return content
            data = await anyio.Path(path).read_bytes()
            return data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")

        return read


async def _watch(watcher: Watcher) -> None:
    """Run a session's file watcher; a watcher that fails costs the notes about changed files, nothing else."""
    try:
        await watcher.run()
    except Exception:
        log.exception("the file watcher stopped")
