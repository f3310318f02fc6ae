"""A turn is never a silent spinner: what it says while it waits on the model (a
:func:`refagent.heartbeat.heartbeat` over the model's stream makes it say so).

:class:`WaitNews` is what the turn tells the user about the model: that a request is retried
  (:class:`~refagent.llm.protocol.Retrying`), and that the model has sent nothing for a while (and how long
  it will be waited for). A ``notice`` when the client shows them (``session.notices``: news about this run,
  not part of the conversation), else a line of its own among the thoughts. Plain text: clients show
  thoughts as they are.

The bounds (the user hears of a silent model after a quarter of ``[retry] stall_seconds``, at most 15 s,
then every twice that; the attempt fails after ``stall_seconds``, 300 s by default, and is retried as any
transient failure) are :class:`refagent.llm.retry.RetryPolicy`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from refagent.acp import updates
from refagent.llm.protocol import Retrying
from refagent.session.failure import retry_note

__all__ = ["WaitNews"]


class WaitNews:
    """What a turn says while it waits on the model (see the module docstring)."""

    def __init__(self, send_update: Callable[[dict[str, Any]], Awaitable[None]], notices: bool, stall: float) -> None:
        self.send_update = send_update
        self.notices = notices
        self.stall = stall
        """Seconds of silence after which the attempt fails (:attr:`RetryPolicy.stall_seconds`), for the message."""

    async def retrying(self, event: Retrying, thought_id: str) -> None:
        """Say that the model request is retried (a retry comes before any reasoning)."""
        await self._say("warning", "The model request is being retried", retry_note(event), thought_id)

    async def quiet(self, seconds: float, thought_id: str) -> None:
        """Say that the model has sent nothing for ``seconds``, what happens if it goes on, and how to stop."""
        note = (
            f"Nothing from the model for {seconds:.0f} s; still waiting (a model that thinks long says nothing "
            f"meanwhile). A request silent for {self.stall:.0f} s is retried; cancelling ends the turn now."
        )
        await self._say("info", "Waiting for the model", note, thought_id)

    async def _say(self, severity: str, title: str, note: str, thought_id: str) -> None:
        if self.notices:
            await self.send_update(updates.notice(severity, title, note))
        else:
            await self.send_update(updates.agent_thought_chunk(updates.text(f"{note}\n"), thought_id))
