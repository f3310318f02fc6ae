"""The MCP servers of a session, as the editor describes them (ACP ``McpServer``, spec "Session Setup").

Three shapes, told apart by ``type`` (schema ``McpServer``; the schema wins over the docs):

* stdio, **no** ``type`` in v1 (``type: "stdio"`` is accepted too): ``{name, command, args, env}``, where
  ``env`` is an *array* of ``{name, value}``. The schema requires ``args`` and ``env``; a missing one reads
  as ``[]``, since some clients leave empty ones out.
* ``{type: "http", name, url, headers}``: streamable HTTP; ``headers`` is an array of ``{name, value}``.
* ``{type: "sse", name, url, headers}``: the older HTTP+SSE transport (deprecated by MCP, still served).

:func:`parse_server` checks one entry and raises :class:`ServerConfigError` with a message for the user;
the hub reports it and the session goes on without that server, so one bad entry never fails
``session/new``. No ``mcp`` import.

A session's servers come from three places, merged by name (:func:`merged`): the editor's (``session/new``),
the config file's (:mod:`refagent.config.allowed`), and those of the project's ``.mcp.json`` that the
user's config allows by name (:func:`project_servers`: a repository never starts a server by itself).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
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


PROJECT_FILE = ".mcp.json"
"""A project's MCP servers, in Claude Code's format: ``{"mcpServers": {"NAME": {...}}}``."""
MAX_PROJECT_FILE = 1 << 20


def project_servers(cwd: str, allowed: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The servers of ``cwd``'s :data:`PROJECT_FILE` whose names ``allowed`` lists, as ACP entries, and the
    names of the others (which do not start). None when there is no such file. Raises
    :class:`ServerConfigError` for a file that cannot be read as one (a link, too large, not JSON, not
    that shape): the repository's, so it is said, not trusted."""
    path = os.path.join(cwd, PROJECT_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return [], []
    except OSError as exc:  # a link (ELOOP), a directory, no permission: not a file refagent reads
        raise ServerConfigError(f"{PROJECT_FILE} cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_PROJECT_FILE + 1)
    if len(data) > MAX_PROJECT_FILE:
        raise ServerConfigError(f"{PROJECT_FILE} is larger than {MAX_PROJECT_FILE} bytes")
    try:
        servers = json.loads(data).get("mcpServers")
    except (ValueError, AttributeError):
        raise ServerConfigError(f"{PROJECT_FILE} is not a JSON object with mcpServers") from None
    if not isinstance(servers, dict):
        raise ServerConfigError(f"{PROJECT_FILE}: mcpServers must be an object of servers by name")
    entries = [
        {**entry, "name": name} if isinstance(entry, dict) else entry
        for name, entry in servers.items()
        if name in allowed
    ]
    return entries, [name for name in servers if name not in allowed]


def merged(*sources: Sequence[Any]) -> list[Any]:
    """The entries of ``sources`` in order, one per name: an entry of an earlier source wins (the editor's
    over the config file's over the project's). Entries without a name are all kept (reported when used)."""
    seen: set[str] = set()
    entries: list[Any] = []
    for source in sources:
        for entry in source:
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if isinstance(name, str):
                if name in seen:
                    continue
                seen.add(name)
            entries.append(entry)
    return entries
