"""What the user allows a session beyond what the editor gives it: MCP servers of their own, a project's
``.mcp.json`` servers by name, projects trusted with slash commands of their own, and the hosts ``fetch``
may reach at addresses it otherwise refuses (this machine's, a private network's).

::

    project_mcp_servers = ["docs"]            # a project's .mcp.json servers that may start, by name
    trusted_projects = ["~/src/work"]         # projects whose .refagent/commands load (and those below)

    [fetch]
    allow = ["wiki.internal", "10.1.0.0/16"]  # names, addresses or networks fetch may reach though private

    [mcp_servers.github]                      # a stdio server: a command
    command = "github-mcp-server"
    args = ["stdio"]
    env = { GITHUB_TOKEN = "..." }            # on top of the agent's environment without the model's keys

    [mcp_servers.search]                      # an HTTP server (type = "sse" for the older transport)
    url = "https://mcp.example.com/mcp"
    headers = { Authorization = "Bearer ..." }

Each ``[mcp_servers.NAME]`` table becomes an entry in ACP's ``McpServer`` shape, checked as the editor's are
when the session starts them (:func:`refagent.mcp.config.parse_server`: a bad one is reported, the session
goes on without it). A session's servers are the editor's, then the config file's, then the allowed ones of
the project's ``.mcp.json``, one per name: the editor's wins (:func:`refagent.mcp.config.merged`). A
repository must not start servers by itself: a project's ``.mcp.json`` (Claude Code's format,
``{"mcpServers": {"NAME": {...}}}``) is read only for the names ``project_mcp_servers`` lists.
"""

from __future__ import annotations

import os
from typing import Any

from refagent.config.file import typed
from refagent.errors import ConfigError

__all__ = ["SERVER_KEYS", "configured_servers", "fetch_allow", "project_server_names", "trusted_projects"]

SERVER_KEYS: dict[str, type] = {
    "type": str,
    "command": str,
    "args": list,
    "env": dict,
    "url": str,
    "headers": dict,
}
"""The keys of a ``[mcp_servers.NAME]`` table."""


def configured_servers(table: Any, source: str) -> list[dict[str, Any]]:
    """The ``mcp_servers`` table (``None``: none) as ACP ``McpServer`` entries, in the file's order. Raises
    :class:`ConfigError` for a table of the wrong shape or a key of the wrong type; what the entry means is
    checked when a session starts it."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: mcp_servers must be a table of tables ([mcp_servers.NAME])")
    entries: list[dict[str, Any]] = []
    for name, entry in table.items():
        where = f"{source} [mcp_servers.{name}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a table")
        unknown = sorted(set(entry) - SERVER_KEYS.keys())
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(SERVER_KEYS)})")
        values = {key: typed(entry, key, kind, where) for key, kind in SERVER_KEYS.items() if key in entry}
        if "url" in values:
            kind = values.get("type", "http")
            entries.append({"type": kind, "name": name, "url": values["url"], "headers": values.get("headers", {})})
        elif "command" in values:
            command, args, env = values["command"], values.get("args", []), values.get("env", {})
            entries.append({"name": name, "command": command, "args": args, "env": env})
        else:
            raise ConfigError(f"{where}: needs a command (a stdio server) or a url (an HTTP server)")
    return entries


def project_server_names(data: Any, source: str) -> tuple[str, ...]:
    """``project_mcp_servers``: the names of a project's ``.mcp.json`` servers the user allows to start."""
    names = data.get("project_mcp_servers") if isinstance(data, dict) else None
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{source}: project_mcp_servers must be a list of server names")
    return tuple(names)


def trusted_projects(data: Any, source: str) -> tuple[str, ...]:
    """``trusted_projects``: directories (``~`` expanded) whose projects may give the user slash commands of
    their own (``.refagent/commands``, :mod:`refagent.session.prompt_commands`)."""
    paths = data.get("trusted_projects") if isinstance(data, dict) else None
    if paths is None:
        return ()
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise ConfigError(f"{source}: trusted_projects must be a list of directories")
    return tuple(os.path.expanduser(p) for p in paths)


def fetch_allow(data: Any, source: str) -> tuple[str, ...]:
    """``[fetch] allow``: host names, addresses or networks the ``fetch`` tool may reach though they are not
    public (:class:`refagent.tools.fetch.Fetch`; checked when it is made)."""
    table = data.get("fetch") if isinstance(data, dict) else None
    if table is None:
        return ()
    where = f"{source} [fetch]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: fetch must be a table ([fetch])")
    unknown = sorted(set(table) - {"allow"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: allow)")
    hosts = table.get("allow", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise ConfigError(f"{where}: allow must be a list of host names, addresses or networks")
    return tuple(h.strip() for h in hosts)
