"""Something that is quiet for a while says so: :func:`heartbeat` calls a function once a block has been quiet
for ``after`` seconds, and again every ``every`` seconds while it stays so (``touch`` starts the quiet over).

The turn runs one over the model's stream (the user hears that the model is waited for,
:mod:`refagent.session.waiting`); the tool runner one over each tool call (its elapsed time shows in the
call's title). A shared leaf: it imports nothing of refagent's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

__all__ = ["Heartbeat", "heartbeat"]

log = logging.getLogger(__name__)


class Heartbeat:
    """The quiet a :func:`heartbeat` measures; :attr:`beats`: how many times it has beaten since the last touch."""

    def __init__(self, beat: Callable[[float], Awaitable[None]], after: float, every: float) -> None:
        self._beat = beat
        self._after = after
        self._every = every
        self.since = anyio.current_time()
        self.beats = 0

    def touch(self) -> None:
        """Something happened: the quiet starts over."""
        self.since = anyio.current_time()
        self.beats = 0

    async def _run(self) -> None:
        while True:
            due = self.since + self._after + self.beats * self._every
            now = anyio.current_time()
            if now < due:
                await anyio.sleep(due - now)
                continue  # touched meanwhile: due moved
            self.beats += 1
            try:
                await self._beat(now - self.since)
            except Exception as exc:  # the editor is gone: the turn finds out itself; the news just stops
                log.debug("saying the wait failed: %s", exc)
                return


@asynccontextmanager
async def heartbeat(
    beat: Callable[[float], Awaitable[None]], *, after: float, every: float
) -> AsyncIterator[Heartbeat]:
    """Call ``beat(seconds quiet)`` after ``after`` seconds of quiet, then every ``every`` seconds of it, while
    the block runs (in a task of its own: the block's awaits are what is timed). A failing ``beat`` stops
    the beats, not the block; the block's own failure comes out as it was raised."""
    heart = Heartbeat(beat, after, every)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(heart._run)
            try:
                yield heart
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as raised:  # a task group wraps the block's failure
        if len(raised.exceptions) == 1:
            raise raised.exceptions[0] from raised.exceptions[0].__cause__
        raise
