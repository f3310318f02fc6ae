"""The MCP servers of a session, as the editor describes them (ACP ``McpServer``, spec "Session Setup").

Three shapes, told apart by ``type`` (schema ``McpServer``; the schema wins over the docs):

* stdio, **no** ``type`` in v1 (``type: "stdio"`` is accepted too): ``{name, command, args, env}``, where
  ``env`` is an *array* of ``{name, value}``. The schema requires ``args`` and ``env``; a missing one reads
  as ``[]``, since some clients leave empty ones out.
* ``{type: "http", name, url, headers}``: streamable HTTP; ``headers`` is an array of ``{name, value}``.
* ``{type: "sse", name, url, headers}``: the older HTTP+SSE transport (deprecated by MCP, still served).

:func:`parse_server` checks one entry and raises :class:`ServerConfigError` with a message for the user;
the hub reports it and the session goes on without that server, so one bad entry never fails
``session/new``. Pure: no I/O, no ``mcp`` import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from refagent.errors import ConfigError


class ServerConfigError(ConfigError):
    """An ``mcpServers`` entry that cannot be used; ``str()`` says why, for the user."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    name: str
    command: str
    """Absolute per the spec; a bare name is looked up on the ``PATH`` the server is given."""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """Set on top of the agent's environment without the model's credentials, in order (the last wins)."""


@dataclass(frozen=True, slots=True)
class HttpServer:
    name: str
    url: str
    transport: Literal["http", "sse"] = "http"
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Not in the repr: they usually carry a token."""


ServerConfig = StdioServer | HttpServer


@dataclass(frozen=True, slots=True)
class Limits:
    """How long things may take (seconds)."""

    connect_timeout: float = 30.0
    """To start, negotiate and list the tools; also for each later listing."""
    call_timeout: float = 600.0
    """For one tool call; then it is cancelled (the server is told) and fails."""
    close_grace: float = 2.0
    """For a stdio server to exit after its stdin closes, and again after SIGTERM."""


def server_name(raw: object, index: int) -> str:
    """The entry's name, or ``server <index>`` when it has none (for messages about a broken entry)."""
    if isinstance(raw, Mapping):
        name = raw.get("name")
        if isinstance(name, str) and name.strip():
            return name
    return f"server {index + 1}"


def parse_server(raw: object) -> ServerConfig:
    """One ``McpServer`` entry; :class:`ServerConfigError` if it cannot be used."""
    if not isinstance(raw, Mapping):
        raise ServerConfigError("the entry is not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ServerConfigError("the entry has no name")
    kind = raw.get("type", "stdio")
    if kind is None:
        kind = "stdio"
    if kind == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ServerConfigError("a stdio server needs a command")
        if "\0" in command:
            raise ServerConfigError("the command contains a NUL byte")
        args = raw.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a for a in args):
            raise ServerConfigError("args must be an array of strings")
        return StdioServer(name, command, tuple(args), _pairs(raw.get("env"), "env"))
    if kind in ("http", "sse"):
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ServerConfigError(f"an {kind} server needs an http:// or https:// url")
        return HttpServer(name, url, kind, _pairs(raw.get("headers"), "headers"))
    raise ServerConfigError(f"transport {kind!r} is not supported (stdio, http and sse are)")


def _pairs(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    """``[{name, value}, ...]`` as pairs. A map (``{NAME: value}``) is accepted too: some clients send one."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        value = [{"name": k, "value": v} for k, v in value.items()]
    if not isinstance(value, list):
        raise ServerConfigError(f"{what} must be an array of {{name, value}} objects")
    pairs: list[tuple[str, str]] = []
    for item in value:
        if not isinstance(item, Mapping):
            raise ServerConfigError(f"{what} must be an array of {{name, value}} objects")
        name, val = item.get("name"), item.get("value")
        if not isinstance(name, str) or not name or not isinstance(val, str):
            raise ServerConfigError(f"each entry of {what} needs a string name and a string value")
        if "\0" in name or "\0" in val or (what == "env" and "=" in name):
            raise ServerConfigError(f"{what} entry {name!r} is not valid")
        pairs.append((name, val))
    return tuple(pairs)
