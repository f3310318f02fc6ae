"""``say(text)``: the agent telling the user something that is not the model's (a slash command's answer,
a note about compaction or an MCP server), as chunks of one agent message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from refagent.acp import updates
from refagent.ids import new_id

Say = Callable[[str], Awaitable[None]]


def speaker(send: Callable[[dict[str, Any]], Awaitable[None]]) -> Say:
    """A ``say`` whose texts are chunks of one new agent message, sent with ``send``."""
    message_id = new_id("msg")

    async def say(text: str) -> None:
        await send(updates.agent_message_chunk(updates.text(text), message_id))

    return say
