"""Running the tool calls of one model response, in order, each result joining the conversation.

Every call gets a result, whatever happens: the API requires one per call. A call that was cut off by a
cancel says what it really did, if it said (:func:`refagent.tools.base.cancel_note`); the calls the cancel
kept from starting get :data:`CANCELLED_RESULT`. The cancellation itself goes on to the turn.

Calls run one after the other, but for consecutive calls of a tool that runs alongside others (``task``:
each is a subagent with a conversation of its own, :mod:`refagent.session.subagents`), which run at once;
their results still join the conversation in the order the model made the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from refagent.llm.protocol import ToolCallRequest
from refagent.session.messages import tool_message
from refagent.tools.base import cancel_note
from refagent.tools.runner import Tools

CANCELLED_RESULT = "The user cancelled this tool call before it ran."
"""For the calls a cancel kept from starting; one cut off while it ran says so itself (its cancel note)."""
TOGETHER = frozenset({"task"})
"""The tools whose consecutive calls run at once (their own limits bound how many really run)."""


async def run_tool_calls(tools: Tools, calls: Sequence[ToolCallRequest], history: list[dict[str, Any]]) -> None:
    """Run ``calls`` through ``tools`` (which report each to the client and ask permission), one after the
    other but for consecutive calls of a :data:`TOGETHER` tool, which run at once; each result is appended
    to ``history`` in the calls' order. Only cancellation propagates, once every call has its result."""
    done = 0
    try:
        for batch in _batches(calls):
            results: dict[int, str] = {}
            try:
                if len(batch) == 1:
                    await _run_one(tools, batch[0], 0, results)
                else:
                    async with anyio.create_task_group() as group:
                        for index, call in enumerate(batch):
                            group.start_soon(_run_one, tools, call, index, results)
            finally:
                # In the calls' order: what each gave, what it said it did when cut off, or that it never ran.
                for index, call in enumerate(batch):
                    history.append(tool_message(call.id, results.get(index, CANCELLED_RESULT)))
                    done += 1
    finally:
        for call in calls[done:]:
            history.append(tool_message(call.id, CANCELLED_RESULT))


async def _run_one(tools: Tools, call: ToolCallRequest, index: int, results: dict[int, str]) -> None:
    """Run ``call``; its result (or, cancelled, what it said it did) as ``results[index]``."""
    try:
        results[index] = await tools.run(call)
    except BaseException as exc:  # cancelled: the call may say what it really did
        said = cancel_note(exc)
        if said is not None:
            results[index] = said
        raise


def _batches(calls: Sequence[ToolCallRequest]) -> list[list[ToolCallRequest]]:
    """``calls`` cut into runs: each call alone, but consecutive :data:`TOGETHER` calls in one run."""
    batches: list[list[ToolCallRequest]] = []
    for call in calls:
        if batches and call.name in TOGETHER and batches[-1][-1].name in TOGETHER:
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches
