"""The first exchange: the answer to ``initialize``, computable before the event loop exists.

An editor waits on ``initialize`` before it shows anything. Importing anyio and asyncio and starting a
loop costs more than the rest of the answer, so the CLI reads the first line with a plain blocking read
(:func:`read_first_line`), answers an ``initialize`` at once with :func:`answer_initialize`, and only then
starts the loop and the agent, which adopt the client's capabilities (``Agent.adopt``) and carry on
reading after that line. Anything other than an ``initialize`` first is left to the agent as usual.
:class:`refagent.server.agent.Agent` answers a later ``initialize`` with the same function.

This module imports no anyio and nothing of the session machinery.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from refagent import __version__
from refagent.acp import PROTOCOL_VERSION
from refagent.acp import params as p
from refagent.llm.profiles import key_hint
from refagent.settings import Settings

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
    buffer = bytearray()
    while (end := buffer.find(b"\n")) == -1:
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


def _exit_now(signum: int, frame: object) -> None:
    os._exit(0)
