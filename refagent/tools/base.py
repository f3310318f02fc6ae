"""The tool contract: what a tool is, what it is given, and what it gives back.

A tool call goes through two steps, so that the user can judge a change before it happens:

1. :meth:`Tool.prepare` checks the arguments and paths and works out *what would happen* (for an edit:
   the whole file before and after) without changing anything. It returns a :class:`Plan`.
2. If the plan needs permission, the runner (:mod:`refagent.tools.runner`) asks the user, showing the
   plan's title and preview; then it calls :meth:`Plan.execute`, which does the work and returns a
   :class:`ToolResult`.

Errors the model can fix (bad arguments, a missing file, an ambiguous edit) are raised as
:class:`refagent.errors.ToolError` with a message written *for the model*: it reads it and tries again.

Backends are passed in through :class:`ToolContext`, never imported: the editor's file system or the
local disk, the editor's terminals or local processes. Their protocols (the seams) live with their
implementations in :mod:`refagent.sandbox.seams`; they are re-exported here, so a custom tool written
against this module needs nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from refagent.acp.types import ToolCallContent, ToolCallLocation, ToolKind
from refagent.sandbox.seams import (
    Answer,
    CommandResult,
    Disk,
    Holding,
    Level,
    PathPolicy,
    Questions,
    ReadTracker,
    ResolvedPath,
    Search,
    Terminals,
    TextFiles,
    TreePreview,
)

if TYPE_CHECKING:
    from refagent.tools.jobs import BackgroundJobs
    from refagent.tools.plans import Plans

__all__ = [
    "CANCEL_NOTE",
    "MAX_NAME_LENGTH",
    "NAME_CHARS",
    "Answer",
    "BaseTool",
    "CommandResult",
    "Disk",
    "Holding",
    "Level",
    "PathPolicy",
    "Plan",
    "Questions",
    "ReadTracker",
    "ResolvedPath",
    "Search",
    "Terminals",
    "TextFiles",
    "Tool",
    "ToolContext",
    "ToolResult",
    "TreePreview",
    "cancel_note",
    "outside_read_scope",
    "scope_covers",
]

NAME_CHARS = "A-Za-z0-9_-"
MAX_NAME_LENGTH = 64
"""What OpenAI-compatible endpoints accept as a function (tool) name: these characters, at most this many."""


@dataclass
class ToolContext:
    """What a tool may use. One per session; backends chosen from the client's capabilities."""

    session_id: str
    cwd: str
    roots: list[str]
    policy: PathPolicy
    files: TextFiles
    """Read/write of text: the editor's when it advertises ``fs``, else the disk."""
    disk: Disk
    """The sandbox's disk: listing, delete and move always happen here (ACP gives editors no such methods)."""
    terminals: Terminals
    holding: Holding
    """How far the sandbox holds commands: whether a command is confined is decided here alone (the session's
    modes describe the same answer)."""
    reads: ReadTracker
    search: Search
    """Finding files and text (``glob``, ``grep``): the sandbox's, on its disk."""
    send_update: Callable[[dict[str, Any]], Awaitable[None]]
    current_call_id: str = ""
    """The ``toolCallId`` of the call being prepared or run: the runner gives each call its own copy of
    the context (``dataclasses.replace``), so a tool can update its own call (e.g. embed a terminal)."""
    questions: Questions | None = None
    """Asking the user a question (the editor's form or permission dialog); None: no way to ask."""
    jobs: BackgroundJobs | None = None
    """The session's background commands (:mod:`refagent.tools.jobs`); None: none can be started."""
    plans: Plans | None = None
    """The session's plans as its client is shown them (:class:`refagent.tools.plans.Plans`); None: the one
    whole v1 ``plan``."""


@dataclass
class ToolResult:
    """The outcome of a call: ``output`` for the model; ``content`` and ``raw_output`` for the editor."""

    output: str
    content: list[ToolCallContent] = field(default_factory=list)
    raw_output: Any = None
    locations: list[ToolCallLocation] | None = None
    failed: bool = False
    """Ran, but failed (e.g. a command with a non-zero exit): shown as ``failed``; the model reads output."""
    running: bool = False
    """Still at work after answering the model (a background command): the call stays ``in_progress``,
    and whoever runs that work ends it later."""


