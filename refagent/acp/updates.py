"""Builders for the ``update`` member of ``session/update`` notifications (schema ``SessionUpdate``).

Each returns a plain dict ready for the wire. Optional fields are left out rather than sent as ``null``,
except where ``null`` means something (``oldText: null`` is a new file).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from refagent.acp import jsonrpc
from refagent.acp.text import one_line

if TYPE_CHECKING:  # annotations only: the TypedDicts take a millisecond or two to create
    from refagent.acp.types import (
        AvailableCommand,
        ConfigOption,
        ContentBlock,
        PlanEntry,
        ToolCallContent,
        ToolCallLocation,
        ToolCallStatus,
        ToolKind,
    )


def text(value: str) -> ContentBlock:
    return {"type": "text", "text": value}


def _chunk(kind: str, content: ContentBlock, message_id: str | None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": content}
    if message_id is not None:
        update["messageId"] = message_id
    return update


def user_message_chunk(content: ContentBlock, message_id: str | None = None) -> dict[str, Any]:
    return _chunk("user_message_chunk", content, message_id)


def agent_message_chunk(content: ContentBlock, message_id: str | None = None) -> dict[str, Any]:
    return _chunk("agent_message_chunk", content, message_id)


def agent_thought_chunk(content: ContentBlock, message_id: str | None = None) -> dict[str, Any]:
    return _chunk("agent_thought_chunk", content, message_id)


def tool_call(
    tool_call_id: str,
    title: str,
    kind: ToolKind,
    *,
    status: ToolCallStatus = "pending",
    locations: list[ToolCallLocation] | None = None,
    content: list[ToolCallContent] | None = None,
    raw_input: Any = None,
    name: str | None = None,
) -> dict[str, Any]:
    """A ``tool_call``: announces a call. ``locations`` paths must be absolute. ``name``: the tool's own
    name (``edit_file``, ``mcp__server__tool``), which a client may show or match on beside the title."""
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call",
        "toolCallId": tool_call_id,
        "title": title,
        "kind": kind,
        "status": status,
    }
    if name is not None:
        update["name"] = name
    if locations:
        update["locations"] = locations
    if content:
        update["content"] = content
    if raw_input is not None:
        update["rawInput"] = raw_input
    return update


def tool_call_update(
    tool_call_id: str,
    *,
    status: ToolCallStatus | None = None,
    title: str | None = None,
    content: list[ToolCallContent] | None = None,
    locations: list[ToolCallLocation] | None = None,
    raw_output: Any = None,
) -> dict[str, Any]:
    """A ``tool_call_update``. Only given fields are sent; ``content``/``locations`` replace, not append."""
    update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id}
    if status is not None:
        update["status"] = status
    if title is not None:
        update["title"] = title
    if content is not None:
        update["content"] = content
    if locations is not None:
        update["locations"] = locations
    if raw_output is not None:
        update["rawOutput"] = raw_output
    return update


def plan(entries: list[PlanEntry]) -> dict[str, Any]:
    """A ``plan`` update: always the complete list (the client replaces its plan)."""
    return {"sessionUpdate": "plan", "entries": entries}


DEFAULT_PLAN = "main"
"""The id of a session's plan when the model names none: a whole v1 ``plan`` read as a plan by id is this one."""


def plan_update(plan_id: str, entries: list[PlanEntry]) -> dict[str, Any]:
    """A ``plan_update`` (unstable, for a client that advertises ``plan``): the complete entries of the plan
    ``plan_id`` (the client replaces that plan, and keeps the others)."""
    return {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": plan_id, "entries": entries}}


def plan_removed(plan_id: str) -> dict[str, Any]:
    """A ``plan_removed`` (unstable): the plan ``plan_id`` is done with."""
    return {"sessionUpdate": "plan_removed", "planId": plan_id}


def available_commands(commands: list[AvailableCommand]) -> dict[str, Any]:
    return {"sessionUpdate": "available_commands_update", "availableCommands": commands}


def current_mode(mode_id: str) -> dict[str, Any]:
    return {"sessionUpdate": "current_mode_update", "currentModeId": mode_id}


def config_options(options: list[ConfigOption]) -> dict[str, Any]:
    return {"sessionUpdate": "config_option_update", "configOptions": options}


def session_info(*, title: str | None = None, updated_at: str | None = None) -> dict[str, Any]:
    """A ``session_info_update``; the title made one visible line (:func:`refagent.acp.text.one_line`):
    it comes from the user's prompt, and clients draw it in tab bars and terminals."""
    update: dict[str, Any] = {"sessionUpdate": "session_info_update"}
    if title is not None:
        update["title"] = one_line(title)
    if updated_at is not None:
        update["updatedAt"] = updated_at
    return update


def usage(used: int, size: int, cost: tuple[float, str] | None = None) -> dict[str, Any]:
    """A ``usage_update``: tokens in context, context window size, and the cumulative cost if known."""
    update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": max(0, used), "size": max(0, size)}
    if cost is not None:
        update["cost"] = {"amount": cost[0], "currency": cost[1]}
    return update


def notice(severity: str, title: str, description: str | None = None) -> dict[str, Any]:
    """A ``notice``: news for the user about this run of the agent, not part of the conversation (an MCP
    server that failed, a retried request). ``severity``: ``info``, ``warning`` or ``error``. Only for a
    client that advertised ``session.notices``; never recorded, never replayed."""
    update: dict[str, Any] = {"sessionUpdate": "notice", "severity": severity, "title": title}
    if description:
        update["description"] = description
    return update


def compaction(
    compaction_id: str,
    status: str,
    *,
    summary: list[ContentBlock] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A ``compaction_update``: ``in_progress`` first (which fixes its place in the thread), then
    ``completed`` (with the ``summary``), ``failed`` (with the ``error``) or ``cancelled``. Only for a
    client that advertised ``session.compaction``."""
    update: dict[str, Any] = {"sessionUpdate": "compaction_update", "compactionId": compaction_id, "status": status}
    if summary is not None:
        update["summary"] = summary
    if error is not None:
        update["error"] = error
    return update


def compaction_summary_chunk(compaction_id: str, content: ContentBlock) -> dict[str, Any]:
    """A piece of a compaction's summary as the model writes it (the final ``compaction_update`` carries it
    whole)."""
    return {"sessionUpdate": "compaction_summary_chunk", "compactionId": compaction_id, "content": content}


def lines(session_id: str, updates: Iterable[dict[str, Any]]) -> bytes:
    """``updates`` of the session ``session_id`` as ``session/update`` notifications, one encoded line each
    (what a replay hands the connection's ``send_lines`` at once)."""
    return b"".join(
        jsonrpc.encode(jsonrpc.notification("session/update", {"sessionId": session_id, "update": update}))
        for update in updates
    )
