"""The messages a turn adds to the conversation besides the user's prompt: the model's (with its tool
calls), each tool call's result, and the note of the files changed outside the agent.

The conversation stays valid and bounded for the next request: every tool call gets a result (the API
requires one per call), and a call's arguments over :data:`MAX_KEPT_ARGUMENTS` characters (a 20 MB
``write_file``) are kept with their long strings cut, each with a marker (:func:`kept_arguments`); the tool
got them whole, but each later request would send them again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from refagent.acp.text import cut, shorten
from refagent.llm.protocol import KEPT_REASONING, KeptReasoning, ToolCallRequest

Message = dict[str, Any]
"""One message of the conversation, in the model's (Chat Completions) format."""

MAX_KEPT_ARGUMENTS = 1 << 20
"""A tool call's arguments the history keeps whole: 1 MiB, more than a model writes in one response."""
KEPT_STRING_CHARS = 100_000
"""What the history keeps of each long string of arguments over :data:`MAX_KEPT_ARGUMENTS` (a page of read_file)."""
MAX_CHANGED_FILES = 50
"""The changed files one note names; the rest are counted."""
CUT_SHORT = "Not run: the response was cut short."
"""The result of each call of a response that did not end normally (cancelled, cut by length, a refusal)."""


@functools.lru_cache(maxsize=8)
def system_messages(prompt: str) -> tuple[Message, ...]:
    """The system message of ``prompt`` (none for an empty one), the same object for the same prompt: each
    request of a turn starts with it, and a model client reuses what it encoded of a message it has sent
    before only when it is the same object (:mod:`refagent.llm.wire_json`). Never changed in place."""
    return ({"role": "system", "content": prompt},) if prompt else ()


def assistant_message(text: str, calls: Sequence[ToolCallRequest], kept: KeptReasoning | None = None) -> Message:
    """The model's response: its text (None if it wrote none), its tool calls, their arguments kept, and the
    reasoning its API wants back (:data:`~refagent.llm.protocol.KEPT_REASONING`), if any."""
    message: Message = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": kept_arguments(c.arguments)}}
            for c in calls
        ]
    if kept is not None and kept.items:
        message[KEPT_REASONING] = {"api": kept.api, "items": list(kept.items)}
    return message


def tool_message(call_id: str, content: str) -> Message:
    """The result of the tool call ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


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


def changed_files_note(changed: Sequence[str]) -> Message | None:
    """What the model is told before its next request about the files ``changed`` outside its tool calls
    (by the user, the editor or a command), at most :data:`MAX_CHANGED_FILES` named; None if there are none."""
    if not changed:
        return None
    shown = changed[:MAX_CHANGED_FILES]
    more = f"\n(and {len(changed) - len(shown)} more)" if len(changed) > len(shown) else ""
    note = (
        "<system-reminder>These files changed outside your tool calls since your last request (by the user, "
        "the editor or a command); read them again before relying on or editing them:\n"
        + "\n".join(shown)
        + more
        + "</system-reminder>"
    )
    # A user message keeps every provider happy (some reject system messages mid-conversation).
    return {"role": "user", "content": note}


def background_note(lines: Sequence[str]) -> Message | None:
    """What the model is told before its next request about the background commands that ended since
    (``job-1 (`npm test`): exited with code 0.``); None if none did."""
    if not lines:
        return None
    note = (
        "<system-reminder>Background commands ended since your last request (read what they printed with "
        "command_output):\n" + "\n".join(lines) + "</system-reminder>"
    )
    return {"role": "user", "content": note}


def reminders(changed: Sequence[str], ended: Sequence[str]) -> list[Message]:
    """What the model is told before its next request: the files changed outside its calls, and the
    background commands that ended (:func:`changed_files_note`, :func:`background_note`)."""
    return [note for note in (changed_files_note(changed), background_note(ended)) if note is not None]
