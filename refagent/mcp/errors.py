"""Errors of the MCP client side. Each ends up as a message: to the user (a server that cannot be
used, through the hub's ``on_problem``) or to the model (a call that failed, as a ``ToolError``).

    RefagentError
    ├── ConfigError
    │   └── ServerConfigError   an ``mcpServers`` entry that cannot be used (refagent.mcp.config)
    └── ServerUnavailable       a server that did not start, did not answer, or went away
"""

from __future__ import annotations

from refagent.errors import RefagentError


class ServerUnavailable(RefagentError):
    """``str()`` says what happened, for the user: "exited with code 3 before it answered", ..."""
