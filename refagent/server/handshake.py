"""The first exchanges: the answers to ``initialize`` and to the first ``session/new``, computable before
the event loop exists.

An editor waits on ``initialize`` before it shows anything, and on ``session/new`` before the user can
type. Importing anyio and asyncio and starting a loop costs more than either answer, so the CLI reads the
first line with a plain blocking read (:func:`read_first_line`), answers an ``initialize`` at once with
:func:`answer_initialize`, waits a moment for the next line (:func:`read_line`; editors send
``session/new`` as soon as they have the answer) and answers a ``session/new`` with
:func:`answer_new_session`. Only then does it start the loop and the agent, which adopt the client's
capabilities (``Agent.adopt``) and the session opened (``Agent.adopt_session``: made with what the
answer said, then set up as any new session is after its response) and carry on reading after those
lines. Anything else is left to the agent as usual, and so is a request either function cannot answer
(invalid params: the agent answers with the error). :class:`refagent.server.agent.Agent` answers a later
``initialize`` with the same function, and any ``session/new`` with the functions this one uses.

This module imports no anyio and nothing of the session machinery.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import TYPE_CHECKING, Any

from refagent import __version__
from refagent.acp import MAX_LINE_BYTES, PROTOCOL_VERSION
from refagent.acp import params as p
from refagent.llm.profiles import key_hint
from refagent.settings import Settings

if TYPE_CHECKING:
    from refagent.acp.requests import NewSessionParams
    from refagent.confine.confinement import Support

AUTH_METHOD = "api-key"
"""The ``agent`` sign-in method: read the configuration again."""
LOGIN_METHOD = "login"
"""The ``terminal`` sign-in method: the client runs ``refagent login`` for the user."""
_CHUNK = 1 << 16


def answer_initialize(settings: Settings, has_store: bool, params: dict[str, Any]) -> dict[str, Any]:
    """The ``initialize`` result: version 1, and exactly the capabilities implemented with ``settings``.

    Raises :class:`~refagent.acp.errors.InvalidParams` when ``protocolVersion`` is missing.
    """
    p.required(params, "protocolVersion", int)
    # systemPrompt (unstable): a client's instructions appended to ours, or in place of our built-in ones
    session: dict[str, Any] = {"close": {}, "additionalDirectories": {}, "systemPrompt": {"mode": {"override": {}}}}
    if has_store:  # the rest needs sessions on disk
        session.update({"list": {}, "resume": {}, "delete": {}, "fork": {}, "title": {}})  # fork, title: unstable
    capabilities: dict[str, Any] = {
        "loadSession": has_store,
        "promptCapabilities": {"image": settings.active_profile().images, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": True},
        "sessionCapabilities": session,
        # _session/steering, as Claude's and Codex's adapters advertise it (refagent.session.steering)
        "_meta": {"steering": {"supported": True}},
    }
    if settings.config_file is not None:  # the stored keys can be forgotten
        capabilities["auth"] = {"logout": {}}
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": capabilities,
        "authMethods": auth_methods(settings, params),
        "agentInfo": {"name": "refagent", "title": "refagent", "version": __version__},
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


def read_first_line(fd: int) -> tuple[bytes | None, bytes]:
    """Block until the first line of ``fd`` arrives: ``(line, what was read after it)``.

    ``(None, rest)`` at EOF before a newline. From now until the event loop installs its own handlers,
    SIGTERM, SIGINT and SIGHUP end the process with status 0: nothing has started that needs cleaning up.
    """
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _exit_now)
    return read_line(fd, b"", None)


def read_line(fd: int, buffered: bytes, timeout: float | None) -> tuple[bytes | None, bytes]:
    """The next line of ``fd``, ``buffered`` (read from it already) first: ``(line, what was read after
    it)``, the line without its end. ``(None, everything read)`` at EOF before a newline, or when no
    newline came within ``timeout`` seconds (None: no limit)."""
    buffer = bytearray(buffered)
    deadline = None if timeout is None else time.monotonic() + timeout
    searched = 0  # where the search for the newline goes on: each byte is looked at once
    while (end := buffer.find(b"\n", searched)) == -1:
        searched = len(buffer)
        if len(buffer) > MAX_LINE_BYTES:  # the agent's reader drops it, and answers with an error
            return None, bytes(buffer)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, bytes(buffer)
        try:
            chunk = os.read(fd, _CHUNK)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            return None, bytes(buffer)
        buffer += chunk
    return bytes(buffer[:end]).rstrip(b"\r"), bytes(buffer[end + 1 :])


class Opened:
    """A session opened by :func:`answer_new_session`, its response written: what the agent needs to make
    it once the loop runs (:meth:`refagent.server.agent.Agent.adopt_session`). (A plain class: see
    :class:`refagent.server.agent.Route`.)"""

    __slots__ = ("params", "session_id", "support")

    def __init__(self, session_id: str, params: NewSessionParams, support: Support) -> None:
        self.session_id = session_id
        self.params = params
        """The request's, parsed."""
        self.support = support
        """How its commands will be confined (:meth:`Settings.sandbox_support`), which its modes describe."""


def answer_new_session(settings: Settings, params: dict[str, Any]) -> tuple[dict[str, Any], Opened] | None:
    """The first ``session/new``'s result, and the session it opens, computed with no event loop: the
    agent answers the same request with the same functions, and this is what it would answer.

    None when this cannot answer: a sandbox maker of a fork's that only says how it confines once made.
    Raises :class:`~refagent.acp.errors.RequestError` for what the agent refuses (invalid params, a
    missing key): the agent then answers it, with the error."""
    from refagent.acp.requests import NewSessionParams
    from refagent.ids import new_id
    from refagent.llm.pool import require_key
    from refagent.session.modes import DEFAULT_MODE
    from refagent.session.options import state

    parsed = NewSessionParams.parse(params)
    profile = settings.active_profile()
    require_key(profile)
    support = settings.sandbox_support()  # the probe's answer: the CLI started it before the first line
    if support is None:
        return None
    opened = Opened(new_id("sess"), parsed, support)
    result = state(DEFAULT_MODE, support, settings.profiles, profile.id, profile.default_reasoning_effort)
    return {"sessionId": opened.session_id, **result}, opened


def _exit_now(signum: int, frame: object) -> None:
    os._exit(0)
