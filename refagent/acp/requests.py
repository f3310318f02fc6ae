"""The params of each request (and notification) the agent answers, typed: what :mod:`refagent.server.agent`
reads off the wire and hands to the session machinery, which never sees the raw JSON.

Each class is one request's params (or several requests' that share a shape), a named tuple (frozen, and
quick to create: a frozen dataclass takes a millisecond, and the first ``session/new`` is answered
before the event loop starts, with this module loaded), with a ``parse`` that reads and checks the wire's
object. The rules are the schema's, as :mod:`refagent.acp.params` applies
them: a required field that is missing, null or of the wrong type is :class:`InvalidParams` (``-32602``)
naming the field; an optional one that is malformed reads as its default (its
``x-deserialize-default-on-error``), except where being lenient would widen what the agent may touch (a
relative path is refused, never dropped). What the schema leaves open stays a mapping, checked only for
its shape here: the prompt's content blocks (their fields are :mod:`refagent.session.content`'s to judge)
and the ``mcpServers`` entries (each checked by :mod:`refagent.mcp.config`, so that one bad entry never
fails a session).

Whether a session exists is not a params question: an unknown ``sessionId`` is the session manager's
``-32002`` (resource not found), after the params parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

from refagent.acp import params as p
from refagent.acp.errors import InvalidParams

if TYPE_CHECKING:  # an annotation: the TypedDicts are not needed to answer session/new
    from refagent.acp.types import ContentBlock

Params = Mapping[str, Any]
"""A request's ``params`` as the wire has them: an object (the framing refuses anything else)."""


SYSTEM_PROMPT_MODES = ("append", "override")
"""The ``systemPrompt`` modes the agent takes (unstable ``sessionCapabilities.systemPrompt``)."""
MAX_SYSTEM_PROMPT_CHARS = 100_000
"""The most a client's system prompt may hold: it goes with every model request of the session."""


class ClientSystemPrompt(NamedTuple):
    """A client's ``systemPrompt`` on ``session/new``, ``load``, ``resume`` or ``fork`` (unstable): how it
    combines with the agent's own instructions (``append``, or ``override`` of the built-in ones), and its
    text (the ``text`` blocks joined by blank lines)."""

    mode: str
    text: str

    @classmethod
    def parse(cls, params: Params) -> ClientSystemPrompt | None:
        """The request's ``systemPrompt``; None when it has none. Anything the agent cannot apply as asked
        is ``-32602`` (the schema: an agent MUST error rather than create or open the session): an unknown
        mode, content that is not a non-empty array of ``text`` blocks, or more than
        :data:`MAX_SYSTEM_PROMPT_CHARS` in all."""
        value = params.get("systemPrompt")
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidParams("Invalid params: 'systemPrompt' must be an object with 'mode' and 'content'")
        mode = p.required(value, "mode", str)
        if mode not in SYSTEM_PROMPT_MODES:
            raise InvalidParams(
                f"Invalid params: system prompt mode {mode[:100]!r} is not supported; the modes are append and override"
            )
        content = p.required(value, "content", list)
        if not content:
            raise InvalidParams("Invalid params: 'systemPrompt.content' must not be empty")
        texts: list[str] = []
        for index, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise InvalidParams(
                    f"Invalid params: systemPrompt.content[{index}] must be a text block (only text is supported)"
                )
            texts.append(block["text"])
        text = "\n\n".join(texts)
        if len(text) > MAX_SYSTEM_PROMPT_CHARS:
            raise InvalidParams(
                f"Invalid params: the system prompt holds {len(text):,} characters; at most "
                f"{MAX_SYSTEM_PROMPT_CHARS:,} are taken"
            )
        if "\0" in text:
            raise InvalidParams("Invalid params: the system prompt contains a NUL character")
        return cls(mode, text)


class NewSessionParams(NamedTuple):
    """``session/new``: a session in ``cwd``, with the client's MCP servers and additional directories, and
    the client's system prompt if it sent one."""

    cwd: str
    """Absolute, with no NUL byte."""
    mcp_servers: tuple[Any, ...]
    """The ``McpServer`` entries as the client sent them (required, possibly empty)."""
    additional_directories: tuple[str, ...] = ()
    """More roots besides ``cwd``, each absolute."""
    system_prompt: ClientSystemPrompt | None = None

    @classmethod
    def parse(cls, params: Params) -> NewSessionParams:
        cwd = p.absolute_path(params, "cwd")
        servers = p.required(params, "mcpServers", list)
        extra = tuple(p.absolute_paths(params, "additionalDirectories"))
        return cls(cwd, tuple(servers), extra, ClientSystemPrompt.parse(params))


class OpenSessionParams(NamedTuple):
    """``session/load``, ``session/resume`` and ``session/fork``: the saved session ``session_id``, opened (or
    forked) in ``cwd`` with the client's MCP servers and additional directories (the client's list is the one
    in force, not the saved one), and the client's system prompt if it sent one (None: the saved one stays)."""

    session_id: str
    cwd: str
    mcp_servers: tuple[Any, ...] = ()
    additional_directories: tuple[str, ...] = ()
    system_prompt: ClientSystemPrompt | None = None

    @classmethod
    def parse(cls, params: Params, *, servers_required: bool = False) -> OpenSessionParams:
        """``servers_required``: ``mcpServers`` is required (``session/load``); else it may be left out."""
        session_id = p.required(params, "sessionId", str)
        cwd = p.absolute_path(params, "cwd")
        if servers_required:
            servers = p.required(params, "mcpServers", list)
        else:
            servers = p.optional(params, "mcpServers", list, [])
        extra = tuple(p.absolute_paths(params, "additionalDirectories"))
        return cls(session_id, cwd, tuple(servers), extra, ClientSystemPrompt.parse(params))

    @classmethod
    def parse_load(cls, params: Params) -> OpenSessionParams:
        """``session/load``'s (its ``mcpServers`` is required)."""
        return cls.parse(params, servers_required=True)


