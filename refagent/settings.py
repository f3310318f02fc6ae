"""What the agent is configured with: :class:`Settings`, and the defaults it starts from.

Kept apart from :mod:`refagent.server.agent` and free of anyio, so that the first answer to an editor
(:mod:`refagent.server.handshake`) can be computed before the event loop and the rest of the agent are loaded.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from refagent.dirs import user_dir
from refagent.llm.profiles import ModelProfile, scripted_profile
from refagent.logs import logger

if TYPE_CHECKING:
    from pathlib import Path

    from refagent.config.limits import SubagentLimits
    from refagent.config.loading import Config
    from refagent.llm.protocol import ModelClient
    from refagent.llm.retry import RetryPolicy
    from refagent.persistence.store import SessionStore
    from refagent.sandbox.holding import Holding
    from refagent.sandbox.local import Sandbox
    from refagent.tools.base import BaseTool
    from refagent.tools.custom import CustomTools

DEFAULT_MAX_REQUESTS = 50


def sessions_root() -> Path | None:
    """``sessions`` in the user data directory, or None when there is none (a trimmed environment)."""
    directory = sessions_directory()
    if directory is None:
        return None
    from pathlib import Path  # here: not loaded before the first answer, which asks sessions_directory() (2.9 ms)

    return Path(directory)


def sessions_directory() -> str | None:
    """:func:`sessions_root` as a string: whether sessions are saved is answered with it before the
    editor's first answer, where ``pathlib`` is not imported."""
    try:
        path = os.path.join(user_dir("data"), "sessions")
    except Exception as exc:
        logger(__name__).warning("no user data directory, sessions will not be saved: %s", exc)
        return None
    return path if os.path.isabs(path) else None


def default_store() -> SessionStore | None:
    """Sessions under the user data directory (None when there is none)."""
    from refagent.persistence.store import SessionStore  # here: the first session's, not the first answer's (20 ms)

    root = sessions_root()
    return SessionStore(root) if root is not None else None


class SandboxMaker(Protocol):
    """What makes each session's sandbox (``Settings.make_sandbox``): the standard one is
    :class:`LocalSandboxes`; a fork's own is any object with these two methods (or :class:`OwnSandboxes`
    around a function)."""

    def __call__(self, cwd: str, additional: list[str], private: Sequence[str]) -> Sandbox:
        """The sandbox of a session with roots ``[cwd, *additional]``, keeping ``private`` (the agent's own
        files: its config and log files) from the session's commands and tools."""
        ...

    def holding(self) -> Holding | None:
        """How far these sandboxes hold their commands, when that is known before one is made (the modes of
        a session's first response describe it); None: only a sandbox made can say
        (:attr:`refagent.sandbox.local.Sandbox.holding`). May block: call it from a worker thread."""
        ...


class LocalSandboxes:
    """The standard sandboxes (:func:`refagent.sandbox.local.local_sandbox`), imported when the first
    session needs one."""

    def __call__(self, cwd: str, additional: list[str], private: Sequence[str] = ()) -> Sandbox:
        from refagent.sandbox.local import local_sandbox  # here: after the session/new answer (64 ms)

        return local_sandbox(cwd, additional, private)

    def holding(self) -> Holding | None:
        """This machine's (:func:`refagent.sandbox.confine.confinement.machine_support`, which waits for the
        probe the first time)."""
        # here: the confinement's module is not on initialize's way (12 ms)
        from refagent.sandbox.confine.confinement import machine_support

        return machine_support().holding()


