"""The prompt turn: model stream -> tool calls -> updates -> stop reason.

One :meth:`Turn.run` (through :func:`run_prompt`) answers one ``session/prompt`` (ACP "Prompt Turn"):

1. the prompt joins the session history as a user message;
2. the model is asked for a response; its text streams out as ``agent_message_chunk`` and its reasoning
   as ``agent_thought_chunk`` while it arrives, each message under its own ``messageId``;
3. if it asked for tools, each call runs through the session's :class:`~refagent.tools.runner.Tools` (which
   report the call to the editor and ask permission) and its result joins the history; then back to 2;
4. the turn ends with a stop reason: ``end_turn`` when the model stops calling tools, ``max_tokens``
   when a response was cut by length, ``refusal``, ``max_turn_requests`` after the configured number of
   model requests, and ``cancelled`` when ``session/cancel`` arrived (never an error).

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
and exits 1. A refusal is not a failure: it ends ``refusal``.

The history stays valid for the next prompt whatever happens: a cancelled or failed response keeps
the text that arrived, and every tool call gets a result. It stays bounded too: a tool call's arguments
over :data:`MAX_KEPT_ARGUMENTS` characters (a 20 MB ``write_file``) are kept with their long strings cut,
each with a marker; the tool got them whole, but each later request would send them again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from refagent.acp import updates
from refagent.acp.text import cut, shorten
from refagent.acp.types import ContentBlock, StopReason
from refagent.errors import FailureKind, ModelError, ModelRefused
from refagent.ids import new_id
from refagent.llm.protocol import (
    Finished,
    ModelClient,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallRequest,
    Usage,
    close_stream,
)
from refagent.session.compaction import Compactor
from refagent.settings import DEFAULT_MAX_REQUESTS
from refagent.tools.base import cancel_note
from refagent.tools.runner import NoTools, Tools

log = logging.getLogger(__name__)

MAX_CHANGED_FILES = 50
CANCELLED_RESULT = "The user cancelled this tool call before it ran."
"""For the calls a cancel kept from starting; one cut off while it ran says so itself (its cancel note)."""
MAX_KEPT_ARGUMENTS = 1 << 20
"""A tool call's arguments the history keeps whole: 1 MiB, more than a model writes in one response."""
KEPT_STRING_CHARS = 100_000
"""What the history keeps of each long string of arguments over :data:`MAX_KEPT_ARGUMENTS` (a page of read_file)."""


@dataclass
class Turn:
    """Everything one turn needs, passed in (no globals): easy to drive from a test."""

    model: ModelClient
    history: list[dict[str, Any]]
    """The conversation: a session's :class:`refagent.persistence.conversation.Conversation`, which records
    each message and cleans it of lone surrogates (a plain list does neither)."""
    send: Callable[[dict[str, Any]], Awaitable[None]]
    """Sends one ``session/update`` (the session's recorder, which writes it to the connection)."""
    system_prompt: str = ""
    tools: Tools = field(default_factory=NoTools)
    max_requests: int = DEFAULT_MAX_REQUESTS
    usage: Callable[[Usage], dict[str, Any]] | None = None
    """The ``usage_update`` to send for a response's token counts (:class:`refagent.session.usage.UsageMeter`)."""
    compactor: Compactor | None = None
    """Compacts the conversation before a model request that would fill most of the context window."""
    notices: bool = False
    """The client shows ``notice`` updates (``session.notices``): a retried request is one; else a thought."""
    reasoning_effort: str | None = None
    """How hard the model should reason (the session's ``thought_level``), if its profile takes one."""
    changed_files: Callable[[], list[str]] | None = None
    """Files changed outside the agent since last asked; the model hears of them before its next request."""
    failure: Failure | None = field(default=None, init=False)
    """Why the model failed the turn, once :func:`run_prompt` has ended it so (the response says it too)."""

    async def run(self, user_message: dict[str, Any]) -> StopReason:
        """Run the turn to its stop reason. Cancellation of the calling scope is *not* caught here."""
        self.history.append(user_message)
        for _ in range(self.max_requests):
            reason, calls = await self._ask_model()
            if reason == "length":
                return "max_tokens"
            if reason == "refusal":
                return "refusal"
            if not calls:
                return "end_turn"
            await self._run_tools(calls)
        return "max_turn_requests"

    async def _ask_model(self) -> tuple[str, list[ToolCallRequest]]:
        self._note_changed_files()
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        tools = self.tools.specs()
        if self.compactor is not None:
            await self.compactor.compact_if_full(system + self.history, tools)
        request = ModelRequest(messages=system + self.history, tools=tools, reasoning_effort=self.reasoning_effort)
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        reason = "stop"
        message_id = new_id("msg")
        thought_id = new_id("thought")
        completed = False
        try:
            stream = self.model.stream(request)
            try:
                async for event in stream:
                    if isinstance(event, TextDelta) and event.text:
                        text.append(event.text)
                        await self.send(updates.agent_message_chunk(updates.text(event.text), message_id))
                    elif isinstance(event, ReasoningDelta) and event.text:
                        await self.send(updates.agent_thought_chunk(updates.text(event.text), thought_id))
                    elif isinstance(event, ToolCallRequest):
                        calls.append(event)
                    elif isinstance(event, Usage):
                        if self.usage is not None:
                            await self.send(self.usage(event))
                    elif isinstance(event, Retrying):
                        note = _retry_note(event)
                        if self.notices:  # news about this run, not part of the conversation
                            await self.send(updates.notice("warning", "The model request is being retried", note))
                        else:  # a line of its own among the thoughts (a retry comes before any reasoning)
                            await self.send(updates.agent_thought_chunk(updates.text(f"{note}\n"), thought_id))
                    elif isinstance(event, Finished):
                        reason = event.reason
            finally:
                await close_stream(stream)
            completed = True
        finally:
            # Keep what arrived, even when cancelled mid-stream, so the history stays truthful; tool calls
            # that will not run still get a result (the API requires one per call).
            self.history.append(_assistant_message("".join(text), calls))
            if calls and (not completed or reason in ("length", "refusal")):
                for call in calls:
                    self.history.append(_tool_message(call.id, "Not run: the response was cut short."))
                calls = []
        return reason, calls

    def _note_changed_files(self) -> None:
        changed = self.changed_files() if self.changed_files is not None else []
        if not changed:
            return
        shown = changed[:MAX_CHANGED_FILES]
        more = f"\n(and {len(changed) - len(shown)} more)" if len(changed) > len(shown) else ""
        note = (
            "<system-reminder>These files changed outside your tool calls since your last request (by the user, "
            "the editor or a command); read them again before relying on or editing them:\n"
            + "\n".join(shown)
            + more
            + "</system-reminder>"
        )
        # A user message here keeps every provider happy (some reject system messages mid-conversation).
        self.history.append({"role": "user", "content": note})

    async def _run_tools(self, calls: list[ToolCallRequest]) -> None:
        done = 0
        try:
            for call in calls:
                try:
                    result = await self.tools.run(call)
                except BaseException as exc:  # cancelled: the call may say what it really did
                    said = cancel_note(exc)
                    if said is not None:
                        self.history.append(_tool_message(call.id, said))
                        done += 1
                    raise
                self.history.append(_tool_message(call.id, result))
                done += 1
        finally:
            for call in calls[done:]:
                self.history.append(_tool_message(call.id, CANCELLED_RESULT))


