"""Command confinement, the agent's side: the levels a command can ask for, what this machine can hold,
and the launcher command line that applies it (:mod:`refagent.sandbox.confine.launcher`).

Levels (the ``sandbox`` argument of ``run_command``):

=============  ============================================================================================
``workspace``  writes only inside the session roots and a private temporary directory (``/tmp`` inside
               the sandbox, and ``TMPDIR``); no network at all; its own PID namespace and ``/proc``, so it
               sees no other process; an empty ``/run``, so no host service's Unix socket; every process
               it starts dies with it. Reads are not restricted, but for the host's ``/tmp``, of which
               only the roots and the toolchains there show (:func:`toolchains_in_tmp`). The user's
               package caches (``~/.cache``, ``~/.cargo``, ...) are private copies: written to, never
               changed on the host.
``network``    the same, with the network (TCP and UDP; still not the host's Unix sockets).
``none``       unconfined: the user's full power (the resource limits and scrubbed environment still hold).
=============  ============================================================================================

What the machine can do is probed once (:func:`machine_support`), in a throwaway child process started as
the agent starts (:mod:`refagent.sandbox.confine.probe`), which runs while the editor's first requests are
answered: Landlock's ABI, and whether a user namespace may mount (user, mount and PID
namespaces) and have a network namespace. The agent never claims more than that: :meth:`Support.missing`
names what a level promises and this machine cannot hold, and the modes, the permission requests and
the session say so. ``REFAGENT_SANDBOX_DISABLE`` switches pieces off as if missing, to try the
degraded paths: a comma-separated list of ``landlock``, ``landlock-net`` (Landlock below ABI 4),
``landlock-scope`` (below ABI 6), ``namespaces`` and ``netns``.

Only Linux confines today. Another system's backend would answer :func:`machine_support` for it and
bring its own launcher options; everything above the launcher stays as it is.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import refagent
from refagent.sandbox.confine import cgroups, probe
from refagent.sandbox.confine.descendants import start_time
from refagent.sandbox.confine.private_tmp import PrivateTmp
from refagent.sandbox.confine.probe import LAUNCHER
from refagent.sandbox.holding import LEVELS, NETWORK, SECRETS, WRITES, Holding, Level
from refagent.sandbox.within import within

log = logging.getLogger(__name__)

DISABLE_ENV = "REFAGENT_SANDBOX_DISABLE"
_PROBE_SECONDS = 10

NETWORK_UDP = "the network over UDP"
METADATA = "changing modes and times of files outside (chmod, touch)"
GIT = "the repository's git configuration and hooks, and the files editors run (run later, outside the sandbox)"
TERMINALS = "your other terminals (/dev/pts)"
PROCESSES = "other processes (it can see them and read their environment)"
SIGNALS = "signals to other processes, the agent's included"
LIFETIME = "processes it leaves behind (setsid, daemons)"


@dataclass(frozen=True, slots=True)
class Support:
    """What this machine lets the launcher do. The default, nothing, is what an unknown system gets."""

    landlock: int = 0
    """Landlock's ABI version (0: none). 1: file system; 4: TCP rules; 6: signal and socket scopes."""
    namespaces: bool = False
    """User, mount and PID namespaces with a private ``/tmp`` and ``/proc``."""
    netns: bool = False
    """A network namespace besides them."""
    notes: tuple[str, ...] = ()
    """Why pieces are missing, for the log."""

    def missing(self, level: Level) -> list[str]:
        """What a command at ``level`` is promised and this machine cannot hold; [] if it holds it all."""
        if level == "none":
            return []
        missing = []
        if self.landlock < 1 and not self.namespaces:  # either holds writes: Landlock, or read-only mounts
            missing.append(WRITES)
        if level == "workspace" and not self.netns:
            # Landlock's network rules cover TCP only: without a network namespace, UDP gets out
            missing.append(NETWORK_UDP if self.landlock >= 4 else NETWORK)
        if not self.namespaces:
            if self.landlock >= 1:  # Landlock holds writes, not chmod or timestamps: read-only mounts do
                missing += [METADATA, GIT]
            missing += [SECRETS, TERMINALS]  # Landlock does not restrict reads: only mounts can hide them
            missing.append(PROCESSES)
            if self.landlock < 6:  # Landlock's signal scope holds even without a PID namespace
                # The launcher's keeper (a subreaper) ends what a command leaves, but one that can signal
                # it can kill it first.
                missing += [SIGNALS, LIFETIME]
        return missing

    def holding(self) -> Holding:
        """This machine's confinement in the seam's words (:class:`~refagent.sandbox.holding.Holding`): what
        the modes describe and ``auto`` decides from."""
        return Holding(
            writes=self.landlock >= 1 or self.namespaces,
            network=self.netns,
            hidden=self.namespaces,
            gaps={level: self.missing(level) for level in LEVELS},
            summary=self.summary(),
        )

    def summary(self) -> str:
        """One line on how commands are confined here."""
        if not self.missing("workspace"):
            used = [f"Landlock ABI {self.landlock}"] if self.landlock else []
            return f"Commands are confined to the workspace ({', '.join([*used, 'Linux namespaces'])})."
        return "Commands are not fully confined on this machine: nothing stops " + ", ".join(self.missing("workspace"))

    def without(self, pieces: Sequence[str]) -> Support:
        """This support with ``pieces`` (the names of :data:`DISABLE_ENV`) switched off."""
        landlock = self.landlock
        if "landlock" in pieces:
            landlock = 0
        if "landlock-net" in pieces:
            landlock = min(landlock, 3)
        if "landlock-scope" in pieces:
            landlock = min(landlock, 5)
        namespaces = self.namespaces and "namespaces" not in pieces
        netns = namespaces and self.netns and "netns" not in pieces
        notes = (*self.notes, *(f"{piece}: switched off by {DISABLE_ENV}" for piece in pieces))
        return Support(landlock, namespaces, netns, notes)


