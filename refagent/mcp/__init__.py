"""MCP servers from the editor: their tools become the model's tools (issue 7).

:class:`McpHub` (in :mod:`refagent.mcp.hub`) is the whole interface for a session. Importing this package
is cheap: the ``mcp`` SDK is imported only once a session with MCP servers starts its hub.

Modules: ``config`` (the ACP ``McpServer`` entries), ``hub`` (a session's servers), ``connection`` (one
server, through the SDK), ``stdio`` (the stdio transport), ``tools`` (names, kinds, the tool adapter),
``results`` (a call's result for the model and the editor), ``errors``.
"""

from refagent.mcp.hub import McpHub, ProblemCallback, ServerStatus

__all__ = ["McpHub", "ProblemCallback", "ServerStatus"]
