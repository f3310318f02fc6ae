"""What the MCP tests share: server entries as an editor sends them, a running hub, a call through a
tool with every update checked against the ACP schema, and a process check."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

import refagent.mcp.connection  # noqa: F401 - the SDK's import (a second or more), paid at collection, not by a test
from refagent.mcp import McpHub
from refagent.tools.base import BaseTool, ToolResult
from tests.support.tool_fakes import call, make_ctx

STDIO_SERVER = Path(__file__).parent / "stdio_server.py"


def stdio_entry(name: str = "demo", *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """An ACP v1 stdio ``McpServer`` (no ``type``) running the test server in ``mode`` ``args``."""
    return {
        "name": name,
        "command": sys.executable,
        "args": [str(STDIO_SERVER), *args],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }


def http_entry(name: str, url: str, kind: str = "http", headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "url": url,
        "headers": [{"name": k, "value": v} for k, v in (headers or {}).items()],
    }


class Problems(list[tuple[str, str]]):
    """``on_problem``: records what the user would be told."""

    def __call__(self, server: str, message: str) -> None:
        self.append((server, message))


@asynccontextmanager
async def running_hub(
    servers: list[dict[str, Any]], cwd: str, **options: Any
) -> AsyncIterator[tuple[McpHub, Problems]]:
    """A started hub whose servers have all connected or failed; closed on exit."""
    problems = Problems()
    options.setdefault("env", {"PATH": "/usr/bin:/bin"})
    hub = McpHub(servers, cwd, on_problem=problems, **options)
    async with anyio.create_task_group() as tasks:
        await hub.start(tasks)
        try:
            with anyio.fail_after(30):
                await hub.wait_ready()
            yield hub, problems
        finally:
            await hub.aclose()


def tool(hub: McpHub, name: str) -> BaseTool:
    found = {t.name: t for t in hub.tools()}
    assert name in found, f"{name} not in {sorted(found)}"
    return found[name]


async def run(hub: McpHub, name: str, cwd: str = "/tmp", **args: Any) -> ToolResult:
    """Prepare and execute a call of the tool ``name``, checking its plan and result on the wire."""
    return await call(tool(hub, name), make_ctx(cwd), **args)
