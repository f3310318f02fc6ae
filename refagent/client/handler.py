"""The client side of the connection: answers the agent's requests and draws its notifications.

The agent may ask for one thing only, ``session/request_permission``: the terminal client advertises no
file system and no terminal, so ``fs/*`` and ``terminal/*`` are ``-32601``. The answer comes from the
keyboard (``y`` allow once, ``a`` always allow, ``n`` reject once, ``never`` always reject: the four ACP
option kinds) or, with ``--yes``, is an approval; when there is no one to ask (the prompt came from stdin
and there is no terminal), a rejection that says why. After ``session/cancel`` every pending question
answers ``cancelled`` (ACP "Cancellation").

A turn refagent's model failed comes with an ``agent_message_chunk`` marked as the failure
(``_meta.refagent.failure``, :mod:`refagent.session.turn` has the contract): it is not drawn as the
session's text but kept (:attr:`TerminalClient.failure`, :func:`failure_of`), for the client to report
once, as an error, when the turn ends.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple

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
    "v": "reject_always",
    "never": "reject_always",
}
ReadLine = Callable[[], Awaitable[str | None]]
"""Reads one line the user typed (without its newline); ``None`` at the end of input."""


class Failure(NamedTuple):
    """Why refagent's model failed a turn: ``kind`` ``"model"``, ``"auth"`` or ``"config"``, and the message."""

    kind: str
    message: str


def failure_of(message: Mapping[str, Any]) -> Failure | None:
    """The failure a ``session/prompt`` result or a ``session/update``'s ``update`` carries in
    ``_meta.refagent.failure``; ``None`` if it carries none (or another agent's ``_meta``)."""
    meta = message.get("_meta")
    ours = meta.get("refagent") if isinstance(meta, dict) else None
    failure = ours.get("failure") if isinstance(ours, dict) else None
    if not isinstance(failure, dict) or not isinstance(failure.get("message"), str):
        return None
    return Failure(str(failure.get("kind") or "model"), failure["message"])


class TerminalClient:
    """The client side of the connection (its :class:`~refagent.acp.connection.Handler`).

    ``approve``: approve every request, saying it came from this (``--yes``), in one line each with
    ``brief``, else under the whole question; ``None``: ask with ``read_line``. ``unanswerable``: no one
    can be asked, for this reason: reject every request, saying so. ``interactive``: the answers are typed
    at a terminal, which echoes them.
    """

    def __init__(
        self,
        renderer: Renderer,
        read_line: ReadLine,
        *,
        interactive: bool = False,
        approve: str | None = None,
        unanswerable: str | None = None,
        brief: bool = True,
    ) -> None:
        self.renderer = renderer
        self.approve = approve
        self.brief = brief
        self.unanswerable = unanswerable
        self.read_line = read_line
        self.interactive = interactive
        self.asking: set[anyio.CancelScope] = set()
        self.cancelled = False
        self.failure: Failure | None = None
        """The failure the last failed turn's message said (that message is not drawn)."""
        self.unanswered = 0
        """Permission requests rejected because no one could answer (no terminal, or its input ended)."""

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return await self.permission(params)
        # Nothing else was advertised (no fs, no terminal): the agent should not ask.
        raise MethodNotFound(f"Method not found: {method}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/update" and isinstance(params.get("update"), dict):
            update = params["update"]
            failure = failure_of(update) if update.get("sessionUpdate") == "agent_message_chunk" else None
            if failure is not None:  # reported once, as an error, when the turn ends
                self.failure = failure
                return
            self.renderer.update(update)

    async def permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Answer a permission request: automatically with ``--yes``, else from the user's answer."""
        options: list[dict[str, Any]] = [o for o in params.get("options") or [] if isinstance(o, dict)]
        if self.approve is not None and self.brief and not self.cancelled:
            chosen = pick(options, "allow_once") or pick(options, "allow_always")
            if chosen is not None:  # one line: what was approved, and by what (no menu to choose from)
                self.renderer.approved(params, f"{chosen.get('name')}, {self.approve}")
                return selected(chosen)
        self.renderer.permission(params)
        if self.cancelled:
            return cancelled()
        if self.approve is not None:
            chosen = pick(options, "allow_once") or pick(options, "allow_always")
            if chosen is None:
                self.renderer.answered("no option allows it: cancelled")
                return cancelled()
            self.renderer.answered(f"{chosen.get('name')} (auto-approved: {self.approve})")
            return selected(chosen)
        if self.unanswerable is not None:
            self.unanswered += 1
            chosen = pick(options, "reject_once") or pick(options, "reject_always")
            self.renderer.answered(f"rejected: {self.unanswerable}")
            return selected(chosen) if chosen is not None else cancelled()
        with anyio.CancelScope() as scope:
            self.asking.add(scope)
            try:
                chosen = await self._ask(options)
            finally:
                self.asking.discard(scope)
        if scope.cancelled_caught or chosen is None:
            self.renderer.answered("cancelled")
            return cancelled()
        self.renderer.answered(str(chosen.get("name")))
        return selected(chosen)

    async def _ask(self, options: list[dict[str, Any]]) -> dict[str, Any] | None:
        keys = " / ".join(dict.fromkeys(option_key(o) for o in options))
        while True:
            self.renderer.write(f"    Allow? [{keys}] ", "magenta", "bold")
            answer = await self.read_line()
            self.renderer.end_prompt(None if self.interactive and answer is not None else answer or "")
            if answer is None:
                self.unanswered += 1
                self.renderer.answered("no answer (end of input)")
                return pick(options, "reject_once") or pick(options, "reject_always")
            chosen = pick(options, ANSWERS.get(answer.strip().lower(), ""))
            if chosen is not None:
                return chosen
            self.renderer.line(f"    Please answer one of: {keys}", "yellow")

    def cancel_prompts(self) -> None:
        """``session/cancel`` was sent: pending permission requests answer ``cancelled``."""
        self.cancelled = True
        for scope in self.asking:
            scope.cancel()


def pick(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The first permission option of this ACP kind (``allow_once``...), if any."""
    return next((o for o in options if o.get("kind") == kind), None)


def selected(option: dict[str, Any]) -> dict[str, Any]:
    """The answer to a permission request that chose ``option``."""
    return {"outcome": {"outcome": "selected", "optionId": option.get("optionId")}}


def cancelled() -> dict[str, Any]:
    """The answer to a permission request once the turn is cancelled (ACP "Cancellation")."""
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
