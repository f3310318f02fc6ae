"""A :class:`~refagent.llm.protocol.ModelClient` that plays back scripted responses.

Each call to :meth:`ScriptedModel.stream` plays the next response of the script and records the request,
so a test can both drive the turn and assert what the model was sent. A response is a list of
:mod:`refagent.llm.protocol` events, plus two markers: :class:`Hang` (wait until cancelled, for cancel tests)
and :class:`Fail` (raise an error, for failure tests). A response without a :class:`Finished` event gets
one: ``tool_calls`` if it requested tools, ``stop`` otherwise.

The agent runs on one of these when it has no model: :func:`offline_model` when nothing is configured (it
says so, and the turn ends normally), :func:`broken_config_model` when the configuration cannot be used
(every turn fails with :class:`~refagent.errors.ModelConfigError`, so that the client learns the turn
failed, of kind ``config``, and ``refagent run`` exits 1).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import anyio

from refagent.errors import ModelConfigError
from refagent.llm.protocol import (
    Finished,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallRequest,
)


@dataclass(frozen=True, slots=True)
class Hang:
    """Block until the turn is cancelled."""


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise ``error`` at this point of the stream."""

    error: Exception


Step: TypeAlias = ModelEvent | Hang | Fail
Response: TypeAlias = Sequence[Step]
Script: TypeAlias = Callable[[ModelRequest], Response]


def text(message: str, *, chunk: int = 0) -> list[Step]:
    """A response that says ``message``, in chunks of ``chunk`` characters (0: word by word)."""
    if chunk:
        pieces = [message[i : i + chunk] for i in range(0, len(message), chunk)]
    else:
        words = message.split(" ")
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    return [TextDelta(p) for p in pieces if p]


class ScriptedModel:
    """Plays ``responses`` in order; past the end, ``fallback`` (if any) answers each request."""

    def __init__(self, responses: Sequence[Response] = (), *, fallback: Script | None = None) -> None:
        self._responses = list(responses)
        self._fallback = fallback
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if self._responses:
            response = self._responses.pop(0)
        elif self._fallback is not None:
            response = self._fallback(request)
        else:
            raise AssertionError("the scripted model ran out of responses")
        return self._play(response)

    async def _play(self, response: Response) -> AsyncIterator[ModelEvent]:
        finished = False
        called_tools = False
        for step in response:
            await anyio.lowlevel.checkpoint()  # a real stream yields to the loop between chunks
            if isinstance(step, Hang):
                await anyio.sleep_forever()
            elif isinstance(step, Fail):
                raise step.error
            else:
                finished = finished or isinstance(step, Finished)
                called_tools = called_tools or isinstance(step, ToolCallRequest)
                yield step
        if not finished:
            yield Finished("tool_calls" if called_tools else "stop")


def _last_user_text(request: ModelRequest) -> str:
    """What the user last wrote: the agent's own reminders (``<system-reminder>``, user messages too) left out."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            content = message.get("content")
            parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
            texts = [p if isinstance(p, str) else str(p.get("text", "")) for p in parts if isinstance(p, str | dict)]
            said = " ".join(t for t in texts if not t.lstrip().startswith("<system-reminder>"))
            if said.strip():
                return said
    return ""


def offline_reply(request: ModelRequest, note: str = "") -> Response:
    """What refagent says when no model is configured: it is honest about running without one."""
    prompt = _last_user_text(request).strip()
    quoted = f" You said: {prompt[:200]!r}." if prompt else ""
    return text(
        "refagent is running on its built-in scripted model because no model endpoint is configured."
        + (f" {note}" if note else "")
        + quoted
        + " To talk to a real model, run `refagent login` in a terminal (it finds a local model server or takes"
        " an endpoint and a key, and writes the config file), or set OPENAI_API_KEY (and OPENAI_BASE_URL for"
        " another endpoint)."
    )


def offline_model(note: str = "") -> ScriptedModel:
    """The model used when nothing is configured; ``note`` (e.g. a configuration error) is said too."""
    return ScriptedModel(fallback=lambda request: offline_reply(request, note))


def broken_config_model(problem: str) -> ScriptedModel:
    """The model used when the configuration cannot be used (``problem``: the :class:`ConfigError`'s text):
    each turn fails at once with a :class:`~refagent.errors.ModelConfigError` that says what is wrong."""
    message = (
        f"The configuration is broken: {problem.rstrip('.')}. Fix it and restart refagent (until then it has "
        "only its built-in scripted model)."
    )
    return ScriptedModel(fallback=lambda request: [Fail(ModelConfigError(message))])