class OwnSandboxes:
    """Sandboxes of one's own made by ``make(cwd, additional)`` (tests, forks), which say how they
    confine only once made."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[str, list[str]], Sandbox]) -> None:
        self.make = make

    def __call__(self, cwd: str, additional: list[str], private: Sequence[str] = ()) -> Sandbox:
        return self.make(cwd, additional)

    def holding(self) -> Holding | None:
        return None


def default_tools(fetch_allow: Sequence[str] = ()) -> Sequence[BaseTool]:
    """:func:`refagent.tools.registry.default_tools`, imported when the first session needs them;
    ``fetch_allow``: what the ``fetch`` tool may reach though not public (the config's ``[fetch] allow``)."""
    from refagent.tools.registry import default_tools as tools  # here: after the session/new answer (60 ms)

    return tools(fetch_allow)


def configured_model(profile: ModelProfile) -> ModelClient:
    """The client of the kind ``profile`` names (:func:`refagent.config.clients.make_model`), with the client's
    own retry policy: the scripted profile's is the offline model, the demo profile's the demo model."""
    from refagent.config.clients import make_model  # here: `refagent sessions` never loads the config (4.8 ms)

    return make_model(profile)


@dataclass
class Settings:
    """What the agent is configured with. Defaults: the built-in scripted model, the local sandbox and
    the standard tools. Tests pass their own."""

    profiles: list[ModelProfile] = field(default_factory=lambda: [scripted_profile()])
    default_profile: str | None = None
    make_model: Callable[[ModelProfile], ModelClient] = configured_model
    max_requests: int = DEFAULT_MAX_REQUESTS
    subagents: SubagentLimits | None = None
    """What the ``task`` tool's subagents may do: depth, how many at once, each one's budget; ``None``: the
    defaults (:class:`refagent.config.limits.SubagentLimits`)."""
    retry: RetryPolicy | None = None
    """How the model clients retry, and how long a model may be silent (the turn tells the user of a wait
    by it); ``None``: the defaults."""
    make_sandbox: SandboxMaker = field(default_factory=LocalSandboxes)
    tools: Callable[[], Sequence[BaseTool]] = default_tools
    store: Callable[[], SessionStore | None] | None = default_store
    """Where sessions are saved (None: nowhere; then load, resume, list and delete are not offered)."""
    reload: Callable[[], Settings] | None = None
    """Reads the configuration again (``authenticate`` does, after the user set a key)."""
    warm_up: Callable[[], Awaitable[None]] | None = None
    """Run once ``initialize`` has been answered: imports the model client's heavy modules early."""
    broken: str | None = None
    """Why the configuration could not be used (the agent then runs on the built-in model, which says so
    at the first prompt; a client that shows notices also hears it when a session opens)."""
    config_file: str | None = None
    """The config file this configuration came from (which may not exist yet): where ``refagent login``
    writes and what ACP ``logout`` forgets the keys of. None: no file (tests, ``--demo``): no sign-in."""
    private_files: tuple[str, ...] = ()
    """Files of the agent's own that commands must not read (its config file and log file, wherever the
    command line put them): the default sandbox hides them, with the agent's standard directories."""
    mcp_servers: Sequence[dict[str, Any]] = ()
    """The user's own MCP servers (the config file's), started with each session's, the editor's winning."""
    project_mcp_servers: tuple[str, ...] = ()
    """The servers of a project's ``.mcp.json`` the user allows to start, by name (none start otherwise)."""
    trusted_projects: tuple[str, ...] = ()
    """Directories whose projects the user trusts: their own slash commands (``.refagent/commands``) load."""
    problems: Callable[[], Sequence[str]] | None = None
    """What of the configuration could not be used (custom tools left out), one line each: the agent
    tells the user when a session opens, asking after the session's tools have been built."""

    def active_profile(self) -> ModelProfile:
        """The profile new sessions start with: ``default_profile`` if it names one, else the first."""
        return next((pr for pr in self.profiles if pr.id == self.default_profile), self.profiles[0])

    def sandbox_for(self, cwd: str, additional: list[str]) -> Sandbox:
        """A new session's sandbox, from ``make_sandbox``, keeping :attr:`private_files` from it."""
        return self.make_sandbox(cwd, additional, self.private_files)

    def saves_sessions(self) -> bool:
        """Whether sessions are saved; for the default store, answered without loading the store."""
        if self.store is None:
            return False
        if self.store is default_store:
            return sessions_directory() is not None
        return self.store() is not None

    def sandbox_holding(self) -> Holding | None:
        """How far the sandboxes of new sessions will hold their commands, when that is known without making
        one (:meth:`SandboxMaker.holding`; for the standard sandbox it blocks for the probe the first time:
        call it from a worker thread). A session's modes describe it in the response that opens the
        session, before its sandbox is made."""
        return self.make_sandbox.holding()

    @classmethod
    def from_config(cls, config: Config, reload: Callable[[], Settings] | None = None) -> Settings:
        """The settings of a loaded configuration: its profiles, their clients as their kinds make them
        (with its retry policy) and warm up, its limits and its custom tools; ``reload`` reads it again."""
        custom = ConfiguredTools(config.tools, config.tool_path, config.fetch_allow) if config.tools else None
        builtin = functools.partial(default_tools, config.fetch_allow) if config.fetch_allow else default_tools
        return cls(
            profiles=config.profiles,
            default_profile=config.default_profile,
            make_model=config.make_model,
            max_requests=config.max_requests or DEFAULT_MAX_REQUESTS,
            retry=config.retry,
            subagents=config.subagents,
            tools=custom if custom is not None else builtin,
            reload=reload,
            warm_up=config.warm_up(),
            problems=custom.problems if custom is not None else None,
            mcp_servers=config.mcp_servers,
            project_mcp_servers=config.project_mcp_servers,
            trusted_projects=config.trusted_projects,
        )


class ConfiguredTools:
    """The tools of a configuration that lists custom tools: :class:`refagent.tools.custom.CustomTools`,
    made (and so the tool modules imported) when the first session asks for its tools. Until then,
    nothing but this class exists: ``initialize`` is answered without importing any of it."""

    def __init__(self, entries: Sequence[str], path: Sequence[Path], fetch_allow: Sequence[str] = ()) -> None:
        self.entries = list(entries)
        self.path = list(path)
        self.fetch_allow = tuple(fetch_allow)
        self._custom: CustomTools | None = None

    def __call__(self) -> Sequence[BaseTool]:
        if self._custom is None:
            from refagent.tools.custom import CustomTools  # here: after the session/new answer (63 ms)

            builtin = functools.partial(default_tools, self.fetch_allow)
            self._custom = CustomTools(self.entries, self.path, builtin=builtin)
        return self._custom()

    def problems(self) -> list[str]:
        """The tools left out so far, one line each (none before the first call)."""
        return list(self._custom.problems) if self._custom is not None else []
