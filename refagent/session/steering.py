"""Steering: a message the user sends while a turn runs, taken into that turn (``_session/steering``).

Claude's and Codex's ACP adapters offer it as an extension, and so does refagent: ``initialize`` says
``agentCapabilities._meta.steering.supported: true``, and a client sends ``_session/steering {sessionId,
prompt}`` (the prompt's content blocks, as ``session/prompt`` takes them) while a ``session/prompt`` of that
session runs. The contract:

- A steer is delivered at the next step of the running turn: after the tool calls running now end, before
  the next model request (or, if the model has just answered without calling a tool, as one more step of
  the same turn). It joins the model's conversation as a user message there, is echoed to the client as
  ``user_message_chunk`` updates, and is recorded in place, so ``session/load`` replays it where it
  happened and a resumed conversation has it there too.
- The request is answered when the steer's fate is known: ``{"outcome": "delivered"}``, or ``{"outcome":
  "dropped"}`` when the turn ended first (``session/cancel``, a failure, the request budget), so the client
  can give the text back to the user. Steered work never outlives its prompt.
- With no turn running, the request is refused (``-32600``, saying to send a prompt instead); a slash
  command is refused too (it is not a message to the model).

:class:`Steers` is a session's queue of them; the turn takes them (:meth:`Steers.take`) and the prompt
that opened the queue closes it when its turn ends (:meth:`Steers.close`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio

from refagent.acp.errors import InvalidRequest
from refagent.ids import new_id

if TYPE_CHECKING:  # an annotation: the TypedDicts are not needed to answer session/new
    from refagent.acp.types import ContentBlock

Outcome = Literal["delivered", "dropped"]
MAX_PENDING = 16
"""Steers waiting at once in one session: more is a client gone astray, refused."""


class Steer:
    """One steer: what the user sent, the model's message made of it, and its outcome once known."""

    def __init__(self, blocks: Sequence[ContentBlock], message: dict[str, Any]) -> None:
        self.blocks = tuple(blocks)
        self.message = message
        self.message_id = new_id("user")
        self.outcome: Outcome | None = None
        self._decided = anyio.Event()

    def decide(self, outcome: Outcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self._decided.set()

    async def wait(self) -> Outcome:
        """The steer's outcome, once the turn has taken it or ended without it."""
        await self._decided.wait()
        assert self.outcome is not None
        return self.outcome


class Steers:
    """The steers of one session's running turn. Open only while a turn runs (:meth:`open` ...
    :meth:`close`); a steer added then is taken by the turn or dropped when it ends, never left waiting."""

    def __init__(self) -> None:
        self._pending: list[Steer] = []
        self._open = False

    def open(self) -> None:
        """A turn starts: steers are taken from now on."""
        self._open = True

    def close(self) -> None:
        """The turn has ended: the steers it did not take are dropped (and their requests answered so)."""
        self._open = False
        pending, self._pending = self._pending, []
        for steer in pending:
            steer.decide("dropped")

    def require_open(self) -> None:
        """``-32600`` unless a turn runs to take steers."""
        if not self._open:
            raise InvalidRequest(
                "No turn is running in this session to steer: send the message with session/prompt instead"
            )

    def add(self, blocks: Sequence[ContentBlock], message: dict[str, Any]) -> Steer:
        """Queue a steer for the running turn; ``-32600`` if none runs, or too many already wait."""
        self.require_open()
        if len(self._pending) >= MAX_PENDING:
            raise InvalidRequest(f"Too many steering messages are waiting ({MAX_PENDING}): wait for the turn")
        steer = Steer(blocks, message)
        self._pending.append(steer)
        return steer

    def take(self) -> list[Steer]:
        """The steers waiting now, in order, for the turn to deliver (it decides each once it has)."""
        taken, self._pending = self._pending, []
        return taken