def machine_support(env: Mapping[str, str] | None = None) -> Support:
    """What this machine can confine (probed once per process), less what :data:`DISABLE_ENV` switches
    off. Blocks for the probe the first time (some 35 ms, most of it run by then: the CLI starts it as the
    agent starts, :mod:`refagent.sandbox.confine.probe`): on the event loop, call it from a worker thread."""
    environ = os.environ if env is None else env
    disabled = [piece.strip() for piece in environ.get(DISABLE_ENV, "").split(",") if piece.strip()]
    return _probe().without(disabled) if disabled else _probe()


_probing = threading.Lock()


def _probe() -> Support:
    """The probe's answer, found once (later and concurrent callers wait for the first)."""
    with _probing:
        return _probe_once()


@functools.cache
def _probe_once() -> Support:
    if not sys.platform.startswith("linux"):
        return Support(notes=(f"{sys.platform}: only Linux confines commands so far",))
    if not sys.executable:
        return Support(notes=("no Python interpreter to run the launcher with",))
    try:
        output = probe.output(_PROBE_SECONDS)
    except OSError as exc:  # TimeoutError among them
        return Support(notes=(f"the sandbox probe failed: {exc}",))
    found = dict(line.partition("=")[::2] for line in output.splitlines() if "=" in line)
    notes = tuple(f"{key[4:]}: {value}" for key, value in found.items() if key.startswith("why."))
    try:
        landlock = int(found.get("landlock", "0"))
    except ValueError:
        landlock = 0
    support = Support(landlock, found.get("namespaces") == "1", found.get("netns") == "1", notes)
    log.info(
        "sandbox: Landlock ABI %d, namespaces %s, network namespace %s", landlock, support.namespaces, support.netns
    )
    for note in notes:
        log.info("sandbox: %s", note)
    return support


CACHES = (".cache", ".cargo", ".npm", ".yarn", ".gradle", ".m2", ".nuget", "go")
"""The user's package and build caches (under ``$HOME``) that commands get private, writable copies of."""
CACHE_VARIABLES = ("XDG_CACHE_HOME", "CARGO_HOME", "GOPATH", "GOMODCACHE", "npm_config_cache")
"""Variables that move those caches elsewhere."""


def user_caches(env: Mapping[str, str], roots: Sequence[str]) -> list[str]:
    """The cache directories that exist (real paths), outside the roots and ``/tmp``."""
    home = env.get("HOME", "")
    candidates = [os.path.join(home, name) for name in CACHES] if os.path.isabs(home) else []
    candidates += [env[name] for name in CACHE_VARIABLES if os.path.isabs(env.get(name, ""))]
    found: list[str] = []
    for candidate in candidates:
        path = os.path.realpath(candidate)
        inside = any(within(path, root) for root in [*roots, "/tmp"])
        if not inside and path not in found and os.path.isdir(path):
            found.append(path)
    return found


