"""The seams between the tools and what they act on: the protocols every file system, terminal, path
policy, read tracker, watcher and way of asking the user implements, local (this package) or the
editor's (:mod:`refagent.sandbox.editor`).

The tools see only these protocols (through :class:`refagent.tools.base.ToolContext`), never an
implementation; a session chooses the implementations from the client's capabilities
(:mod:`refagent.session.workspace`). This module imports nothing from ``refagent.tools``: the sandbox sits
below the tools.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

# The levels and what a sandbox holds commands to, at the seams' door too (refagent.sandbox.holding)
from refagent.sandbox.holding import LEVELS as LEVELS
from refagent.sandbox.holding import NOTHING_HELD as NOTHING_HELD
from refagent.sandbox.holding import Holding as Holding
from refagent.sandbox.holding import Level as Level

if TYPE_CHECKING:
    from anyio.abc import TaskGroup


class TextFiles(Protocol):
    """Reading and writing whole text files: the editor's buffers (``fs/*``) or the local disk.

    Paths are absolute and already checked by the path policy. ``read_text`` raises
    ``FileNotFoundError`` for a missing file and :class:`~refagent.errors.ToolError` for anything else
    the model should hear about (binary content, an editor error); it may return a :class:`FromDisk`
    when the editor failed and the disk answered instead.
    """

    async def read_text(self, path: str) -> str: ...

    async def write_text(self, path: str, content: str) -> None: ...


class FromDisk(str):
    """Text read from the sandbox's disk because the editor could not give its copy: :attr:`note` says so,
    for the model (the editor's unsaved changes may be missing). A ``str`` in every other way."""

    note: str

    def __new__(cls, text: str, note: str) -> FromDisk:
        made = super().__new__(cls, text)
        made.note = note
        return made


class Disk(TextFiles, Protocol):
    """The local file system (:class:`refagent.sandbox.disk.local_fs.LocalFileSystem`).

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

    async def preview_tree(self, path: str) -> TreePreview:
        """What the directory ``path`` holds (links not followed), for the preview of its deletion or move:
        counted up to a limit, stopping at the first ``.git``."""
        ...

    async def link_target(self, path: str) -> str | None:
        """What the symbolic link ``path`` holds (its target as written); None if it cannot be read."""
        ...

    async def read_start(self, path: str, max_bytes: int, *, within: Sequence[str] = ()) -> bytes | None:
        """The first ``max_bytes + 1`` bytes of the regular file at ``path`` (a final link followed), so the
        caller can tell a file over the cap; None when it is not a regular file, cannot be read, or (given
        ``within``, resolved directories) its real path lies in none of them when it is opened. For the
        files read before anyone is asked (``AGENTS.md``, git's ``HEAD``): a FIFO or a device is never
        waited on, nothing past the cap is read."""
        ...


@dataclass
class TreePreview:
    """What a directory holds, for the preview of its deletion or move (:meth:`Disk.preview_tree`)."""

    files: int = 0
    dirs: int = 0
    size: int = 0
    """Bytes, the files' own (links not followed)."""
    complete: bool = True
    """False: the count stopped early (a huge tree, or at a ``.git``): the numbers are "more than"."""
    entries: list[str] = field(default_factory=list)
    """The first few entries, relative to the directory, in a stable order."""
    git: str | None = None
    """The first ``.git`` in the tree (relative to it), if any: then the count stopped there."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    output: str
    exit_code: int | None
    signal: str | None = None
    truncated: bool = False
    timed_out: bool = False


OnStart = Callable[[str], Awaitable[None]] | None
WatchOutput = Callable[[Callable[[], str]], None] | None
"""Given, once a local process runs, a function that returns its output so far (an editor's terminal shows
its own: it is never called then)."""
"""What :meth:`Terminals.run` calls with an editor terminal's id once it exists, so that a tool call can
embed it (None: nothing to call)."""


class Terminals(Protocol):
    """Running a shell command: an editor terminal (``terminal/*``) or a local process group, confined
    at a level (:mod:`refagent.sandbox.confine.confinement`)."""

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: OnStart = None,
        *,
        sandbox: Level = "workspace",
        watch_output: WatchOutput = None,
    ) -> CommandResult:
        """Run ``command`` through the shell in ``cwd``, held at level ``sandbox`` as far as the sandbox can
        (its :class:`Holding` says how far); kill it after ``time_limit`` s.

        ``on_start(terminal_id)`` is called once an editor terminal exists (so the tool call can embed
        it); local processes have no terminal id and never call it: they call ``watch_output`` instead,
        with what gives their output so far. Cancellation kills the command.
        """
        ...

    async def start(
        self, command: str, cwd: str, tasks: TaskGroup, *, sandbox: Level = "workspace", time_limit: float | None = None
    ) -> Job:
        """Start ``command`` in the background, confined as :meth:`run` confines it, and return once it runs
        (an editor terminal exists, or a local process). It is watched by a task in ``tasks``: it runs until
        it ends, :meth:`Job.stop` stops it, ``time_limit`` s pass (None: no limit), or ``tasks`` is
        cancelled, which kills it. Raises :class:`~refagent.errors.ToolError` if it cannot start."""
        ...


class Job(Protocol):
    """A command running in the background (:meth:`Terminals.start`)."""

    terminal_id: str | None
    """The editor terminal that shows it live (None: a local process)."""
    result: CommandResult | None
    """How it ended, once it has (None while it runs). Its ``output`` is what was kept of all of it."""

    async def wait(self) -> CommandResult:
        """Wait until it has ended, and return :attr:`result`."""
        ...

    async def output(self) -> str:
        """All of its output kept so far (the head and tail of a long one, a marker between)."""
        ...

    async def new_output(self) -> str:
        """What it printed since the last call (the first: since it started), stdout and stderr merged;
        a long stretch keeps its head and tail with a marker between. After its end, the rest."""
        ...

    async def stop(self) -> None:
        """Kill it (the whole process group, or the editor's terminal) and wait for its end; nothing if it
        has ended already."""
        ...


OutputMode = Literal["content", "files", "count"]


@dataclass(frozen=True, slots=True)
class Query:
    """One grep: ``pattern`` (a regex in ripgrep's dialect, or text with ``literal``), ``context`` lines around
    each match (content mode), what to give back (``mode``) and ripgrep's ``-g`` globs (gitignore style, a
    ``!`` excludes; later ones win)."""

    pattern: str
    literal: bool
    case_insensitive: bool
    context: int
    mode: OutputMode
    globs: list[str]


@dataclass
class Hits:
    """What a search found, by path relative to the searched directory, in no order."""

    lines: dict[str, list[tuple[int, bool, str]]] = field(default_factory=dict)
    """Content mode: (line number, is a match, text) per file, in line order."""
    counts: dict[str, int] = field(default_factory=dict)
    """Matching lines per file (every mode)."""
    complete: bool = True
    """False: the search stopped early (too many matches); what was found is still right."""
    matches: int = 0

    def drop(self, path: str) -> None:
        self.matches -= self.counts.pop(path, 0)
        self.lines.pop(path, None)


class Search(Protocol):
    """Finding files and text on the sandbox's disk (:class:`refagent.sandbox.search.dispatch.LocalSearch`): what
    ``grep`` and ``glob`` run. Directories are absolute and already checked by the path policy; the engine
    skips ``.git``, what ``.gitignore`` files ignore, and anything that is not a regular file or a
    directory, and follows a linked ignore file only where it leads inside ``roots`` or ``directory``. A
    pattern the engine cannot take raises :class:`~refagent.errors.ToolError`."""

    async def grep(self, query: Query, directory: str, target: str, *, roots: Sequence[str]) -> Hits:
        """Search ``target`` (``.`` for all of ``directory``, else the name of a file in it, searched even
        if ignored) for ``query``."""
        ...

    async def files(self, globs: list[str], directory: str, *, roots: Sequence[str]) -> tuple[list[str], bool]:
        """The files under ``directory`` that ``globs`` select, relative to it and in no order, and whether
        that is all of them."""
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
    """The sandbox boundary (implemented in :mod:`refagent.sandbox.disk.policy`)."""

    roots: tuple[str, ...]
    """The session roots, resolved (the cwd first)."""
    private: tuple[str, ...]
    """Paths inside the roots that count as outside them (resolved): the agent's own files and the user's
    credentials when a root holds them (a session in ``$HOME``). Empty for none. A read there asks, a write
    is refused, and a search of the roots leaves them out."""

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


class Watcher(Protocol):
    """Notices files changed under the roots by anyone but the agent
    (:class:`refagent.sandbox.disk.watcher.RootWatcher`)."""

    async def run(self) -> None:
        """Watch until cancelled."""
        ...

    def drain(self) -> list[str]:
        """The paths changed since the last call (the model hears of them before its next request)."""
        ...

    def note_own_write(self, path: str) -> None:
        """The agent itself wrote ``path``: not a change to report."""
        ...


QuestionOutcome = Literal["answered", "declined", "dismissed", "unavailable"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What came of a question (:class:`Questions`)."""

    outcome: QuestionOutcome
    """``answered``: ``choice`` and/or ``text`` is set; ``declined``: the user chose not to answer;
    ``dismissed``: the question was closed without an answer (or the editor's answer said nothing usable);
    ``unavailable``: it could not be asked here (``reason`` says why)."""
    choice: str | None = None
    """The choice the user picked, exactly as offered."""
    text: str | None = None
    """What the user typed: the free-text answer, or an answer besides the choices."""
    reason: str = ""
    """Why it could not be asked, or what was odd about the editor's answer."""


class Questions(Protocol):
    """Asking the user a question and waiting for the answer: the editor's form (``elicitation/create``)
    or, for a few choices, its permission dialog (:class:`refagent.sandbox.editor.questions.EditorQuestions`)."""

    async def ask(
        self, question: str, choices: Sequence[str] = (), *, allow_other: bool = False, tool_call_id: str | None = None
    ) -> Answer:
        """Ask ``question``: pick one of ``choices`` (none: a free-text answer), or with ``allow_other``
        type another answer besides them. ``tool_call_id``: the call the question belongs to.

        An editor's error is an ``unavailable`` answer, not an exception. Cancellation propagates (the
        editor is told to withdraw the question); an editor's "the turn was cancelled" cancels the turn.
        """
        ...
