"""The test MCP server over HTTP: :mod:`demo`'s tools, served by uvicorn on 127.0.0.1 in a thread.

:func:`running` serves streamable HTTP at ``<url>/mcp`` and the older HTTP+SSE transport at
``<url>/sse`` (two apps on two free ports), and stops them on exit. A thread, not a process: the test
process has paid for the SDK import already, so a server starts in a few milliseconds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from tests.support.mcp_servers.demo import build_server


class _Server:
    def __init__(self, app: ASGIApp) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen()
        self.port = self.socket.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=0.2)
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:  # uvicorn offers no event to wait on
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test MCP server did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(10)
        self.socket.close()


@dataclass
class Urls:
    http: str
    sse: str
    servers: list[_Server]

    def stop(self) -> None:
        """Stop serving (both transports), as a server that goes away would."""
        for server in self.servers:
            server.stop()


@contextmanager
def running() -> Iterator[Urls]:
    """Both transports of a fresh demo server (fresh, so a tool-list change stays within one test)."""
    demo = build_server("web")
    servers = [_Server(demo.streamable_http_app()), _Server(demo.sse_app())]
    try:
        for server in servers:
            server.start()
        urls = Urls(f"http://127.0.0.1:{servers[0].port}/mcp", f"http://127.0.0.1:{servers[1].port}/sse", servers)
        yield urls
    finally:
        for server in servers:
            server.stop()
