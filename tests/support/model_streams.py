"""What the model clients' tests share (``tests/llm/test_*_client.py``): a request, a quick retry
policy, and the events of a stream read whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refagent.errors import ModelError
from refagent.llm.protocol import ModelClient, ModelEvent, ModelRequest, Retrying, TextDelta
from refagent.llm.retry import RetryPolicy

HI = ModelRequest(messages=[{"role": "user", "content": "hi"}])
FAST = RetryPolicy(attempts=3, base_delay=0.001, max_retry_after=0.05)
"""Retries at once, and a server's Retry-After cut short: a test waits for nothing."""


async def collect(model: ModelClient, request: ModelRequest = HI) -> list[ModelEvent]:
    """Every event of the stream of ``request``."""
    return [event async for event in model.stream(request)]


async def collect_failing(model: ModelClient, request: ModelRequest = HI) -> tuple[list[ModelEvent], ModelError]:
    """The events before the stream failed, and its error (AssertionError if it did not fail)."""
    events: list[ModelEvent] = []
    try:
        async for event in model.stream(request):
            events.append(event)
    except ModelError as exc:
        return events, exc
    raise AssertionError(f"the stream did not fail: {events}")


def texts(events: Sequence[ModelEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def retries(events: Sequence[ModelEvent]) -> list[Retrying]:
    return [e for e in events if isinstance(e, Retrying)]


def of(events: Sequence[ModelEvent], kind: type[Any]) -> list[Any]:
    """The events of one ``kind``."""
    return [e for e in events if isinstance(e, kind)]