def _retry_note(event: Retrying) -> str:
    """Plain text, no markup: clients show thoughts as they are (a terminal would show ``_x_`` literally)."""
    delay = f"{event.delay:.1f}" if event.delay < 10 else f"{event.delay:.0f}"
    of = f" of {event.max_attempts}" if event.max_attempts else ""
    return f"{event.reason}; retrying in {delay} s (attempt {event.attempt}{of})."


def _assistant_message(text: str, calls: list[ToolCallRequest]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": kept_arguments(c.arguments)}}
            for c in calls
        ]
    return message


def kept_arguments(arguments: str) -> str:
    """``arguments`` as the history keeps them: whole up to :data:`MAX_KEPT_ARGUMENTS` characters; else,
    if they are JSON, with each string over :data:`KEPT_STRING_CHARS` cut (with a marker), and as a JSON
    object saying they were left out if that is still too long (providers may parse them); if they are
    not JSON (the call failed), cut."""
    if len(arguments) <= MAX_KEPT_ARGUMENTS:
        return arguments
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return cut(arguments, MAX_KEPT_ARGUMENTS)
    kept = json.dumps(shorten(value, KEPT_STRING_CHARS), ensure_ascii=False)
    if len(kept) <= MAX_KEPT_ARGUMENTS:
        return kept
    return json.dumps({"omitted": f"{len(arguments):,} characters of arguments, too long to keep"})


def _tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


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


async def run_prompt(turn: Turn, user_message: dict[str, Any]) -> StopReason:
    """Run ``turn`` and map a model failure to a stop reason, telling the user what went wrong.

    A failure ends the turn ``end_turn``, with a message chunk marked as the failure and
    :attr:`Turn.failure` set, for the response to carry too (see the module docstring). It is logged at
    info only: the user reads it in the session, and a terminal client that shares the agent's stderr
    would show a warning a second time.

    Cancellation is the caller's: it runs this inside the turn's cancel scope and answers ``cancelled``
    when the scope caught it (ACP requires a stop reason, never an error, even if a library raised on
    the way out).
    """
    try:
        return await turn.run(user_message)
    except ModelRefused as exc:
        await turn.send(updates.agent_message_chunk(updates.text(f"The model refused: {exc}"), new_id("msg")))
        return "refusal"
    except ModelError as exc:
        failure = Failure(exc.kind, str(exc))
        log.info("the turn failed (%s): %s", failure.kind, failure.message)
        chunk = updates.agent_message_chunk(updates.text(failure.message), new_id("msg"))
        chunk["_meta"] = failure.meta()
        # If the turn was cancelled meanwhile, this send raises and the caller's scope answers "cancelled".
        await turn.send(chunk)
        turn.failure = failure
        return "end_turn"


def user_text(blocks: list[ContentBlock]) -> str:
    """The plain text of a prompt, for logs and titles."""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
