"""A record of every JSON-RPC message on a connection, in both directions, with responses matched to the
method of the request they answer.

Tests attach a ``check`` (for example a schema validator) that sees each message the agent sends, with
the method it answers when it is a response, and fails the test on the first bad one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

Direction = Literal["agent", "client"]
Check = Callable[[dict[str, Any], str | None], None]
"""``check(message, answered_method)``: raise to reject a message the agent sent."""


@dataclass
class Transcript:
    check: Check | None = None
    messages: list[tuple[Direction, dict[str, Any]]] = field(default_factory=list)
    _methods: dict[tuple[Direction, Any], str] = field(default_factory=dict)
    _waiters: list[anyio.Event] = field(default_factory=list)

    def record(self, sender: Direction, line: bytes) -> dict[str, Any] | None:
        """Record one line sent by ``sender``. Returns the decoded message (None if it was not JSON)."""
        try:
            message = json.loads(line)
        except ValueError:
            if sender == "agent":
                raise AssertionError(f"the agent sent a line that is not JSON: {line[:200]!r}") from None
            return None
        if not isinstance(message, dict):
            if sender == "agent":
                raise AssertionError(f"the agent sent a non-object: {line[:200]!r}")
            return None
        self.messages.append((sender, message))
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()
        answered: str | None = None
        hashable = isinstance(message.get("id"), (int, str, type(None)))  # a client may send any JSON as id
        if "method" in message and "id" in message and hashable:
            self._methods[(sender, message["id"])] = message["method"]
        elif "id" in message and hashable:
            other: Direction = "client" if sender == "agent" else "agent"
            answered = self._methods.pop((other, message["id"]), None)
        if sender == "agent" and self.check is not None:
            self.check(message, answered)
        return message

    def sent_by(self, sender: Direction) -> list[dict[str, Any]]:
        return [m for s, m in self.messages if s == sender]

    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The ``update`` of every ``session/update`` the agent sent (for one session, if given)."""
        return [
            m["params"]["update"]
            for m in self.sent_by("agent")
            if m.get("method") == "session/update"
            and (session_id is None or m["params"].get("sessionId") == session_id)
        ]

    async def wait_for(self, predicate: Callable[[Direction, dict[str, Any]], bool]) -> dict[str, Any]:
        """Wait until a recorded message satisfies ``predicate`` (checking those already recorded first)."""
        seen = 0
        while True:
            for sender, message in self.messages[seen:]:
                if predicate(sender, message):
                    return message
            seen = len(self.messages)
            event = anyio.Event()
            self._waiters.append(event)
            await event.wait()

    async def wait_for_update(self, kind: str | None = None) -> dict[str, Any]:
        """Wait for a ``session/update`` from the agent (of ``kind``, if given); returns its ``update``."""

        def match(sender: Direction, message: dict[str, Any]) -> bool:
            if sender != "agent" or message.get("method") != "session/update":
                return False
            return kind is None or message["params"]["update"].get("sessionUpdate") == kind

        message = await self.wait_for(match)
        update: dict[str, Any] = message["params"]["update"]
        return update