@dataclass
class Plan:
    """What a call will do, worked out before doing it."""

    title: str
    execute: Callable[[], Awaitable[ToolResult]]
    locations: list[ToolCallLocation] = field(default_factory=list)
    preview: list[ToolCallContent] = field(default_factory=list)
    """Shown in the permission request and the tool call (diffs for edits)."""
    mutating: bool = False
    """Changes something: needs permission according to the session's mode."""
    kind: ToolKind | None = None
    """What this call really does, when it differs from the tool's kind (a patch that deletes files is a
    ``delete``); permissions decide by it."""
    outside: bool = False
    """Touches a path outside the roots (a read that needs the user's leave)."""
    network: bool = False
    """Reaches out to the network, changing nothing here (``fetch``): asked for as a change is, but not
    refused in ``read-only`` mode, which asks instead (what the model reads there is the user's call)."""
    confined: bool = False
    """Runs confined to the roots, by the OS (a ``workspace`` command on a machine that can hold it):
    the ``auto`` mode lets it run without asking."""
    permission_key: str = ""
    """What "always allow" remembers, e.g. ``edit`` or ``command:git status``."""
    permission_label: str = ""
    """Human words for that scope, e.g. ``edits inside the workspace`` or ``exactly this command``."""
    grounds: tuple[tuple[str, object], ...] = ()
    """What the call's effect depends on beyond its arguments, as it is now (a command that runs with more
    than the sandbox holds: :func:`refagent.tools.grounds.command_grounds`): a remembered "always allow"
    covers the call only while they are what they were when the user chose it."""
    progress: Callable[[], list[ToolCallContent]] | None = None
    """What the call has produced so far, shown while it runs (a local command's output); ``None``: nothing
    to show before it ends."""
    runs_later: str = ""
    """A file this call changes that git, an editor, CI or refagent itself runs later, as shown with why
    (``.vscode/tasks.json: git or an editor runs it``):
    ``accept-edits`` and ``auto`` ask for it (set by the runner, :func:`refagent.tools.permissions.runs_later`)."""


CANCEL_NOTE = "refagent tool result: "
"""A note (``BaseException.add_note``) with this prefix on the cancellation a call re-raises says what the
cancelled call really did (a patch rolled back, a call cut off while it ran): the turn tells the model
that, not "cancelled before it ran" (:func:`cancel_note`)."""


def cancel_note(error: BaseException) -> str | None:
    """What a cancelled call said it did (its :data:`CANCEL_NOTE`), if it said."""
    for note in getattr(error, "__notes__", ()):
        if isinstance(note, str) and note.startswith(CANCEL_NOTE):
            return note[len(CANCEL_NOTE) :]
    return None


READ_FILES_SCOPE = "read-outside:"
READ_TREE_SCOPE = "read-outside-tree:"


def outside_read_scope(directory: str, *, tree: bool) -> tuple[str, str]:
    """The ``(permission_key, permission_label)`` of a read outside the roots: the files directly in
    ``directory`` (``read_file``, a search of one file), or with ``tree`` everything beneath it (a
    search or listing of the directory). Whatever the tool, the same read gets the same scope, and the
    label says exactly what "always" would remember (:func:`scope_covers` decides what it then covers)."""
    if tree:
        return f"{READ_TREE_SCOPE}{directory}", f"reads of anything under {directory}"
    return f"{READ_FILES_SCOPE}{directory}", f"reads of the files directly in {directory}"


def scope_covers(remembered: str, key: str) -> bool:
    """Whether a remembered "always" scope covers a call's ``permission_key``: the same scope, or a read
    of anything under a directory covering reads in it and in its subdirectories. Nothing else widens."""
    if remembered == key:
        return True
    if not remembered.startswith(READ_TREE_SCOPE):
        return False
    base = remembered[len(READ_TREE_SCOPE) :].rstrip("/")
    for prefix in (READ_TREE_SCOPE, READ_FILES_SCOPE):
        if key.startswith(prefix):
            directory = key[len(prefix) :]
            return directory == base or directory.startswith(base + "/") or base == ""
    return False


class Tool(Protocol):
    """A tool: a name, a JSON schema for its arguments, an ACP kind, and :meth:`prepare`."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind
    silent: bool

    def title(self, args: dict[str, Any]) -> str:
        """A short human title from the (already schema-checked) arguments, before any I/O."""
        ...

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        """Check and plan the call without side effects. Raise ToolError for the model to fix."""
        ...


class BaseTool:
    """Defaults for tools; subclasses set the class attributes and implement :meth:`prepare`."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    kind: ClassVar[ToolKind] = "other"
    silent: ClassVar[bool] = False
    """No ``tool_call`` on the wire (``update_plan`` shows as a plan, not as a call)."""

    def title(self, args: dict[str, Any]) -> str:
        return self.name

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        raise NotImplementedError
