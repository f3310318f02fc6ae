"""How a turn the model ended ends: a refusal, or a failure told to the user and marked as one.

A turn the model failed (:class:`~refagent.errors.ModelError`: the endpoint, the key, or a configuration
that cannot work) ends ``end_turn`` all the same, as ACP has no stop reason for it, with a message that says
what is wrong: an ``agent_message_chunk`` that editors show in the conversation and that is recorded, so
``session/load`` shows it again. Both that chunk and the ``session/prompt`` response say it is a failure,
in ``_meta`` (an open object in the schema, :func:`failure_meta`)::

    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": M}, "messageId": ...,
     "_meta": {"refagent": {"failure": {"kind": K, "message": M}}}}
    {"stopReason": "end_turn", "_meta": {"refagent": {"failure": {"kind": K, "message": M}}}}

``K`` is ``"model"`` (the endpoint failed: unreachable, 5xx, a broken stream), ``"auth"`` (the key is
missing or was rejected) or ``"config"`` (the configuration cannot work: a broken file, an unknown profile,
no model, a model the endpoint does not serve, ``max_requests`` 0); ``M`` is the chunk's text. A terminal
client (``refagent run``) does not draw that chunk as the session's text: it prints ``M`` once on stderr
and exits 1. A refusal (:class:`~refagent.errors.ModelRefused`) is not a failure: it ends ``refusal``,
with the model's words as an ordinary message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from refagent.acp import updates
from refagent.acp.types import StopReason
from refagent.errors import FailureKind, ModelError, ModelRefused
from refagent.ids import new_id
from refagent.llm.protocol import Retrying

log = logging.getLogger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the model failed a turn: its kind and the message the user reads (see the module docstring)."""

    kind: FailureKind
    message: str

    def meta(self) -> dict[str, Any]:
        """The ``_meta`` of the failure's message chunk and of the turn's response."""
        return failure_meta(self.kind, self.message)


def failure_meta(kind: FailureKind, message: str) -> dict[str, Any]:
    """``{"refagent": {"failure": {"kind", "message"}}}``: what marks a turn the model failed."""
    return {"refagent": {"failure": {"kind": kind, "message": message}}}


async def ended_by(error: ModelError, send: Send) -> tuple[StopReason, Failure | None]:
    """The stop reason of a turn the model ended with ``error``, and its failure (None for a refusal), once
    the user has been told through ``send``. A failure is logged at info only: the user reads it in the
    session, and a terminal client that shares the agent's stderr would show a warning a second time.

    If the turn was cancelled meanwhile, ``send`` raises, and the caller's cancel scope answers ``cancelled``."""
    if isinstance(error, ModelRefused):
        await send(updates.agent_message_chunk(updates.text(f"The model refused: {error}"), new_id("msg")))
        return "refusal", None
    failure = Failure(error.kind, str(error))
    log.info("the turn failed (%s): %s", failure.kind, failure.message)
    chunk = updates.agent_message_chunk(updates.text(failure.message), new_id("msg"))
    chunk["_meta"] = failure.meta()
    await send(chunk)
    return "end_turn", failure


def retry_note(event: Retrying) -> str:
    """What the user reads when a model request is retried: why, when, and which attempt comes."""
    delay = f"{event.delay:.1f}" if event.delay < 10 else f"{event.delay:.0f}"
    of = f" of {event.max_attempts}" if event.max_attempts else ""
    return f"{event.reason}; retrying in {delay} s (attempt {event.attempt}{of})."
