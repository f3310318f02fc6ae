"""Running the tool calls of one model response, in order, each result joining the conversation.

Every call gets a result, whatever happens: the API requires one per call. A call that was cut off by a
cancel says what it really did, if it said (:func:`refagent.tools.base.cancel_note`); the calls the cancel
kept from starting get :data:`CANCELLED_RESULT`. The cancellation itself goes on to the turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refagent.llm.protocol import ToolCallRequest
from refagent.session.messages import tool_message
from refagent.tools.base import cancel_note
from refagent.tools.runner import Tools

CANCELLED_RESULT = "The user cancelled this tool call before it ran."
"""For the calls a cancel kept from starting; one cut off while it ran says so itself (its cancel note)."""


async def run_tool_calls(tools: Tools, calls: Sequence[ToolCallRequest], history: list[dict[str, Any]]) -> None:
    """Run ``calls`` one after the other through ``tools`` (which report each to the client and ask
    permission), appending each result to ``history``. Only cancellation propagates, once every call has
    its result."""
    done = 0
    try:
        for call in calls:
            try:
                result = await tools.run(call)
            except BaseException as exc:  # cancelled: the call may say what it really did
                said = cancel_note(exc)
                if said is not None:
                    history.append(tool_message(call.id, said))
                    done += 1
                raise
            history.append(tool_message(call.id, result))
            done += 1
    finally:
        for call in calls[done:]:
            history.append(tool_message(call.id, CANCELLED_RESULT))
