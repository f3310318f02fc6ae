"""Wire types of ACP v1 that refagent sends or reads, as ``TypedDict``s (zero import cost, plain JSON).

Names and fields follow ``$defs`` of the official schema (``tests/data/acp-schema/sdk-2.4.0/v1/schema.json``); enums
are ``Literal``s. Only what the agent uses is here. Builders for ``session/update`` payloads live in
:mod:`refagent.acp.updates`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from refagent.acp import PROTOCOL_VERSION as PROTOCOL_VERSION  # re-exported

StopReason: TypeAlias = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
ToolKind: TypeAlias = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolCallStatus: TypeAlias = Literal["pending", "in_progress", "completed", "failed"]
PermissionOptionKind: TypeAlias = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
PlanEntryStatus: TypeAlias = Literal["pending", "in_progress", "completed"]
PlanEntryPriority: TypeAlias = Literal["high", "medium", "low"]
ConfigOptionCategory: TypeAlias = str  # "mode" | "model" | "model_config" | "thought_level" | "_custom"


class Implementation(TypedDict):
    name: str
    version: str
    title: NotRequired[str]


# -- content ------------------------------------------------------------------------------------


class TextContent(TypedDict):
    type: Literal["text"]
    text: str


class ImageContent(TypedDict):
    type: Literal["image"]
    data: str
    mimeType: str
    uri: NotRequired[str]


class ResourceLink(TypedDict):
    type: Literal["resource_link"]
    uri: str
    name: str
    mimeType: NotRequired[str]
    title: NotRequired[str]
    description: NotRequired[str]
    size: NotRequired[int]


class EmbeddedResource(TypedDict):
    type: Literal["resource"]
    resource: dict[str, Any]  # TextResourceContents {uri, text, mimeType?} | BlobResourceContents {uri, blob, ...}


ContentBlock: TypeAlias = TextContent | ImageContent | ResourceLink | EmbeddedResource | dict[str, Any]


# -- tool calls ---------------------------------------------------------------------------------


class ToolCallLocation(TypedDict):
    path: str  # absolute
    line: NotRequired[int]  # 1-based


class ContentToolCallContent(TypedDict):
    type: Literal["content"]
    content: ContentBlock


class DiffContent(TypedDict):
    type: Literal["diff"]
    path: str
    oldText: str | None  # None: a new file
    newText: str


class TerminalContent(TypedDict):
    type: Literal["terminal"]
    terminalId: str


ToolCallContent: TypeAlias = ContentToolCallContent | DiffContent | TerminalContent


class PermissionOption(TypedDict):
    optionId: str
    name: str
    kind: PermissionOptionKind


class PlanEntry(TypedDict):
    content: str
    priority: PlanEntryPriority
    status: PlanEntryStatus


# -- sessions -----------------------------------------------------------------------------------


class SessionMode(TypedDict):
    id: str
    name: str
    description: NotRequired[str]


class SessionModeState(TypedDict):
    currentModeId: str
    availableModes: list[SessionMode]


class SelectOption(TypedDict):
    value: str
    name: str
    description: NotRequired[str]


class ConfigOption(TypedDict):
    """``SessionConfigOption`` of ``type: "select"`` (the only kind refagent offers)."""

    id: str
    name: str
    type: Literal["select"]
    currentValue: str
    options: list[SelectOption]
    category: NotRequired[ConfigOptionCategory]
    description: NotRequired[str]


class AvailableCommand(TypedDict):
    name: str
    description: str
    input: NotRequired[dict[str, str]]  # {"hint": ...}


class ClientCapabilities(TypedDict, total=False):
    fs: dict[str, bool]
    terminal: bool
    auth: dict[str, Any]
    session: dict[str, Any]
    elicitation: dict[str, Any]
    plan: dict[str, Any]
    """Unstable: the client takes plans by id (``plan_update``, ``plan_removed``)."""
