"""An MCP server's tools as refagent tools (:class:`~refagent.tools.base.BaseTool`).

**Names.** The model sees ``mcp__<server>__<tool>`` (the convention other agents use too), cut to the
OpenAI function-name rules: characters outside ``[a-zA-Z0-9_-]`` become ``_`` and at most 64 characters,
a name that had to be cut ending in a hash of the original so that long names stay distinct. When two
tools still end up with one name (``a.b`` and ``a_b``, two servers given the same name), the later one
gets ``_2``, ``_3``... A name, once given, stays with its tool for the life of the hub, so the
conversation history keeps meaning the same tool across tool-list changes. The ``mcp__`` prefix keeps
them apart from refagent's own tools, which are also passed in as reserved.

**Kinds and permission** come from the tool's annotations (MCP ``ToolAnnotations``; hints the user
chose to trust by configuring the server). Only an explicit ``readOnlyHint: true`` makes a call read-only:

==================================================================  ==========  =====================
tool                                                                ACP kind    asks permission
==================================================================  ==========  =====================
read-only, named like a search (search, find, grep, query, lookup)  ``search``  no
read-only and ``openWorldHint: true`` or named like a fetch         ``fetch``   no
other read-only                                                     ``read``    no
anything else                                                       ``other``   by the session's mode
==================================================================  ==========  =====================

A call that may change something is ``mutating`` with the "always" scope ``mcp:<server>:<tool>``, so the
session's mode and the user's remembered choices apply to it like to any other change: asked in
``ask`` and ``accept-edits``, refused in ``read-only``, run in ``full-access``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from refagent.acp.types import ToolKind
from refagent.mcp.results import convert_result
from refagent.tools.args import shown
from refagent.tools.base import MAX_NAME_LENGTH, NAME_CHARS, BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.text import text_content

PREFIX = "mcp__"
_NOT_NAME_CHARS = re.compile(f"[^{NAME_CHARS}]")
_SEARCH_WORDS = ("search", "find", "grep", "query", "lookup", "look_up")
_FETCH_WORDS = ("fetch", "download", "http", "url", "browse", "scrape", "crawl", "web")
_PREVIEW_CHARS = 4000


class ServerLink(Protocol):
    """The connection a tool calls through (:class:`refagent.mcp.connection.Connection`)."""

    @property
    def name(self) -> str:
        """The server's name, unique within the session."""
        ...

    def check_available(self) -> None:
        """Raise ToolError, saying why, if the server cannot take calls now (it went away)."""
        ...

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        """Call ``tool``; its ``CallToolResult`` in wire form. Raises ToolError when the server cannot
        answer (disconnected, crashed, timed out): the message says so, for the model."""
        ...


class McpTool(BaseTool):
    """One tool of one MCP server. Made by :func:`make_tool`, which gives each tool a class of its own:
    :class:`BaseTool` declares ``name``, ``description``, ``parameters`` and ``kind`` as class variables."""

    def __init__(self, link: ServerLink, remote_name: str, display: str, read_only: bool) -> None:
        self.link = link
        self.remote_name = remote_name
        """The tool's own name on its server."""
        self.display = display
        self.read_only = read_only

    def title(self, args: dict[str, Any]) -> str:
        title = f"{self.link.name}: {self.display}"
        return f"{title} {shown(json.dumps(args, ensure_ascii=False))}" if args else title

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        self.link.check_available()  # before asking the user about a call that cannot happen

        async def execute() -> ToolResult:
            return convert_result(await self.link.call_tool(self.remote_name, args))

        if self.read_only:
            return Plan(title=self.title(args), execute=execute)
        preview = json.dumps(args, indent=2, ensure_ascii=False)
        if len(preview) > _PREVIEW_CHARS:
            preview = preview[:_PREVIEW_CHARS] + "\n…"
        return Plan(
            title=self.title(args),
            execute=execute,
            # Shown when asking: what will be sent matters as much as which tool.
            preview=[text_content(f"```json\n{preview}\n```")] if args else [],
            mutating=True,
            permission_key=f"mcp:{self.link.name}:{self.remote_name}",
            permission_label=f"calls to {self.remote_name} on {self.link.name}",
        )


def make_tool(link: ServerLink, tool: Mapping[str, Any], model_name: str) -> McpTool:
    """A refagent tool for ``tool`` (an MCP ``Tool`` in wire form: name, title?, description?,
    inputSchema, annotations?), offered to the model as ``model_name``."""
    remote = str(tool["name"])
    given = tool.get("annotations")
    annotations: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    display = str(tool.get("title") or annotations.get("title") or remote)
    description = tool.get("description") or ""
    if not isinstance(description, str) or not description.strip():
        description = f"{display} (a tool of the MCP server {link.name})."

    class Tool(McpTool):
        pass

    Tool.__name__ = Tool.__qualname__ = f"McpTool[{model_name}]"
    Tool.name = model_name
    Tool.description = description
    Tool.parameters = input_schema(tool.get("inputSchema"))
    Tool.kind = tool_kind(remote, annotations)
    return Tool(link, remote, display, annotations.get("readOnlyHint") is True)


def tool_kind(name: str, annotations: Mapping[str, Any]) -> ToolKind:
    """The ACP kind of a tool (see the module docstring)."""
    if annotations.get("readOnlyHint") is not True:
        return "other"
    lowered = name.lower()
    if any(word in lowered for word in _SEARCH_WORDS):
        return "search"
    if annotations.get("openWorldHint") is True or any(word in lowered for word in _FETCH_WORDS):
        return "fetch"
    return "read"


def input_schema(schema: Any) -> dict[str, Any]:
    """The tool's ``inputSchema`` as function parameters: an object schema with ``properties`` (some
    providers refuse one without), otherwise unchanged."""
    if not isinstance(schema, Mapping):
        return {"type": "object", "properties": {}}
    out = dict(schema)
    out.setdefault("type", "object")
    if out["type"] == "object" and not isinstance(out.get("properties"), Mapping):
        out["properties"] = {}
    return out


class ToolNames:
    """Gives each (server, tool) a model-facing name: valid, unique, and stable (module docstring)."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._taken = set(reserved)
        self._given: dict[tuple[str, str], str] = {}

    def name(self, server: str, tool: str) -> str:
        key = (server, tool)
        if key in self._given:
            return self._given[key]
        base = model_name(server, tool)
        name, number = base, 2
        while name in self._taken:
            suffix = f"_{number}"
            name = base[: MAX_NAME_LENGTH - len(suffix)] + suffix
            number += 1
        self._taken.add(name)
        self._given[key] = name
        return name


def model_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` in the OpenAI function-name charset and length, before de-duplication."""
    name = f"{PREFIX}{_NOT_NAME_CHARS.sub('_', server)}__{_NOT_NAME_CHARS.sub('_', tool)}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME_LENGTH - 9]}_{digest}"
