"""The client side of the connection: answers the agent's requests and draws its notifications.

The agent may ask for one thing only, ``session/request_permission``: the terminal client advertises no
file system and no terminal, so ``fs/*`` and ``terminal/*`` are ``-32601``. The answer comes from the
keyboard (``y`` allow once, ``a`` always allow, ``n`` reject once, ``never`` always reject: the four ACP
option kinds) or, with ``--yes``, is an approval. After ``session/cancel`` every pending question answers
``cancelled`` (ACP "Cancellation").
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from refagent.acp.errors import MethodNotFound
from refagent.client.render import Renderer, option_key

ANSWERS = {
    "y": "allow_once",
    "yes": "allow_once",
    "a": "allow_always",
    "always": "allow_always",
    "n": "reject_once",
    "no": "reject_once",
    "never": "reject_always",
}
ReadLine = Callable[[], Awaitable[str | None]]
"""Reads one line the user typed (without its newline); ``None`` at the end of input."""


class TerminalClient:
    """The client side of the connection (its :class:`~refagent.acp.connection.Handler`).

    ``approve``: approve every request, saying it came from this (``--yes``); ``None``: ask with
    ``read_line``. ``interactive``: the answers are typed at a terminal, which echoes them.
    """

    def __init__(
        self, renderer: Renderer, read_line: ReadLine, *, interactive: bool = False, approve: str | None = None
    ) -> None:
        self.renderer = renderer
        self.approve = approve
        self.read_line = read_line
        self.interactive = interactive
        self.asking: set[anyio.CancelScope] = set()
        self.cancelled = False

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return await self.permission(params)
        # Nothing else was advertised (no fs, no terminal): the agent should not ask.
        raise MethodNotFound(f"Method not found: {method}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/update" and isinstance(params.get("update"), dict):
            self.renderer.update(params["update"])

    async def permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Answer a permission request: automatically with ``--yes``, else from the user's answer."""
        options: list[dict[str, Any]] = [o for o in params.get("options") or [] if isinstance(o, dict)]
        self.renderer.permission(params)
        if self.cancelled:
            return _cancelled()
        if self.approve is not None:
            chosen = _pick(options, "allow_once") or _pick(options, "allow_always")
            if chosen is None:
                self.renderer.answered("no option allows it: cancelled")
                return _cancelled()
            self.renderer.answered(f"{chosen.get('name')} (auto-approved: {self.approve})")
            return _selected(chosen)
        with anyio.CancelScope() as scope:
            self.asking.add(scope)
            try:
                chosen = await self._ask(options)
            finally:
                self.asking.discard(scope)
        if scope.cancelled_caught or chosen is None:
            self.renderer.answered("cancelled")
            return _cancelled()
        self.renderer.answered(str(chosen.get("name")))
        return _selected(chosen)

    async def _ask(self, options: list[dict[str, Any]]) -> dict[str, Any] | None:
        keys = " / ".join(dict.fromkeys(option_key(o) for o in options))
        while True:
            self.renderer.write(self.renderer.style(f"    Allow? [{keys}] ", "magenta", "bold"))
            answer = await self.read_line()
            self.renderer.end_prompt(None if self.interactive and answer is not None else answer or "")
            if answer is None:
                self.renderer.answered("no answer (end of input)")
                return _pick(options, "reject_once") or _pick(options, "reject_always")
            chosen = _pick(options, ANSWERS.get(answer.strip().lower(), ""))
            if chosen is not None:
                return chosen
            self.renderer.line(f"    Please answer one of: {keys}", "yellow")

    def cancel_prompts(self) -> None:
        """``session/cancel`` was sent: pending permission requests answer ``cancelled``."""
        self.cancelled = True
        for scope in self.asking:
            scope.cancel()


def _pick(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((o for o in options if o.get("kind") == kind), None)


def _selected(option: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option.get("optionId")}}


def _cancelled() -> dict[str, Any]:
    return {"outcome": {"outcome": "cancelled"}}


class StdinLines:
    """Lines from a file descriptor (stdin), read without blocking the event loop or a thread."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.eof = False

    async def read_line(self) -> str | None:
        while b"\n" not in self.buffer and not self.eof:
            await self._readable()
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            self.eof = not chunk
            self.buffer += chunk
        if not self.buffer:
            return None
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line.decode("utf-8", "replace").rstrip("\r")

    async def _readable(self) -> None:
        try:
            mode = os.fstat(self.fd).st_mode
        except OSError:
            return
        if stat.S_ISREG(mode):
            return  # regular files are always "readable" and cannot be polled
        try:
            await anyio.wait_readable(self.fd)
        except OSError:  # a device the event loop cannot poll (/dev/null): reading will not block long
            return