ArchiveFilter = Literal["exclude", "include", "only"]
"""Which sessions ``session/list`` returns by their archive state (unstable ``archived``)."""
ARCHIVE_FILTERS: tuple[ArchiveFilter, ...] = ("exclude", "include", "only")


class ListSessionsParams(NamedTuple):
    """``session/list``: the saved sessions of ``cwd`` (None: of every directory), the page after ``cursor``,
    archived or not as ``archived`` says (unstable; ``exclude`` when omitted or null)."""

    cwd: str | None = None
    cursor: str | None = None
    """Opaque: a ``nextCursor`` the agent gave (the store judges it)."""
    archived: ArchiveFilter = "exclude"

    @classmethod
    def parse(cls, params: Params) -> ListSessionsParams:
        # Optional, but not lenient: a relative cwd or a cursor that is no string is a client's mistake to
        # hear of, not a reason to list every session or to start over at the first page.
        cwd = p.absolute_path(params, "cwd") if params.get("cwd") is not None else None
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParams("Invalid params: 'cursor' must be a string")
        archived = params.get("archived")
        if archived is None:
            archived = "exclude"
        elif archived not in ARCHIVE_FILTERS:  # the schema: a filter not supported is -32602, never "exclude"
            raise InvalidParams(f"Invalid params: 'archived' must be one of {', '.join(ARCHIVE_FILTERS)}")
        return cls(cwd, cursor, cast(ArchiveFilter, archived))


class SessionParams(NamedTuple):
    """``session/close``, ``session/delete`` and ``session/cancel``: just the session."""

    session_id: str

    @classmethod
    def parse(cls, params: Params) -> SessionParams:
        return cls(p.required(params, "sessionId", str))

    @classmethod
    def parse_notification(cls, params: Params) -> SessionParams | None:
        """``session/cancel``'s: a notification has no answer to carry an error, so a ``sessionId`` that is
        missing or no string is None (nothing to cancel)."""
        session_id = params.get("sessionId")
        return cls(session_id) if isinstance(session_id, str) else None


class PromptParams(NamedTuple):
    """``session/prompt``: the user's content blocks for the session ``session_id``."""

    session_id: str
    prompt: tuple[ContentBlock, ...]
    """Each an object with a string ``type``; what each type must hold is checked where the blocks are read
    (:func:`refagent.session.content.user_message`), which also refuses an empty prompt."""
    message_id: str | None = None
    """The id the user's message is recorded under (unstable ``messageId``; v2 gives each one); None: one of
    the agent's own."""

    @classmethod
    def parse(cls, params: Params) -> PromptParams:
        session_id = p.required(params, "sessionId", str)
        blocks = p.required(params, "prompt", list)
        for index, block in enumerate(blocks):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise InvalidParams(f"Invalid params: prompt[{index}] is not a content block")
        message_id = p.optional(params, "messageId", str, None)
        if message_id is not None and not 0 < len(message_id) <= 200:
            raise InvalidParams("Invalid params: messageId must be 1 to 200 characters")
        return cls(session_id, tuple(blocks), message_id)


class SetModeParams(NamedTuple):
    """``session/set_mode``: switch the session ``session_id`` to the mode ``mode_id`` (which the session
    judges: an unknown one is ``-32602`` there, naming the modes it has)."""

    session_id: str
    mode_id: str
    """One of the modes the session offers (``availableModes``)."""

    @classmethod
    def parse(cls, params: Params) -> SetModeParams:
        return cls(p.required(params, "sessionId", str), p.required(params, "modeId", str))


class SetConfigOptionParams(NamedTuple):
    """``session/set_config_option``: set the option ``config_id`` of the session ``session_id`` to ``value``
    (the session judges both: an unknown option or value is ``-32602`` there, naming the ones it has)."""

    session_id: str
    config_id: str
    value: str
    """Every option the agent offers is a ``select``, whose values are strings."""

    @classmethod
    def parse(cls, params: Params) -> SetConfigOptionParams:
        session_id = p.required(params, "sessionId", str)
        config_id = p.required(params, "configId", str)
        if "value" not in params:
            raise InvalidParams("Invalid params: missing required field 'value'")
        value = params["value"]
        if not isinstance(value, str):
            raise InvalidParams(f"Invalid params: option {config_id[:100]!r} takes a string value")
        return cls(session_id, config_id, value)


class SetTitleParams(NamedTuple):
    """``session/set_title`` (unstable): the title ``title`` for the session ``session_id`` (the session
    manager normalises it, and refuses one empty once normalised)."""

    session_id: str
    title: str
    """As the client sent it: one line of at most 200 characters once normalised."""

    @classmethod
    def parse(cls, params: Params) -> SetTitleParams:
        return cls(p.required(params, "sessionId", str), p.required(params, "title", str))


class AuthenticateParams(NamedTuple):
    """``authenticate``: sign in with the method ``method_id`` (the agent judges it)."""

    method_id: str

    @classmethod
    def parse(cls, params: Params) -> AuthenticateParams:
        return cls(p.required(params, "methodId", str))
