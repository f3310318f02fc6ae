"""The seam between the prompt turn and any model: :class:`ModelClient` and the events it streams.

Messages use the OpenAI Chat Completions format (``{"role": ..., "content": ..., "tool_calls": ...}``)
because every OpenAI-compatible server speaks it; the session history is kept in it as well. Provider
quirks stop at the adapter: the turn only ever sees the events below.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

import anyio

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "refusal"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function tool as the model sees it."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    reasoning_effort: str | None = None
    """How hard the model should reason (one of its profile's ``reasoning_efforts``), sent as the Chat
    Completions ``reasoning_effort``; ``None``: nothing is sent and the model uses its own default."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call. ``arguments`` is the raw string the model produced: it may not be JSON."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Retrying:
    """The adapter hit a transient failure and will try again after ``delay`` seconds.

    ``attempt`` is the number of the attempt about to be made (2 for the first retry), out of
    ``max_attempts`` (0 when the adapter does not say).
    """

    attempt: int
    delay: float
    reason: str
    max_attempts: int = 0


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason


ModelEvent: TypeAlias = TextDelta | ReasoningDelta | ToolCallRequest | Usage | Retrying | Finished


class ModelClient(Protocol):
    """Streams one model response.

    The stream ends with exactly one :class:`Finished`. Tool calls arrive complete, after the text that
    preceded them. Text, reasoning and tool calls are valid Unicode (no lone surrogates: a pair split
    across chunks is joined, :class:`refagent.acp.text.StreamJoiner`). Failures that retrying cannot fix
    raise :class:`refagent.errors.ModelError`; cancellation (the task's cancel scope) aborts the underlying
    HTTP stream at once. A consumer that leaves early should close the iterator (``contextlib.aclosing``),
    so that the stream is closed then, not whenever the abandoned generator is finalised.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


async def close_stream(stream: AsyncIterator[ModelEvent]) -> None:
    """Close a model's stream now, even when the caller is being cancelled: it holds an HTTP response open."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await close()
