"""The answers start-up gives before the event loop exists: to ``initialize`` and to ``session/new``,
pure functions of the settings and the request (no anyio, nothing of the session machinery).

An editor waits on ``initialize`` before it shows anything, and on ``session/new`` before the user can
type; importing anyio and asyncio and starting a loop costs more than either answer. So start-up
(:mod:`refagent.server.boot`) answers the requests it reads before the loop with the ``early`` answers of
:data:`refagent.server.methods.REQUESTS` (:func:`early_initialize`, :func:`early_new_session`), which
record in :class:`Started` what the agent takes over. The agent answers the same requests on the loop
with the same functions (:func:`answer_initialize`,
:func:`refagent.session.options.new_session_result`): the answer is the same
whichever phase gives it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refagent import __version__
from refagent.acp import PROTOCOL_VERSION
from refagent.acp import params as p
from refagent.llm.profiles import key_hint
from refagent.server.v2 import wants_v2
from refagent.settings import Settings

if TYPE_CHECKING:
    from refagent.acp.requests import NewSessionParams
    from refagent.sandbox.holding import Holding

AUTH_METHOD = "api-key"
"""The ``agent`` sign-in method: read the configuration again."""
LOGIN_METHOD = "login"
"""The ``terminal`` sign-in method: the client runs ``refagent login`` for the user."""


def answer_initialize(settings: Settings, has_store: bool, params: dict[str, Any]) -> dict[str, Any]:
    """The ``initialize`` result: version 1, and exactly the capabilities implemented with ``settings``.

    Raises :class:`~refagent.acp.errors.InvalidParams` when ``protocolVersion`` is missing.
    """
    p.required(params, "protocolVersion", int)
    # systemPrompt (unstable): a client's instructions appended to ours, or in place of our built-in ones
    # status (unstable): whether a session is open here (and what it is doing) or saved
    session: dict[str, Any] = {
        "close": {},
        "additionalDirectories": {},
        "systemPrompt": {"mode": {"override": {}}},
        "status": {},
    }
    if has_store:  # the rest needs sessions on disk (fork, title, archive: unstable)
        session.update({"list": {}, "resume": {}, "delete": {}, "fork": {}, "title": {}, "archive": {}})
    capabilities: dict[str, Any] = {
        "loadSession": has_store,
        "promptCapabilities": {"image": settings.active_profile().images, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": True},
        "sessionCapabilities": session,
        "providers": {},  # unstable: the editor may route model requests (refagent.server.providers)
    }
    capabilities["auth"] = {"status": {}}  # unstable: whether a model is set up (refagent.server.auth_status)
    if settings.config_file is not None:  # the stored keys can be forgotten
        capabilities["auth"]["logout"] = {}
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": capabilities,
        "authMethods": auth_methods(settings, params),
        "agentInfo": {"name": "refagent", "title": "refagent", "version": __version__},
        # _session/steering, where Claude's and Codex's adapters advertise it and the clients built against
        # them look: on the result itself, not in agentCapabilities (refagent.session.steering)
        "_meta": {"steering": {"supported": True}},
    }


def auth_methods(settings: Settings, params: dict[str, Any]) -> list[dict[str, Any]]:
    """How a user signs in (nothing, for the built-in model with no configuration to sign in to). The
    ``agent`` method: the user sets a model up (``refagent login``, the
    config file or the environment), then the client's ``authenticate`` makes refagent read its
    configuration again. And, when the client can run the agent in a terminal for the user
    (``clientCapabilities.auth.terminal``; older clients say ``_meta: {"terminal-auth": true}``), the
    ``terminal`` method, which runs ``refagent login`` there."""
    configured = [pr for pr in settings.profiles if not pr.scripted]
    if not configured and settings.config_file is None:
        return []  # the built-in model only, and no configuration to set one up in (tests, --demo)
    hint = key_hint(configured[0]) if configured else "run `refagent login` (or set OPENAI_API_KEY or OPENAI_BASE_URL)"
    methods: list[dict[str, Any]] = [
        {
            "id": AUTH_METHOD,
            "name": "Configured model",
            "description": f"{hint}, then authenticate: refagent reads its configuration again.",
        }
    ]
    if settings.config_file is not None and _terminal_auth(params):
        methods.append(
            {
                "type": "terminal",
                "id": LOGIN_METHOD,
                "name": "Set up a model",
                "description": "Choose an endpoint and a model and enter a key, in a terminal (refagent login).",
                "args": ["login"],
            }
        )
    return methods


def _terminal_auth(params: dict[str, Any]) -> bool:
    capabilities = params.get("clientCapabilities")
    if not isinstance(capabilities, dict):
        return False
    auth = capabilities.get("auth")
    if isinstance(auth, dict) and auth.get("terminal") is True:
        return True
    meta = capabilities.get("_meta")
    return isinstance(meta, dict) and meta.get("terminal-auth") is True


class Started:
    """What start-up answered before the event loop, which the agent takes over
    (:class:`refagent.server.agent.Agent`). (A plain class: see :class:`Opened`.)"""

    __slots__ = ("client", "opened")

    def __init__(self) -> None:
        self.client: dict[str, Any] | None = None
        """The params of the last ``initialize`` answered (None: none was)."""
        self.opened: list[Opened] = []
        """The sessions whose ``session/new`` was answered, in order."""


class Opened:
    """A session whose ``session/new`` start-up answered (:func:`early_new_session`): what the agent
    needs to make it once the loop runs. (A plain class: a frozen dataclass takes half a millisecond to
    create, on the way to the answer.)"""

    __slots__ = ("holding", "params", "session_id")

    def __init__(self, session_id: str, params: NewSessionParams, holding: Holding) -> None:
        self.session_id = session_id
        self.params = params
        """The request's, parsed."""
        self.holding = holding
        """How far its sandbox will hold its commands (:meth:`Settings.sandbox_holding`), which its modes
        describe."""


def early_initialize(settings: Settings, started: Started, params: dict[str, Any]) -> dict[str, Any] | None:
    """Start-up's answer to an ``initialize`` (:func:`answer_initialize`), recorded in ``started``; None
    for one asking for version 2 (the agent answers it, in v2: :mod:`refagent.server.v2`)."""
    if wants_v2(params):
        return None
    result = answer_initialize(settings, settings.saves_sessions(), params)
    started.client = params
    return result


def early_new_session(settings: Settings, started: Started, params: dict[str, Any]) -> dict[str, Any] | None:
    """Start-up's answer to a ``session/new`` that follows an ``initialize`` it answered, the session it
    opens recorded in ``started``.

    None when this cannot answer: no ``initialize`` came first, or a sandbox maker of a fork's only says
    how it confines once made. Raises :class:`~refagent.acp.errors.RequestError` for what the agent
    refuses (invalid params, a missing key): the agent then answers it, with the error."""
    # here: the params types, the key check and the modes are not on initialize's way (some 9 ms)
    from refagent.acp.requests import NewSessionParams
    from refagent.ids import new_id
    from refagent.llm.pool import require_key
    from refagent.session.options import new_session_result

    if started.client is None:
        return None
    parsed = NewSessionParams.parse(params)
    require_key(settings.active_profile())
    holding = settings.sandbox_holding()  # the probe's answer: start-up started it before the first line
    if holding is None:
        return None
    opened = Opened(new_id("sess"), parsed, holding)
    result = new_session_result(settings, opened.session_id, holding)
    started.opened.append(opened)
    return result
