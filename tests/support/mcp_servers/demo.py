"""The tools the test MCP servers offer (one set, served over stdio and over HTTP).

Each tool exercises one thing refagent must handle: annotations (read-only, search, fetch), results of
every content type, structured content, errors, a crash mid-call, a slow call, a tool-list change,
the server's environment and working directory, and a helper process in the server's group.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any, TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
READ_ONLY = ToolAnnotations(read_only_hint=True)


class Weather(TypedDict):
    city: str
    celsius: float


def build_server(name: str = "demo") -> MCPServer:
    server = MCPServer(name)

    @server.tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, title="Search the docs"))
    def search_docs(query: str, limit: int = 3) -> str:
        """Search the documentation."""
        return f"{limit} results for {query}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    def get_page(url: str) -> str:
        """Get a web page."""
        return f"<html>{url}</html>"

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def write_note(path: str, text: str) -> str:
        """Write a note to a file in the server's working directory."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        return f"wrote {len(text)} characters to {path}"

    @server.tool(annotations=READ_ONLY)
    def environment() -> dict[str, Any]:
        """The server's working directory and environment."""
        return {"cwd": os.getcwd(), "env": dict(os.environ)}

    @server.tool(annotations=READ_ONLY)
    def weather(city: str) -> Weather:
        """Structured output."""
        return Weather(city=city, celsius=21.5)

    @server.tool(annotations=READ_ONLY)
    def mixed() -> list[Any]:
        """One block of every kind."""
        return [
            TextContent(type="text", text="plain text"),
            ImageContent(type="image", data=PNG, mime_type="image/png"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///notes.md", text="# Notes\nin", mime_type="text/markdown"),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(uri="file:///data.bin", blob=PNG, mime_type="application/octet-stream"),
            ),
            ResourceLink(type="resource_link", uri="https://example.com/doc", name="doc", description="The doc"),
            TextContent(type="text", text="for the user only", annotations={"audience": ["user"]}),
        ]

    @server.tool()
    def fail(reason: str) -> str:
        """Fails with the reason (an isError result)."""
        raise ToolError(reason)

    @server.tool()
    def crash() -> str:
        """Exits the server in the middle of the call."""
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool(annotations=READ_ONLY)
    async def slow(seconds: float) -> str:
        """Answers after a while."""
        await anyio.sleep(seconds)
        return "finally"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool `extra` and announces the change, in both protocol eras."""

        def extra(x: int) -> int:
            """One more."""
            return x + 1

        server.add_tool(extra, name="extra")
        await ctx.request_context.session.send_tool_list_changed()  # handshake-era clients
        await ctx.notify_tools_changed()  # 2026 clients (subscriptions/listen)
        return "grown"

    @server.tool()
    def spawn_helper() -> int:
        """Starts a helper process in the server's process group; returns its pid."""
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], stdin=subprocess.DEVNULL)
        return helper.pid

    @server.tool(annotations=READ_ONLY)
    def headers(ctx: Context) -> dict[str, str]:
        """The HTTP request's headers (HTTP transports only)."""
        request = ctx.request_context.request
        return dict(request.headers) if request is not None else {}

    return server