def toolchains_in_tmp(env: Mapping[str, str]) -> list[str]:
    """Directories under ``/tmp`` that commands need to see although the sandbox has a ``/tmp`` of its
    own: the Python environment the agent runs from (a CI checkout in ``/tmp`` with its ``.venv``), and
    what ``PATH`` names there (for ``.../bin``, the directory above it, which holds its libraries)."""
    found: list[str] = []
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(sys.executable))]
    for entry in env.get("PATH", "").split(os.pathsep):
        if os.path.isabs(entry):
            candidates.append(os.path.dirname(entry) if os.path.basename(entry.rstrip("/")) == "bin" else entry)
    for candidate in candidates:
        path = os.path.realpath(candidate) if candidate else ""
        if path and path != "/tmp" and within(path, "/tmp") and path not in found and os.path.isdir(path):
            found.append(path)
    return found


AGENT_DIRECTORIES = (
    ("XDG_CONFIG_HOME", ".config"),
    ("XDG_DATA_HOME", ".local/share"),
    ("XDG_STATE_HOME", ".local/state"),
    ("XDG_CACHE_HOME", ".cache"),
)
"""Where the agent keeps its configuration (API keys), sessions, history and logs: ``refagent`` under
each of these (``platformdirs``' directories on Linux), found from the variable or from ``$HOME``."""

CREDENTIALS = (
    ".ssh",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings-security.xml",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".pgpass",
    ".my.cnf",
    ".config/rclone",
    ".s3cfg",
    ".config/op",
    ".huggingface",
    ".cache/huggingface/token",
    ".config/github-copilot",
    ".codex",
    ".claude",
    ".claude.json",
    ".gemini",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    ".1password",
    ".config/1Password",
)
"""The user's credentials under ``$HOME``: keys, tokens, password stores, other agents' logins and the
browsers' profiles (cookies, saved passwords). A command that needs one (a push over SSH, a private
registry, signing) runs at level ``none``."""


CREDENTIAL_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AZURE_CONFIG_DIR",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "GNUPGHOME",
    "PASSWORD_STORE_DIR",
    "NETRC",
    "GH_CONFIG_DIR",
    "NPM_CONFIG_USERCONFIG",
    "npm_config_userconfig",
    "SSH_AUTH_SOCK",
)
"""Variables that name a credential file or directory, or an agent's socket, elsewhere than the defaults
(``KUBECONFIG`` may list several, ``:``-separated): hidden too."""


def own_paths(env: Mapping[str, str], private: Sequence[str] = ()) -> list[str]:
    """The agent's own files, whether or not they exist yet: ``refagent`` under each of
    :data:`AGENT_DIRECTORIES` (from the variable, else from ``$HOME``), its ``$REFAGENT_CONFIG`` and the
    ``private`` files it was started with (its config and log files). Absolute, as named."""
    found = [path for path in private if os.path.isabs(path)] + _own_directories(env)
    if os.path.isabs(env.get("REFAGENT_CONFIG", "")):
        found.append(env["REFAGENT_CONFIG"])
    return found


def _own_directories(env: Mapping[str, str]) -> list[str]:
    home = env.get("HOME", "")
    home = home if os.path.isabs(home) else ""
    found = []
    for variable, default in AGENT_DIRECTORIES:
        base = env.get(variable, "")
        if not os.path.isabs(base):
            base = os.path.join(home, default) if home else ""
        if base:
            found.append(os.path.join(base, "refagent"))
    return found


def make_own(env: Mapping[str, str], private: Sequence[str] = ()) -> None:
    """Make the agent's own directories (mode 0700) and its ``private`` files (empty, 0600) where they do not
    exist yet, so that they can be hidden from commands (:func:`hidden_paths`): a path that does not exist
    cannot be held by a mount, and a command at a root that holds it (``$HOME``) could otherwise make
    ``~/.config/refagent/config.toml`` before the user's first login, for the next ``refagent`` to load.
    Whatever cannot be made (no ``$HOME``, a read-only file system) is left; never follows a link."""
    directories = _own_directories(env)
    for path in own_paths(env, private):
        try:
            if path in directories:
                os.makedirs(path, mode=0o700, exist_ok=True)
            elif not os.path.lexists(path) and os.path.isdir(os.path.dirname(path)):
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(path, flags, 0o600))
        except OSError:
            continue


