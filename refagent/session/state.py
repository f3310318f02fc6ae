"""One session's state: its roots, mode, model, history, and the turns running in it.

A session is created by ``session/new`` and lives until the agent exits. Its prompts run one at a time:
a prompt that arrives while a turn is running waits for it (FIFO). Editors commonly send
``session/cancel`` and then a new prompt at once; queueing lets the new prompt start as soon as the
cancelled turn has answered, instead of failing. ``session/cancel`` cancels the running turn *and* the
prompts queued behind it: the user asked to stop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from refagent.acp import updates
from refagent.acp.errors import InvalidParams
from refagent.acp.types import ClientCapabilities, ConfigOption, SessionMode, SessionModeState
from refagent.llm.profiles import ModelProfile
from refagent.mcp import McpHub
from refagent.persistence.conversation import Conversation
from refagent.persistence.recorder import Recorder
from refagent.persistence.records import SessionLog, StoredSession
from refagent.sandbox.confinement import Support
from refagent.tools.base import Plan
from refagent.tools.permissions import Permissions
from refagent.tools.protocol import NoTools, ToolRunner


def modes_for(support: Support) -> list[SessionMode]:
    """The modes, each described as it works on this machine (``support``: how commands are confined)."""
    missing = support.missing("workspace")
    gaps = ", ".join(missing)
    if missing:
        auto = (
            f"Edit files inside the workspace without asking. Commands still ask: this machine cannot confine {gaps}."
        )
        full = f"Never ask. Commands are not fully confined on this machine ({gaps})."
    else:
        auto = (
            "Edit files and run sandboxed commands (writes only inside the workspace, no network) without "
            "asking; ask before deletions and before commands that need the network or no sandbox."
        )
        full = "Never ask. Commands still run sandboxed, unless the model asks for network access or none."
    return [
        {"id": "ask", "name": "Ask", "description": "Ask before every edit, deletion, move or command."},
        {
            "id": "accept-edits",
            "name": "Accept edits",
            "description": "Edit files inside the workspace without asking; still ask before commands.",
        },
        {"id": "auto", "name": "Auto", "description": auto},
        {
            "id": "read-only",
            "name": "Read only",
            "description": "Read and search only: every change is refused without asking, so the model can plan.",
        },
        {"id": "full-access", "name": "Full access", "description": full},
    ]


MODES = modes_for(Support(landlock=6, namespaces=True, netns=True))
"""The modes where commands are fully confined (their ids are the same everywhere)."""
DEFAULT_MODE = "ask"
MODE_IDS = frozenset(m["id"] for m in MODES)

SendUpdate = Callable[[dict[str, Any]], Awaitable[None]]

LARGE_AFTER_CHARS = 1 << 20
"""A change record keeps a text written over this size as its digest: ``/undo`` only needs to recognise
it (the file still as the agent left it), and a 20 MB write would otherwise be recorded twice."""


def text_digest(text: str) -> str:
    """SHA-256 of a text as the record holds it (surrogates too: a file name's bytes may carry them)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Session:
    id: str
    cwd: str
    additional_directories: list[str]
    mcp_servers: list[dict[str, Any]]
    client_capabilities: ClientCapabilities
    profiles: list[ModelProfile]
    profile_id: str
    send: SendUpdate
    mode_id: str = DEFAULT_MODE
    support: Support = field(default_factory=Support)
    """How this machine confines the session's commands (the mode descriptions say it)."""
    permissions: Permissions = field(default_factory=Permissions)
    tools: ToolRunner = field(default_factory=NoTools)
    changed_files: Callable[[], list[str]] | None = None
    """Files changed outside the agent since last asked (the root watcher), if one runs."""
    cost: float = 0.0
    """Cumulative model cost of the session, in the profile's currency."""
    history: Conversation = field(default_factory=Conversation)
    """The conversation in the model's (Chat Completions) format, without the system prompt."""
    log: SessionLog | None = None
    """Where the session is saved (None: not saved)."""
    title: str | None = None
    updated_at: str | None = None
    turns: int = 0
    """Prompt turns so far (saved sessions count on from where they were)."""
    changes: list[dict[str, Any]] = field(default_factory=list)
    """Files the agent changed, per turn (``change`` records): what ``/undo`` restores."""
    recorder: Recorder | None = None
    saved: StoredSession | None = None
    """A loaded session's records, until its conversation is read from them (when a prompt needs it)."""
    workspace: Any = None
    """The session's :class:`refagent.session.workspace.Workspace` (tools and their backends)."""
    background: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    mcp: McpHub | None = None
    """The session's MCP servers, if the client gave any."""
    mcp_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Cancels the session's background tasks (the file watcher) when it closes."""
    _turn_lock: anyio.Lock = field(default_factory=anyio.Lock)
    _turn_scopes: set[anyio.CancelScope] = field(default_factory=set)

    @property
    def roots(self) -> list[str]:
        """The sandbox boundary: ``[cwd, *additionalDirectories]``."""
        return [self.cwd, *self.additional_directories]

    @property
    def profile(self) -> ModelProfile:
        return next(p for p in self.profiles if p.id == self.profile_id)

    async def update(self, update: dict[str, Any]) -> None:
        """Send one ``session/update`` for this session."""
        await self.send(update)

    # -- modes and config options ------------------------------------------------------------

    def modes(self) -> SessionModeState:
        return {"currentModeId": self.mode_id, "availableModes": modes_for(self.support)}

    def config_options(self) -> list[ConfigOption]:
        """The complete option list. The mode option mirrors ``modes`` (clients use one or the other)."""
        return [
            {
                "id": "mode",
                "name": "Mode",
                "category": "mode",
                "type": "select",
                "currentValue": self.mode_id,
                "options": [
                    {"value": m["id"], "name": m["name"], "description": m.get("description", "")}
                    for m in modes_for(self.support)
                ],
            },
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": self.profile_id,
                "options": [{"value": p.id, "name": p.name, "description": p.description} for p in self.profiles],
            },
        ]

    async def set_mode(self, mode_id: str) -> None:
        """Switch mode; announces it with ``current_mode_update`` and ``config_option_update`` if it changed."""
        if mode_id not in MODE_IDS:
            raise InvalidParams(f"Invalid params: unknown mode {mode_id!r}; available: {', '.join(sorted(MODE_IDS))}")
        if mode_id == self.mode_id:
            return
        self.mode_id = mode_id
        self.save_state()
        await self.update(updates.current_mode(mode_id))
        await self.update(updates.config_options(self.config_options()))

    async def set_config_option(self, config_id: str, value: object) -> list[ConfigOption]:
        """Apply ``session/set_config_option``; returns the complete option list."""
        if not isinstance(value, str):
            raise InvalidParams(f"Invalid params: option {config_id!r} takes a string value")
        if config_id == "mode":
            if value not in MODE_IDS:
                raise InvalidParams(f"Invalid params: unknown mode {value!r}; available: {', '.join(sorted(MODE_IDS))}")
            if value != self.mode_id:
                self.mode_id = value
                self.save_state()
                await self.update(updates.current_mode(value))
        elif config_id == "model":
            if value not in {p.id for p in self.profiles}:
                known = ", ".join(p.id for p in self.profiles)
                raise InvalidParams(f"Invalid params: unknown model {value!r}; available: {known}")
            self.profile_id = value
            self.save_state()
        else:
            raise InvalidParams(f"Invalid params: unknown config option {config_id!r}; available: mode, model")
        return self.config_options()

    def save(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.append(record)

    def save_state(self) -> None:
        """Record the session's title, mode, model, time and turn count, whole (a ``meta`` record)."""
        self.save(
            {
                "kind": "meta",
                "title": self.title,
                "modeId": self.mode_id,
                "profileId": self.profile_id,
                "updatedAt": self.updated_at,
                "turns": self.turns,
            }
        )

    # -- turns ------------------------------------------------------------------------------

    def open_turn(self) -> anyio.CancelScope:
        """A cancel scope for a prompt, registered so that :meth:`cancel` reaches it while it waits or runs."""
        scope = anyio.CancelScope()
        self._turn_scopes.add(scope)
        return scope

    def close_turn(self, scope: anyio.CancelScope) -> None:
        self._turn_scopes.discard(scope)

    @property
    def turn_lock(self) -> anyio.Lock:
        return self._turn_lock

    def cancel(self) -> None:
        """``session/cancel``: the running turn and the prompts queued behind it end as ``cancelled``."""
        for scope in self._turn_scopes:
            scope.cancel()

    def record_change(self, kind: str, plan: Plan) -> None:
        """Before a change by a tool: what each file is and will be, for ``/undo`` (recorded first, so a
        crash during the write cannot lose the way back)."""
        for content in plan.preview:
            if content["type"] != "diff":
                continue
            change: dict[str, Any] = {
                "kind": "change",
                "turn": self.turns,
                "path": content["path"],
                "before": content.get("oldText"),
            }
            # A patch that deletes or renames files carries that kind for all its diffs: the file it edits
            # still has its new text; the file it removes shows as emptied (newText "").
            after = None if kind in ("delete", "move") and content["newText"] == "" else content["newText"]
            if after is not None and len(after) > LARGE_AFTER_CHARS:
                change["afterSha256"] = text_digest(after)  # undo restores "before"; "after" it only recognises
            else:
                change["after"] = after
            self.changes.append(change)
            self.save(change)
        if kind in ("move", "delete") and not any(c["type"] == "diff" for c in plan.preview):
            # A move, or a deleted directory: no text to restore. Undo says so instead of guessing.
            change = {"kind": "change", "turn": self.turns, "path": plan.title, "unsupported": kind}
            self.changes.append(change)
            self.save(change)

    def settle(self) -> None:
        """The end of a turn: what it showed is recorded whole (:meth:`Recorder.settle`)."""
        if self.recorder is not None:
            self.recorder.settle()

    def close(self) -> None:
        """``session/close``: stop its turns and background tasks, and close its record file."""
        self.cancel()
        self.background.cancel()
        self.mcp_scope.cancel()
        if self.log is not None:
            self.settle()
            self.log.close()
