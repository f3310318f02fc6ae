"""The seam between the prompt turn and any model: :class:`ModelClient` and the events it streams.

Messages use the OpenAI Chat Completions format (``{"role": ..., "content": ..., "tool_calls": ...}``)
because every OpenAI-compatible server speaks it; the session history is kept in it as well. Provider
quirks stop at the adapter: the turn only ever sees the events below, and each adapter turns the messages
into its API's own form when it builds a request.

One key of an assistant message is refagent's own, never sent as it is: :data:`KEPT_REASONING`, the
reasoning an API wants back in the next request of the tool loop (:class:`KeptReasoning`). An adapter sends
back the items of its own API (:func:`kept_reasoning`) and drops the key (:func:`wire_message`); items of
another API (the user switched models) are left out, as that API would refuse them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
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
    """How hard the model should reason (one of its profile's ``reasoning_efforts``), sent as each API's own
    control (Chat Completions ``reasoning_effort``, Responses ``reasoning.effort``, Anthropic's thinking
    budget); ``None``: nothing is sent and the model uses its own default."""
    cache_key: str | None = None
    """A key that stays the same across a session's requests (its id), for a provider that routes requests
    to its prompt cache by one (OpenAI's ``prompt_cache_key``); ``None``: none is sent."""


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
class KeptReasoning:
    """Reasoning the API wants back, unchanged, in the next request of the tool loop: Responses API
    reasoning items with their encrypted content, Anthropic thinking blocks with their signatures, what a
    Chat Completions server adds to its messages. Opaque to everything but the adapter of ``api`` (a client
    kind's name, or for Chat Completions the endpoint's), which yields it before its ``Finished``;
    the turn keeps it on the assistant message (:data:`KEPT_REASONING`)."""

    api: str
    items: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens of one response, each API's counts put in one form."""

    prompt_tokens: int
    """Every input token, those read from the cache and written to it included."""
    completion_tokens: int
    """Every output token, reasoning included."""
    cached_tokens: int = 0
    """Input tokens read from the provider's prompt cache (part of :attr:`prompt_tokens`)."""
    cache_write_tokens: int = 0
    """Input tokens written to the prompt cache (part of :attr:`prompt_tokens`; Anthropic prices them apart)."""
    reasoning_tokens: int = 0
    """Output tokens spent reasoning (part of :attr:`completion_tokens`), when the API says."""


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


ModelEvent: TypeAlias = TextDelta | ReasoningDelta | ToolCallRequest | KeptReasoning | Usage | Retrying | Finished

KEPT_REASONING = "kept_reasoning"
"""The key of an assistant message that holds its :class:`KeptReasoning`: ``{"api": ..., "items": [...]}``."""


def kept_reasoning(message: dict[str, Any], api: str) -> list[dict[str, Any]]:
    """The reasoning items ``message`` keeps for ``api`` (none when it keeps another API's, or none)."""
    kept = message.get(KEPT_REASONING)
    if not isinstance(kept, dict) or kept.get("api") != api or not isinstance(kept.get("items"), list):
        return []
    return [item for item in kept["items"] if isinstance(item, dict)]


def cleaned_request(request: ModelRequest) -> ModelRequest:
    """``request`` with every string in its messages and tools valid Unicode (:func:`refagent.acp.text.clean`):
    what an adapter sends when a lone surrogate got into the conversation past the boundaries that clean text."""
    from refagent.acp.text import clean, clean_text  # here: only when a request could not be encoded

    tools = [ToolSpec(clean_text(t.name), clean_text(t.description), clean(t.parameters)) for t in request.tools]
    return replace(request, messages=clean(request.messages), tools=tools)


def wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as an API may see it: without the keys only refagent reads (:data:`KEPT_REASONING`).
    The message itself when it has none (no copy: the common case, on every request)."""
    if KEPT_REASONING not in message:
        return message
    return {key: value for key, value in message.items() if key != KEPT_REASONING}


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
