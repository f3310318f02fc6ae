"""MCP servers written with the official ``mcp`` SDK, for the tests of :mod:`refagent.mcp`."""
