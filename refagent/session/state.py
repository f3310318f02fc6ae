"""One session's state: its roots, mode, model, conversation, saved records, and the turns running in it.

A session is opened by :class:`refagent.session.manager.SessionManager` (``session/new``, ``load``,
``resume``) and lives until it is closed or the agent exits. It owns its fields: the manager and the prompt
handling (:mod:`refagent.session.prompting`) call its methods, they do not set them.

Its prompts run one at a time: a prompt that arrives while a turn is running waits for it (FIFO). Editors
commonly send ``session/cancel`` and then a new prompt at once; queueing lets the new prompt start as soon
as the cancelled turn has answered, instead of failing. ``session/cancel`` cancels the running turn *and*
the prompts queued behind it: the user asked to stop.

Everything the session shows goes out through :meth:`Session.send_update`: to the client at once (its
:class:`~refagent.acp.client.SessionClient`, the one way to the editor), and, when it is part of the visible
history, to the session's files (its :class:`~refagent.persistence.recorder.Recorder`). What is news about
this run and not the thread (a notice, a replay) goes to ``session.client.send_update`` alone.

A session answers its ``session/new`` (``load``, ``resume``) before it has a workspace: the response needs
only its state, its record file, its modes and its config options. Its workspace (its tools, the sandbox,
the editor-backed files and terminals, the file watcher) and its MCP servers are attached after the
response (:meth:`Session.attach`), and then its announcements are sent (:meth:`Session.settled`). What
needs the workspace (a prompt, ``/undo``, a resource link) waits for that with :meth:`Session.ready`; tests
that look at :attr:`Session.workspace`, :attr:`Session.tools` or :attr:`Session.mcp` right after
``session/new`` await it too.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from refagent.acp import updates
from refagent.acp.errors import InternalError, InvalidParams
from refagent.acp.requests import ClientSystemPrompt
from refagent.llm.pool import require_key
from refagent.llm.profiles import ModelProfile
from refagent.llm.retry import RetryPolicy
from refagent.persistence.conversation import Conversation
from refagent.persistence.reader import StoredSession
from refagent.persistence.recorder import Recorder
from refagent.persistence.writer import SessionLog
from refagent.sandbox.holding import NOTHING_HELD, Holding
from refagent.session import options
from refagent.session.modes import DEFAULT_MODE, MODE_IDS, modes_for
from refagent.session.steering import Steers
from refagent.session.undo import UndoLog
from refagent.session.usage import UsageMeter

if TYPE_CHECKING:  # annotations: a session is answered for before its workspace and its tools are loaded
    from refagent.acp.client import SessionClient
    from refagent.acp.types import ClientCapabilities, ConfigOption, ContentBlock
    from refagent.llm.protocol import ModelClient
    from refagent.mcp import McpHub
    from refagent.session.compaction import AutoCompaction, Compactor
    from refagent.session.prompt_commands import PromptCommand
    from refagent.session.turn import Turn
    from refagent.session.workspace import Workspace
    from refagent.tools.base import Plan
    from refagent.tools.jobs import BackgroundJobs
    from refagent.tools.runner import Tools

log = logging.getLogger(__name__)

Done = TypeVar("Done")
"""What a turn's work returns (:meth:`Session.run_turn`)."""


