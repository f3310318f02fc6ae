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
local disk, the editor's terminals or local processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from refagent.acp.types import ToolCallContent, ToolCallLocation, ToolKind
from refagent.sandbox.confinement import Level

NAME_CHARS = "A-Za-z0-9_-"
MAX_NAME_LENGTH = 64
"""What OpenAI-compatible endpoints accept as a function (tool) name: these characters, at most this many."""


class TextFiles(Protocol):
    """Reading and writing whole text files: the editor's buffers (``fs/*``) or the local disk.

    Paths are absolute and already checked by the path policy. ``read_text`` raises
    ``FileNotFoundError`` for a missing file and :class:`~refagent.errors.ToolError` for anything else
    the model should hear about (binary content, an editor error).
    """

    async def read_text(self, path: str) -> str: ...

    async def write_text(self, path: str, content: str) -> None: ...


class Disk(TextFiles, Protocol):
    """The local file system (:class:`refagent.sandbox.local_fs.LocalFileSystem`).

    Listing, searching, deleting and moving always happen here: ACP gives editors no such methods.
    ``write_text`` is atomic (temporary file in the same directory, fsync, rename, mode bits kept).
    """

    async def kind(self, path: str) -> Literal["file", "dir", "other"] | None:
        """What is at ``path`` without following a final symlink (``other``); None if nothing."""
        ...

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file, a symlink (not its target) or, with ``recursive``, a directory tree."""
        ...

    async def move(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination``; refuses to overwrite an existing destination."""
        ...


@dataclass(frozen=True, slots=True)
class CommandResult:
    output: str
    exit_code: int | None
    signal: str | None = None
    truncated: bool = False
    timed_out: bool = False


class Terminals(Protocol):
    """Running a shell command: an editor terminal (``terminal/*``) or a local process group, confined
    at a level (:mod:`refagent.sandbox.confinement`)."""

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: Callable[[str], Awaitable[None]] | None = None,
        *,
        sandbox: Level = "workspace",
    ) -> CommandResult:
        """Run ``command`` through the shell in ``cwd``, confined at level ``sandbox`` as far as
        :meth:`not_confined` allows; kill it after ``time_limit`` s.

        ``on_start(terminal_id)`` is called once an editor terminal exists (so the tool call can embed
        it); local processes have no terminal id and never call it. Cancellation kills the command.
        """
        ...

    def not_confined(self, level: Level) -> list[str]:
        """What a command at ``level`` would *not* be confined from here, in words for the user
        ([] when it is confined as the level promises)."""
        ...


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """A path the policy has resolved (absolute, normalised, symlinks followed) and placed."""

    path: str
    inside: bool
    """Inside one of the session roots."""
    display: str
    """For titles: relative to the cwd when inside it, else absolute."""


class PathPolicy(Protocol):
    """The sandbox boundary (implemented in :mod:`refagent.sandbox.policy`)."""

    def resolve(self, path: str, *, follow_symlinks: bool = True) -> ResolvedPath:
        """Resolve a model-given path (relative to the session cwd or absolute). Raises ToolError if invalid.

        ``follow_symlinks=False`` resolves every component but the last, for acting on a link itself."""
        ...

    def check_write(self, path: str, *, follow_symlinks: bool = True) -> ResolvedPath:
        """Resolve a path about to be created, changed, deleted or moved; ToolError if outside the roots
        or inside ``.git``. ``follow_symlinks=False``: the link itself is what changes (delete, move)."""
        ...


class ReadTracker(Protocol):
    """What the model last saw of each file, so an edit of a file changed since is refused."""

    def saw(self, path: str, content: str) -> None: ...

    def check_fresh(self, path: str, current: str) -> None:
        """Raise ToolError if ``path`` was read and has changed since (tell the model to read it again)."""
        ...

    def forget(self, path: str) -> None:
        """``path`` is gone (deleted): a file made there later is new."""
        ...

    def moved(self, source: str, destination: str) -> None:
        """What the model saw of ``source`` (a file or a tree) is now at ``destination``."""
        ...


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
    """The local file system: listing, grep, delete and move always happen on disk."""
    terminals: Terminals
    reads: ReadTracker
    send_update: Callable[[dict[str, Any]], Awaitable[None]]
    current_call_id: str = ""
    """The ``toolCallId`` of the call being prepared or run: the runner gives each call its own copy of
    the context (``dataclasses.replace``), so a tool can update its own call (e.g. embed a terminal)."""


@dataclass
class ToolResult:
    """The outcome of a call: ``output`` for the model; ``content`` and ``raw_output`` for the editor."""

    output: str
    content: list[ToolCallContent] = field(default_factory=list)
    raw_output: Any = None
    locations: list[ToolCallLocation] | None = None
    failed: bool = False
    """Ran, but failed (e.g. a command with a non-zero exit): shown as ``failed``; the model reads output."""


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
    confined: bool = False
    """Runs confined to the roots, by the OS (a ``workspace`` command on a machine that can hold it):
    the ``auto`` mode lets it run without asking."""
    permission_key: str = ""
    """What "always allow" remembers, e.g. ``edit`` or ``command:git status``."""
    permission_label: str = ""
    """Human words for that scope, e.g. ``edits inside the workspace`` or ``exactly this command``."""


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