def hidden_paths(
    env: Mapping[str, str], roots: Sequence[str], private: Sequence[str] = (), *, existing: bool = True
) -> list[str]:
    """What commands at ``workspace`` and ``network`` must not read, as real paths: the agent's own files
    (:func:`own_paths`, with ``private``), and the user's :data:`CREDENTIALS` and what
    :data:`CREDENTIAL_VARIABLES` name. Only those that exist, unless ``existing`` is False (what the file
    tools' policy keeps private, and what the launcher moves aside when a command made it). A path that
    holds a root is left alone: the user works in there."""
    home = env.get("HOME", "")
    home = home if os.path.isabs(home) else ""
    candidates = own_paths(env, private)
    if home:
        candidates += [os.path.join(home, name) for name in CREDENTIALS]
    for variable in CREDENTIAL_VARIABLES:
        candidates += env.get(variable, "").split(os.pathsep)
    xdg_config = env.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg_config):  # the same credentials where XDG_CONFIG_HOME moves ~/.config
        moved = [name.removeprefix(".config/") for name in CREDENTIALS if name.startswith(".config/")]
        candidates += [os.path.join(xdg_config, name) for name in moved]
    found: list[str] = []
    for candidate in candidates:
        if not candidate or not os.path.isabs(candidate):
            continue
        path = os.path.realpath(candidate)
        if path in found or any(within(root, path) for root in roots):
            continue
        if not existing or os.path.exists(path):
            found.append(path)
    return found


def own_code() -> tuple[str, ...]:
    """The agent's own code and interpreter, which its next start runs: its package's directory, its
    environment (``sys.prefix``: site-packages, where a ``.pth`` file runs at every start), the
    interpreter's installation (``sys.base_prefix``: the standard library), and the custom tools it has
    imported (:func:`add_own_code`). Where a root holds one (a checkout of refagent used on itself, a home
    directory with pyenv or the tools in it), commands get it read-only and the file tools ask before
    changing it (:func:`refagent.tools.permissions.runs_later`)."""
    return (*_installed_code(), *_OWN_CODE_TOO)


@functools.cache
def _installed_code() -> tuple[str, ...]:
    package = os.path.dirname(os.path.abspath(refagent.__file__))
    found: list[str] = []
    for path in (package, sys.prefix, sys.base_prefix):
        real = os.path.realpath(path)
        if real not in found and real != "/":
            found.append(real)
    return tuple(found)


_OWN_CODE_TOO: list[str] = []
"""The custom tools' directories and modules, once imported (:func:`add_own_code`)."""


def add_own_code(paths: Sequence[str]) -> None:
    """Count ``paths`` (absolute) as the agent's own code from now on: the custom tools' ``tool_path``
    directories and module files, which the next ``refagent`` imports as it imports itself. (For the whole
    process: they are the agent's, whichever session imported them.)"""
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isabs(path) and real != "/" and real not in _OWN_CODE_TOO:
            _OWN_CODE_TOO.append(real)


def cgroup_bases() -> tuple[str, ...]:
    """Where the launcher makes each command's cgroup (:func:`refagent.sandbox.confine.cgroups.bases`, found once);
    none where ``REFAGENT_SANDBOX_DISABLE`` names ``cgroups``."""
    if "cgroups" in os.environ.get(DISABLE_ENV, "").replace(" ", "").split(","):
        return ()
    return _cgroup_bases()


@functools.cache
def _cgroup_bases() -> tuple[str, ...]:
    return tuple(cgroups.bases())


def remove_stale_cgroups() -> None:
    """Remove the cgroups of commands whose launcher was killed before it could (once they are empty)."""
    cgroups.remove_stale(cgroup_bases())


def agent_identity() -> str:
    """This process as the launcher's ``--agent`` names it: ``PID:START``, its start time in clock ticks
    after boot (field 22 of ``/proc/self/stat``), so that a pid reused after the agent ended is not taken
    for it; "" where ``/proc`` cannot say."""
    start = start_time(os.getpid())
    return f"{os.getpid()}:{start}" if start else ""