class Session:
    """One ACP session, talking to the editor through ``client``.
    ``holding``: how far the sandbox its workspace will have holds commands (what its modes describe)."""

    def __init__(
        self,
        *,
        session_id: str,
        cwd: str,
        additional_directories: list[str],
        client: SessionClient,
        profiles: list[ModelProfile],
        profile_id: str,
        log: SessionLog | None = None,
        holding: Holding | None = None,
    ) -> None:
        self.id = session_id
        self.cwd = cwd
        self.additional_directories = additional_directories
        self.client = client
        """The editor, as this session calls it: updates, permissions, files, terminals, questions."""
        self.client_capabilities: ClientCapabilities = client.capabilities
        self.profiles = profiles
        self.profile_id = profile_id
        self.log = log
        """Where the session is saved (None: not saved)."""
        self.recorder = Recorder(session_id, log)
        self.history = Conversation([], log)
        """The conversation in the model's (Chat Completions) format, without the system prompt."""
        self.mode_id = DEFAULT_MODE
        self.reasoning_effort: str | None = self.profile.default_reasoning_effort
        """The ``thought_level`` chosen, when the profile's model takes a reasoning effort (else None)."""
        self.holding = holding if holding is not None else NOTHING_HELD
        """How far the session's sandbox holds its commands (the mode descriptions say it)."""
        self.meter = UsageMeter()
        """Tokens and the cumulative cost of the session's model responses."""
        self.title: str | None = None
        self.updated_at: str | None = None
        self.archived = False
        """Loaded while archived (``session/archive``): it stays so, and is saved so, until unarchived."""
        self.steers = Steers()
        """Messages sent while a turn runs, for that turn (:mod:`refagent.session.steering`)."""
        self._auto_compaction: AutoCompaction | None = None
        """Where automatic compaction last failed, kept from one turn's compactor to the next (made with the
        first compactor: its module loads after the session/new answer)."""
        self.client_prompt: ClientSystemPrompt | None = None
        """The client's system prompt (unstable ``systemPrompt``), saved: a load, resume or fork that sends
        none keeps it (:meth:`use_client_prompt`)."""
        self.turns = 0
        """Prompt turns so far (saved sessions count on from where they were)."""
        self.undo_log = UndoLog(self.save)
        """Files the agent changed, per turn (``change`` records): what ``/undo`` restores
        (:mod:`refagent.session.undo`)."""
        self.workspace: Workspace | None = None
        """The session's tools and their backends (:func:`refagent.session.workspace.build`), once attached
        after the response that opened the session (:meth:`ready` waits for it)."""
        self.mcp: McpHub | None = None
        self.prompt_commands: list[PromptCommand] = []
        """The user's own slash commands for this session (:mod:`refagent.session.prompt_commands`)."""
        """The session's MCP servers, if the client gave any (attached with the workspace)."""
        self.changed_files: Callable[[], list[str]] | None = None
        """Files changed outside the agent since last asked (the root watcher), if one runs."""
        self.background = anyio.CancelScope()
        """Cancels the session's file watcher when it closes."""
        self.mcp_scope = anyio.CancelScope()
        """Cancels the session's MCP servers when it closes."""
        self.closed = False
        """Whether ``session/close`` (or a reopening) has closed it."""
        self._settled = anyio.Event()
        self._problem: str | None = None
        """Why its workspace could not be built, if it could not."""
        self._saved: StoredSession | None = None
        """A loaded session's records, until its conversation is read from them (when a prompt needs it)."""
        self._turn_lock = anyio.Lock()
        self._turn_scopes: set[anyio.CancelScope] = set()

    async def send_update(self, update: dict[str, Any]) -> None:
        """Send one ``session/update`` to the client, and record it if it is part of the visible history."""
        await self.client.send_update(update)
        self.recorder.record(update)

    @property
    def notices(self) -> bool:
        """The client shows ``notice`` updates (``session.notices``): news about this run of the agent."""
        return _session_capability(self.client_capabilities, "notices")

    @property
    def compaction_updates(self) -> bool:
        """The client shows ``compaction_update`` updates (``session.compaction``)."""
        return _session_capability(self.client_capabilities, "compaction")

    @property
    def activity(self) -> Literal["idle", "running", "waiting"]:
        """What ``session/status`` says of it beside ``open``: ``running`` while a turn runs (a prompt's or a
        slash command's), ``waiting`` while that turn waits on the user's answer (a permission, a form),
        else ``idle``."""
        if not self._turn_lock.locked():
            return "idle"
        return "waiting" if self.client.asking else "running"

    @property
    def roots(self) -> list[str]:
        """The sandbox boundary: ``[cwd, *additionalDirectories]``."""
        return [self.cwd, *self.additional_directories]

    @property
    def profile(self) -> ModelProfile:
        return next(p for p in self.profiles if p.id == self.profile_id)

    @property
    def jobs(self) -> BackgroundJobs | None:
        """The session's background commands (:mod:`refagent.tools.jobs`); None before its workspace."""
        return self.workspace.jobs if self.workspace is not None else None

    @property
    def tools(self) -> Tools:
        """What a turn's tool calls run through: the workspace's runner; none before it is attached."""
        if self.workspace is not None:
            return self.workspace.runner
        from refagent.tools.runner import NoTools  # here: the tools' modules load after the session/new answer

        return NoTools()

    # -- being opened --------------------------------------------------------------------------

    def restore(self, stored: StoredSession) -> None:
        """Take the saved state of a session being loaded or resumed (what of it still applies: a mode or
        profile this configuration no longer has is left at the default). Its conversation is read from
        its records later (:meth:`read_conversation`)."""
        self.title = stored.title
        self.updated_at = stored.updated_at
        self.turns = stored.turns
        self.archived = stored.archived
        if stored.mode_id in MODE_IDS:
            self.mode_id = stored.mode_id
        if stored.profile_id in {p.id for p in self.profiles}:
            self.profile_id = stored.profile_id
            # The level was set from the agent's default profile when the session was made; the saved
            # session's model may take other levels, or none (its thought_level option, its requests).
            self.reasoning_effort = self.profile.default_reasoning_effort
        if stored.reasoning_effort in self.profile.reasoning_efforts:  # the level chosen, if it still applies
            self.reasoning_effort = stored.reasoning_effort
        if stored.system_prompt is not None:
            self.client_prompt = ClientSystemPrompt(*stored.system_prompt)
        self._saved = stored

    def attach(
        self, workspace: Workspace, *, mcp: McpHub | None, changed_files: Callable[[], list[str]] | None
    ) -> None:
        """Give the session its tools and their backends, its MCP servers and its watcher's changed files."""
        self.workspace = workspace
        self.mcp = mcp
        self.changed_files = changed_files
        self.holding = workspace.sandbox.holding
        if self._saved is not None and workspace.context.plans is not None:  # the plans it had, to go on with
            workspace.context.plans.restore(self._saved.plan_updates())

    def settled(self, problem: str | None = None) -> None:
        """The work after the session's response is done: its workspace is attached, or ``problem`` says why
        it could not be built; its announcements are sent. What waits in :meth:`ready` goes on."""
        self._problem = problem
        self._settled.set()

    async def wait_settled(self) -> None:
        """Wait until the work after the session's response is done (:meth:`settled`), whatever came of it:
        what the session says later (a mode switched) then follows its announcements."""
        await self._settled.wait()

    async def ready(self) -> Workspace | None:
        """Wait until the session is set up after its response (:meth:`settled`), and return its workspace:
        a prompt, ``/undo`` and a resource link need it, and tests that inspect the session right after
        ``session/new`` await this first. None if the session was closed before it had one. Raises
        :class:`~refagent.acp.errors.InternalError` (``-32603``) if its workspace could not be built."""
        await self._settled.wait()
        if self._problem is not None:
            raise InternalError(
                f"This session could not be set up ({self._problem}); see the agent's log. Open a new session."
            )
        return self.workspace

    async def read_conversation(self) -> None:
        """Give a loaded session its model-facing conversation and ``/undo`` records, parsed from its records
        (the bulk of a long session's file: in a worker thread) when a prompt or command first needs them,
        under the turn lock. Not when it is loaded: a session opened to be looked at, or the replay a client
        waits for, does not pay for it."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        try:
            messages, changes, starts = await anyio.to_thread.run_sync(saved.model_state)
        except Exception:  # not expected (bad records are skipped); the session goes on without them
            log.exception("could not read the conversation of session %s", self.id)
            messages, changes, starts = [], [], {}
        self.history.restore(messages, starts)
        self.undo_log.restore(changes)

    # -- modes and config options ------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """``modes`` and ``configOptions``, as the responses that open the session carry them
        (:func:`refagent.session.options.state`, which start-up's ``session/new`` answer uses too)."""
        return options.state(self.mode_id, self.holding, self.profiles, self.profile_id, self.reasoning_effort)

    def config_options(self) -> list[ConfigOption]:
        """The complete option list (:func:`refagent.session.options.config_options`)."""
        return options.config_options(
            self.mode_id, modes_for(self.holding), self.profiles, self.profile_id, self.reasoning_effort
        )

    async def set_mode(self, mode_id: str) -> None:
        """Switch mode; announces it with ``current_mode_update`` and ``config_option_update`` if it changed."""
        if mode_id not in MODE_IDS:
            raise InvalidParams(f"Invalid params: unknown mode {mode_id!r}; available: {', '.join(sorted(MODE_IDS))}")
        if mode_id == self.mode_id:
            return
        self.mode_id = mode_id
        self.save_state()
        await self.send_update(updates.current_mode(mode_id))
        await self.send_update(updates.config_options(self.config_options()))

    async def set_config_option(self, config_id: str, value: str) -> list[ConfigOption]:
        """Apply ``session/set_config_option``; returns the complete option list. Switching to a model whose
        key is missing is ``-32000`` (authentication required); an unknown option or value is ``-32602``."""
        if config_id == "mode":
            if value not in MODE_IDS:
                raise InvalidParams(f"Invalid params: unknown mode {value!r}; available: {', '.join(sorted(MODE_IDS))}")
            if value != self.mode_id:
                self.mode_id = value
                self.save_state()
                await self.send_update(updates.current_mode(value))
        elif config_id == "model":
            chosen = next((p for p in self.profiles if p.id == value), None)
            if chosen is None:
                known = ", ".join(p.id for p in self.profiles)
                raise InvalidParams(f"Invalid params: unknown model {value!r}; available: {known}")
            require_key(chosen)
            self.profile_id = value
            if self.reasoning_effort not in chosen.reasoning_efforts:  # this model takes other levels, or none
                self.reasoning_effort = chosen.default_reasoning_effort
            self.save_state()
        elif config_id == "thought_level" and self.profile.reasoning_efforts:
            if value not in self.profile.reasoning_efforts:
                known = ", ".join(self.profile.reasoning_efforts)
                raise InvalidParams(f"Invalid params: unknown reasoning effort {value!r}; available: {known}")
            self.reasoning_effort = value
            self.save_state()
        else:
            known = ", ".join(o["id"] for o in self.config_options())
            raise InvalidParams(f"Invalid params: unknown config option {config_id!r}; available: {known}")
        return self.config_options()

    # -- records -------------------------------------------------------------------------------

    def save(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.append(record)

    def save_state(self) -> None:
        """Record the session's title, mode, model, reasoning effort, client system prompt, time, turn count
        and archived mark, whole (a ``meta`` record)."""
        prompt = self.client_prompt
        self.save(
            {
                "kind": "meta",
                "title": self.title,
                "modeId": self.mode_id,
                "profileId": self.profile_id,
                "reasoningEffort": self.reasoning_effort,
                "systemPrompt": {"mode": prompt.mode, "text": prompt.text} if prompt is not None else None,
                "updatedAt": self.updated_at,
                "turns": self.turns,
                "archived": self.archived,
            }
        )

    def use_client_prompt(self, prompt: ClientSystemPrompt | None) -> None:
        """The client's system prompt sent with the request that opened the session: it replaces the saved
        one, and is saved (None: a client that sent none keeps what the session has)."""
        if prompt is not None and prompt != self.client_prompt:
            self.client_prompt = prompt
            self.save_state()

    def begin_turn(self, typed: Sequence[ContentBlock], message_id: str) -> None:
        """A prompt turn starts with the user's words ``typed``: it is counted (its changes are recorded under
        its number), the words join the visible history, and the conversation is marked where ``/rewind``
        can take it back to."""
        self.turns += 1
        self.save_state()
        self.record_prompt(typed, message_id)
        self.history.mark_turn(self.turns)

    def record_prompt(self, blocks: Sequence[ContentBlock], message_id: str) -> None:
        """The user's prompt joins the visible history (the client shows it itself, so it is not sent)."""
        for block in blocks:
            self.recorder.record(updates.user_message_chunk(block, message_id))
        self.recorder.flush()

    def touch(self, stamp: str, title: str | None = None) -> bool:
        """The session was used at ``stamp``; it takes ``title`` if it has none yet. Returns whether it
        was named now."""
        self.updated_at = stamp
        named = self.title is None and bool(title)
        if named:
            self.title = title
        self.save_state()
        return named

    def before_change(self, kind: str, plan: Plan) -> None:
        """Before a tool changes files: what each file is and will be, recorded for ``/undo`` under the turn
        running now, before anything is written (:meth:`refagent.session.undo.UndoLog.record`)."""
        self.undo_log.record(self.turns, kind, plan)

    # -- turns ------------------------------------------------------------------------------

    async def run_turn(self, work: Callable[[], Awaitable[Done]]) -> Done | None:
        """Run ``work`` as the session's turn (a prompt's, or a slash command's): after the turns queued before
        it (:attr:`turn_lock`), with the conversation read from the session's records, in a cancel scope that
        :meth:`cancel` reaches while it waits or runs. What ``work`` returns; None when it was cancelled (the
        caller answers ``cancelled``). When it ends, what it showed is recorded whole (:meth:`Recorder.settle`)."""
        scope = anyio.CancelScope()
        self._turn_scopes.add(scope)
        try:
            with scope:
                async with self._turn_lock:
                    await self.read_conversation()
                    return await work()
            return None
        finally:
            self._turn_scopes.discard(scope)
            self.recorder.settle()

    def new_turn(
        self, model: ModelClient, max_requests: int, system_prompt: str, retry: RetryPolicy | None = None
    ) -> Turn:
        """The session's turn as it is now, on ``model`` with at most ``max_requests`` model requests: its
        conversation, tools, reasoning effort, usage meter, compaction, notices, the files changed outside it,
        its background commands' news, the messages that steer it, and how long the model may be silent
        before the user hears of the wait (``retry``'s; ``None``: the default)."""
        retry = retry or RetryPolicy()
        from refagent.session.turn import Turn  # here: the turn's modules load after the session/new answer (24 ms)

        return Turn(
            model=model,
            history=self.history,
            send_update=self.send_update,
            system_prompt=system_prompt,
            tools=self.tools,
            max_requests=max_requests,
            usage=functools.partial(self.meter.update, profile=self.profile),
            compactor=self.compactor(model),
            notices=self.notices,
            reasoning_effort=self.reasoning_effort,
            changed_files=self.changed_files,
            background_news=self.jobs.news if self.jobs is not None else None,
            steers=self.steers,
            cache_key=self.id,
            quiet_after=retry.quiet_notice_after(),
            stall_seconds=retry.stall_seconds,
        )

    def compactor(self, model: ModelClient) -> Compactor:
        """What compacts the session's conversation on ``model`` (automatically in a turn, or for ``/compact``)."""
        from refagent.session.compaction import AutoCompaction, Compactor  # here: as new_turn's

        if self._auto_compaction is None:
            self._auto_compaction = AutoCompaction()
        return Compactor(
            model,
            self.history,
            self.send_update,
            lambda: self.profile.context_window,
            updates=self.compaction_updates,
            auto=self._auto_compaction,
        )

    @property
    def turn_lock(self) -> anyio.Lock:
        return self._turn_lock

    def cancel(self) -> None:
        """``session/cancel``: the running turn and the prompts queued behind it end as ``cancelled``."""
        for scope in self._turn_scopes:
            scope.cancel()

    def close(self) -> None:
        """``session/close``: stop its turns and background tasks, and close its record file. What waits in
        :meth:`ready` goes on (and finds the session closed)."""
        self.closed = True
        self._settled.set()
        self.cancel()
        self.background.cancel()
        self.mcp_scope.cancel()
        if self.jobs is not None:
            for ended in self.jobs.close():  # killed now: their calls end so in the record
                self.recorder.record(ended)
        if self.log is not None:
            self.recorder.settle()
            self.log.close()


def _session_capability(capabilities: ClientCapabilities, name: str) -> bool:
    """Whether ``clientCapabilities.session.<name>`` is advertised (an object; omitted or null: not)."""
    session = capabilities.get("session")
    return isinstance(session, dict) and isinstance(session.get(name), dict)
