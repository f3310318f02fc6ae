"""The test MCP server over stdio: ``python stdio_server.py [mode]``.

Modes (the first argument):

* (none): serve :mod:`demo`'s tools.
* ``legacy``: the same, as a server from before the 2026 protocol: it knows nothing of
  ``server/discover`` (answers "method not found") and speaks the ``initialize`` handshake.
* ``exit CODE``: write a line to stderr and exit with CODE at once, before importing the SDK.
* ``mute``: start and never answer (for connect timeouts); ignores the end of its stdin.
* ``noise``: print a banner to stdout before serving (not JSON-RPC; a client must skip it).
"""

from __future__ import annotations

import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else ""

if MODE == "exit":
    sys.stderr.write("cannot start: no configuration\n")
    sys.exit(int(sys.argv[2]))
if MODE == "mute":
    sys.stderr.write("thinking\n")
    sys.stderr.flush()
    time.sleep(300)
    sys.exit(0)

import anyio  # noqa: E402 - after the modes that must not pay for the SDK import
import mcp_types  # noqa: E402
from demo import build_server  # noqa: E402
from mcp.server.lowlevel.server import NotificationOptions  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402


async def serve_legacy() -> None:
    """Answer ``server/discover`` with "method not found" before the SDK's server sees it, as an older
    server would (the SDK's own server would take it as the 2026 protocol and refuse ``initialize``)."""
    lowlevel = build_server()._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        to_server, from_filter = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def filter_requests() -> None:
            async with to_server:
                async for item in read_stream:
                    message = getattr(item, "message", None)
                    if isinstance(message, mcp_types.JSONRPCRequest) and message.method == "server/discover":
                        error = mcp_types.JSONRPCError(
                            jsonrpc="2.0",
                            id=message.id,
                            error=mcp_types.ErrorData(code=-32601, message="Method not found"),
                        )
                        await write_stream.send(SessionMessage(error))
                        continue
                    await to_server.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(filter_requests)
            options = lowlevel.create_initialization_options(NotificationOptions(tools_changed=True))
            await lowlevel.run(from_filter, write_stream, options)
            tasks.cancel_scope.cancel()


if MODE == "legacy":
    anyio.run(serve_legacy)
else:
    if MODE == "noise":
        print("Welcome to the demo server!", flush=True)
    build_server().run()
