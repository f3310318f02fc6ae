"""Steering: a message the user sends while a turn runs, taken into that turn (``_session/steering``).

Claude's and Codex's ACP adapters offer it as an extension, and so does refagent, in their terms: the
``initialize`` result says ``_meta: {"steering": {"supported": true}}`` at its top level (not inside
``agentCapabilities``, where no client built against the adapters looks), and a client sends
``_session/steering {sessionId, prompt}`` (the prompt's content blocks, as ``session/prompt`` takes them)
while a ``session/prompt`` of that session runs. The contract:

- A steer is taken at the next step of the running turn: after the tool calls running now end, before
  the next model request (or, if the model has just answered without calling a tool, as one more step of
  the same turn). It joins the model's conversation as a user message there, is echoed to the client as
  ``user_message_chunk`` updates, and is recorded in place, so ``session/load`` replays it where it
  happened and a resumed conversation has it there too.
- The request is answered when the steer's fate is known, with the adapters' vocabulary:

  - ``{"outcome": "injected"}``: the turn took it (as above); the running ``session/prompt`` owns what it
    leads to.
  - ``{"outcome": "promptRequired", "reason": "noRunningTurn"}``: no turn of the session was running when
    the steer came, and nothing was taken: send the message with ``session/prompt``. (The adapters answer
    so when the client opts in with ``_meta.steering.idleBehavior: "promptRequired"``, and otherwise start
    a turn of their own and answer ``startedNewTurn``. refagent never does: such a turn would have no
    ``session/prompt`` to answer with its stop reason or to cancel it, and steered work never outlives
    its prompt. So ``startedNewTurn`` is never answered, and ``promptRequired`` is, opt-in or not.)
  - ``{"outcome": "failed", "reason": "turnEnded"}``: the turn ended before it took the steer
    (``session/cancel``, a model failure, the request budget), so the model never saw it; the client can
    give the text back to the user (sending it on as a prompt by itself would undo a cancel).

- A slash command is refused (``-32600``: it is not a message to the model), and so are steers past
  :data:`MAX_PENDING` waiting at once.

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

Outcome = Literal["injected", "failed"]
"""The fate of a steer the turn had queued (see the module docstring)."""
NOT_RUNNING: dict[str, Any] = {"outcome": "promptRequired", "reason": "noRunningTurn"}
"""The answer to a steer that came with no turn running: nothing taken, send it as a prompt."""
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
        """The turn has ended: the steers it did not take have failed (and their requests are answered so)."""
        self._open = False
        pending, self._pending = self._pending, []
        for steer in pending:
            steer.decide("failed")

    @property
    def running(self) -> bool:
        """Whether a turn runs to take steers."""
        return self._open

    def add(self, blocks: Sequence[ContentBlock], message: dict[str, Any]) -> Steer | None:
        """Queue a steer for the running turn; None if none runs; ``-32600`` if too many already wait."""
        if not self._open:
            return None
        if len(self._pending) >= MAX_PENDING:
            raise InvalidRequest(f"Too many steering messages are waiting ({MAX_PENDING}): wait for the turn")
        steer = Steer(blocks, message)
        self._pending.append(steer)
        return steer

    def take(self) -> list[Steer]:
        """The steers waiting now, in order, for the turn to deliver (it decides each once it has)."""
        taken, self._pending = self._pending, []
        return taken
