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
_CHUNK = 1 << 16


def answer_initialize(settings: Settings, has_store: bool, params: dict[str, Any]) -> dict[str, Any]:
    """The ``initialize`` result: version 1, and exactly the capabilities implemented with ``settings``.

    Raises :class:`~refagent.acp.errors.InvalidParams` when ``protocolVersion`` is missing.
    """
    p.required(params, "protocolVersion", int)
    session: dict[str, Any] = {"close": {}, "additionalDirectories": {}}
    if has_store:  # the rest needs sessions on disk
        session.update({"list": {}, "resume": {}, "delete": {}})
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": has_store,
            "promptCapabilities": {"image": settings.active_profile().images, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},
            "sessionCapabilities": session,
        },
        "authMethods": _auth_methods(settings),
        "agentInfo": {"name": "refagent", "title": "refagent", "version": __version__},
    }


def _auth_methods(settings: Settings) -> list[dict[str, Any]]:
    """One method: the agent reads its configuration again, after the user set the key it names."""
    if all(pr.scripted for pr in settings.profiles):
        return []
    hint = key_hint(settings.active_profile())
    return [
        {
            "id": AUTH_METHOD,
            "name": "API key",
            "description": f"{hint}, then authenticate: refagent reads its configuration again.",
        }
    ]


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