class Confinement:
    """One session's confinement: its roots, this machine's :class:`Support`, and a private temporary
    directory, made on first use and removed by :meth:`close`. The user's caches (:func:`user_caches`,
    from ``env``: this process's environment by default) get private, writable copies in it. The agent's
    own files and the user's credentials (:func:`hidden_paths`, with ``private``: the files the agent
    was started with, its config file and log file) are hidden from commands."""

    def __init__(
        self,
        roots: Sequence[str],
        support: Support,
        env: Mapping[str, str] | None = None,
        private: Sequence[str] = (),
    ) -> None:
        self.roots = [os.path.realpath(root) for root in roots]
        self.support = support
        environ = os.environ if env is None else env
        self.caches = user_caches(environ, self.roots) if support.namespaces else []
        self.shown = toolchains_in_tmp(environ) if support.namespaces else []
        self._env = environ
        self._private = list(private)
        self.tmp = PrivateTmp(bounded=support.namespaces)
        """The session's private ``/tmp`` (:mod:`refagent.sandbox.confine.private_tmp`)."""

    def missing(self, level: Level) -> list[str]:
        return self.support.missing(level)

    def hidden(self) -> list[str]:
        """What commands must not read (:func:`hidden_paths`), as it is now: a login made since the last
        command is hidden from the next. The agent's own directories are made first (:func:`make_own`),
        so that they are hidden before they hold anything. Inside the roots, what does not exist is named
        too: the launcher moves aside what a command made there (``~/.kube/config`` at a root that is the
        home directory, which ``kubectl`` would run a program from). Nothing under the host's ``/tmp``
        outside the roots: commands have a ``/tmp`` of their own, so that is out of sight already."""
        if not self.support.namespaces:
            return []
        make_own(self._env, self._private)
        return [
            path
            for path in hidden_paths(self._env, self.roots, self._private, existing=False)
            if any(within(path, root) for root in self.roots) or (os.path.exists(path) and not within(path, "/tmp"))
        ]

    def argv(
        self,
        command: Sequence[str],
        level: Level,
        *,
        limits: Mapping[str, int] | None = None,
        lc_ctype: str | None = None,
        parent: int | None = None,
        agent: str | None = None,
        grace: float | None = None,
        unset: Sequence[str] = (),
    ) -> list[str]:
        """The launcher command line that runs ``command`` at ``level`` (as far as this machine allows).

        ``limits``: ``RLIMIT_*`` suffixes and values; ``lc_ctype``: the ``LC_CTYPE`` the command gets
        (None: unset); ``parent``: the pid the command dies with (the agent, for local commands);
        ``agent``: the agent the command dies with when it is not the parent (the editor's terminals:
        :func:`agent_identity`); ``grace``: seconds after a SIGTERM before the launcher kills what is left
        (sooner than the caller's own SIGKILL); ``unset``: variables to remove from the environment the
        launcher finds."""
        options = [sys.executable, "-I", "-S", LAUNCHER]
        if limits:
            options += ["--limits", ",".join(f"{name}={value}" for name, value in limits.items())]
        options += ["--lc-ctype", "" if lc_ctype is None else "=" + lc_ctype]
        if limits and ("MEMORY" in limits or "TASKS" in limits):
            remove_stale_cgroups()  # the cgroups of commands that have ended
            for base in cgroup_bases():
                options += ["--cgroup", base]
        if parent is not None:
            options += ["--parent", str(parent)]
        if agent:
            options += ["--agent", agent]
        if grace:
            options += ["--grace", f"{grace:g}"]
        for name in unset:
            options += ["--unset", name]
        if level != "none":
            support = self.support
            for root in self.roots:
                options += ["--write", root]
            if support.namespaces:
                for cache in self.caches:
                    options += ["--cache", cache]
                for shown in self.shown:
                    options += ["--show", shown]
                for hidden in self.hidden():
                    options += ["--hide", hidden]
                for code in own_code():
                    if any(within(code, root) for root in self.roots):
                        options += ["--hold", code]
            options += ["--tmp", self.private_tmp()]
            if support.namespaces:
                options += ["--layers", self.tmp.layers()]
                holder = self.tmp.holder()
                if holder is not None:
                    options += ["--tmp-in", str(holder)]
            if support.landlock:
                options += ["--landlock", str(support.landlock)]
                # With a network namespace there is no way out to deny, and its own loopback stays usable.
                if level == "workspace" and support.landlock >= 4 and not (support.namespaces and support.netns):
                    options.append("--deny-tcp")
            if support.namespaces:
                options.append("--namespaces")
                if level == "workspace" and support.netns:
                    options.append("--netns")
        return [*options, "--", *command]

    def private_tmp(self) -> str:
        """The session's own temporary directory (mode 0700), made now if need be; removed by
        :meth:`close`, or when the agent exits. Where commands get namespaces, what they see there is the
        bounded tmpfs its holder keeps (:class:`~refagent.sandbox.confine.private_tmp.PrivateTmp`)."""
        return self.tmp.path()

    def close(self) -> None:
        """Remove the private temporary directory and everything in it, and the empty cgroups of commands
        whose launcher was killed (the time limit's kill of a command that ignored SIGTERM)."""
        remove_stale_cgroups()
        self.tmp.close()


UNCONFINED = Confinement([], Support())
"""No confinement: what a backend without one runs under (every level as ``none``, nothing held)."""
