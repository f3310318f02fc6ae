"""The tool calls of a session running now, each cancellable on its own (:class:`RunningCalls`).

``session/cancel`` ends a whole turn; ACP v2's ``tool_call/cancel`` ends one call, and the turn goes on:
the model reads that the user cancelled that call. :class:`~refagent.tools.runner.ToolRunner` registers
each call while it executes; the v2 bridge cancels one by its id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio


class RunningCalls:
    """The executing tool calls of one session, by id."""

    def __init__(self) -> None:
        self._scopes: dict[str, anyio.CancelScope] = {}

    @contextmanager
    def running(self, call_id: str) -> Iterator[anyio.CancelScope]:
        """Hold ``call_id`` as running for the block; the scope to execute it in (cancelled by :meth:`cancel`)."""
        scope = anyio.CancelScope()
        self._scopes[call_id] = scope
        try:
            yield scope
        finally:
            del self._scopes[call_id]

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._scopes

    def cancel(self, call_id: str) -> bool:
        """Cancel the call ``call_id``; whether it was running (and not cancelled already)."""
        scope = self._scopes.get(call_id)
        if scope is None or scope.cancel_called:
            return False
        scope.cancel()
        return True
