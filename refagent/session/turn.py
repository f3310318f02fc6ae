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

A turn the model failed (the endpoint, the key, a configuration that cannot work) ends ``end_turn`` with a
message that says so, marked as a failure in ``_meta`` (:mod:`refagent.session.failure` has the contract);
:func:`run_prompt` maps it, and a refusal, to the stop reason.

The history stays valid for the next prompt whatever happens: a cancelled or failed response keeps the
text that arrived, and every tool call gets a result (:mod:`refagent.session.tool_calls`); and bounded, as
:mod:`refagent.session.messages` keeps it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from refagent.acp import updates
from refagent.acp.types import StopReason
from refagent.errors import ModelError
from refagent.heartbeat import heartbeat
from refagent.ids import new_id
from refagent.llm.protocol import (
    Finished,
    KeptReasoning,
    ModelClient,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallRequest,
    Usage,
    close_stream,
)
from refagent.llm.retry import QUIET_NOTICE_SECONDS, STALL_SECONDS
from refagent.session.compaction import Compactor
from refagent.session.failure import Failure, ended_by
from refagent.session.messages import CUT_SHORT, assistant_message, reminders, system_messages, tool_message
from refagent.session.steering import Steers
from refagent.session.tool_calls import run_tool_calls
from refagent.session.waiting import WaitNews
from refagent.settings import DEFAULT_MAX_REQUESTS
from refagent.tools.runner import NoTools, Tools

log = logging.getLogger(__name__)


@dataclass
class Turn:
    """Everything one turn needs, passed in (no globals): easy to drive from a test."""

    model: ModelClient
    history: list[dict[str, Any]]
    """The conversation: a session's :class:`refagent.persistence.conversation.Conversation`, which records
    each message and cleans it of lone surrogates (a plain list does neither)."""
    send_update: Callable[[dict[str, Any]], Awaitable[None]]
    """Sends one ``session/update`` (the session's, which writes it to the client and records it)."""
    system_prompt: str = ""
    tools: Tools = field(default_factory=NoTools)
    max_requests: int = DEFAULT_MAX_REQUESTS
    usage: Callable[[Usage], dict[str, Any]] | None = None
    """The ``usage_update`` to send for a response's token counts (:class:`refagent.session.usage.UsageMeter`)."""
    compactor: Compactor | None = None
    """Compacts the conversation before a model request that would fill most of the context window."""
    notices: bool = False
    """The client shows ``notice`` updates (``session.notices``): a retried request is one; else a thought."""
    quiet_after: float = QUIET_NOTICE_SECONDS  # silence before the user hears the model is waited for
    stall_seconds: float = STALL_SECONDS  # silence after which the client fails the attempt (RetryPolicy's)
    reasoning_effort: str | None = None
    """How hard the model should reason (the session's ``thought_level``), if its profile takes one."""
    changed_files: Callable[[], list[str]] | None = None
    """Files changed outside the agent since last asked; the model hears of them before its next request."""
    background_news: Callable[[], list[str]] | None = None
    """The background commands that ended since last asked (:meth:`refagent.tools.jobs.BackgroundJobs.news`)."""
    steers: Steers | None = None
    """Messages the user sent during the turn (``_session/steering``), taken at each step
    (:mod:`refagent.session.steering`)."""
    cache_key: str | None = None  # the session's, for the provider's prompt cache (ModelRequest.cache_key)
    used: list[Usage] = field(default_factory=list, init=False)  # each response's tokens: the answer's `usage`
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
            if calls:
                await run_tool_calls(self.tools, calls, self.history)
            # A steer sent meanwhile is the next step: after the tool results, or after an answer that
            # would have ended the turn (the user spoke again before it ended).
            if not await self._take_steers() and not calls:
                return "end_turn"
        return "max_turn_requests"

    async def _take_steers(self) -> bool:
        """Deliver the steers waiting now: each joins the conversation as a user message, is decided
        delivered, and is echoed (and so recorded in place). Whether there were any."""
        if self.steers is None:
            return False
        taken = self.steers.take()
        for steer in taken:
            self.history.append(steer.message)
            steer.decide("injected")
        for steer in taken:
            for block in steer.blocks:
                await self.send_update(updates.user_message_chunk(block, steer.message_id))
        return bool(taken)

    async def _ask_model(self) -> tuple[str, list[ToolCallRequest]]:
        """One model request: the response streamed out as updates and appended to the history; its finish
        reason and the tool calls to run (none if the response did not end normally)."""
        changed, ended = (
            source() if source is not None else [] for source in (self.changed_files, self.background_news)
        )
        for note in reminders(changed, ended):
            self.history.append(note)  # one by one: the conversation cleans and records what is appended
        system = list(system_messages(self.system_prompt))
        tools = self.tools.specs()
        if self.compactor is not None:
            await self.compactor.compact_if_full(system + self.history, tools)
        request = ModelRequest(system + self.history, tools, self.reasoning_effort, self.cache_key)
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        kept: KeptReasoning | None = None
        reason = "stop"
        message_id = new_id("msg")
        thought_id = new_id("thought")
        completed = False
        try:
            stream = self.model.stream(request)
            news = WaitNews(self.send_update, self.notices, self.stall_seconds)
            beat = functools.partial(news.quiet, thought_id=thought_id)
            try:
                async with heartbeat(beat, after=self.quiet_after, every=2 * self.quiet_after) as quiet:
                    async for event in stream:
                        quiet.touch()
                        if isinstance(event, TextDelta) and event.text:
                            text.append(event.text)
                            await self.send_update(updates.agent_message_chunk(updates.text(event.text), message_id))
                        elif isinstance(event, ReasoningDelta) and event.text:
                            await self.send_update(updates.agent_thought_chunk(updates.text(event.text), thought_id))
                        elif isinstance(event, ToolCallRequest):
                            calls.append(event)
                        elif isinstance(event, KeptReasoning):
                            kept = event
                        elif isinstance(event, Usage):
                            self.used.append(event)
                            if self.usage is not None:
                                await self.send_update(self.usage(event))
                        elif isinstance(event, Retrying):
                            await news.retrying(event, thought_id)
                        elif isinstance(event, Finished):
                            reason = event.reason
            finally:
                await close_stream(stream)
            completed = True
        finally:
            # Keep what arrived, even when cancelled mid-stream, so the history stays truthful; tool calls
            # that will not run still get a result (the API requires one per call).
            self.history.append(assistant_message("".join(text), calls, kept))
            if calls and (not completed or reason in ("length", "refusal")):
                self.history.extend(tool_message(call.id, CUT_SHORT) for call in calls)
                calls = []
        return reason, calls


async def run_prompt(turn: Turn, user_message: dict[str, Any]) -> StopReason:
    """Run ``turn`` and map a model's refusal or failure to a stop reason, telling the user what went wrong
    (:func:`refagent.session.failure.ended_by`). A failure ends the turn ``end_turn``, with
    :attr:`Turn.failure` set for the response to carry too.

    Cancellation is the caller's: it runs this inside the turn's cancel scope and answers ``cancelled``
    when the scope caught it (ACP requires a stop reason, never an error, even if a library raised on
    the way out).
    """
    try:
        return await turn.run(user_message)
    except ModelError as exc:  # a refusal too (ModelRefused)
        stop, turn.failure = await ended_by(exc, turn.send_update)
        return stop
