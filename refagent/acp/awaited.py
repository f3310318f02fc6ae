"""Which of the editor's answers a tool call is waiting for, and since when.

A tool call that uses the editor's files or terminals spends its time in two places: its own work, and
the editor's answers to ``fs/*`` and ``terminal/*``. When such a call runs long, its title says which:
an editor that never answers ``fs/read_text_file`` is said as the editor's silence, not as a slow tool.

:func:`watching` makes an :class:`Awaited` the current one for the code run inside it (a context
variable: the tasks that code starts see it too); :class:`refagent.acp.client.SessionClient` records there
each request of :data:`EDITOR_WORK` while it waits for the answer. Nothing is recorded outside a
:func:`watching` block.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["EDITOR_WORK", "Awaited", "current", "watching"]

EDITOR_WORK = frozenset(
    {
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/kill",
        "terminal/release",
    }
)
"""The requests whose answer is the editor's own work. Not ``terminal/wait_for_exit`` (its time is the
command's), nor ``session/request_permission`` and ``elicitation/create`` (the user's)."""


class Awaited:
    """The requests to the editor still unanswered, each with the time it was sent (``clock``'s)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._open: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()

    @contextmanager
    def request(self, method: str) -> Iterator[None]:
        """Record ``method`` as waited for while the block runs (however it ends)."""
        key = next(self._ids)
        self._open[key] = (method, self.clock())
        try:
            yield
        finally:
            del self._open[key]

    def oldest(self) -> tuple[str, float] | None:
        """The method of the request unanswered the longest and how many seconds it has waited; None when
        nothing is waited for."""
        if not self._open:
            return None
        method, sent = min(self._open.values(), key=lambda entry: entry[1])
        return method, self.clock() - sent


_CURRENT: ContextVar[Awaited | None] = ContextVar("refagent_awaited", default=None)


def current() -> Awaited | None:
    """The :class:`Awaited` of the code running now, if it runs inside :func:`watching`."""
    return _CURRENT.get()


@contextmanager
def watching(awaited: Awaited) -> Iterator[Awaited]:
    """Make ``awaited`` the current one inside the block."""
    token = _CURRENT.set(awaited)
    try:
        yield awaited
    finally:
        _CURRENT.reset(token)
