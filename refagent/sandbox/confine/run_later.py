"""What git and editors run later, outside the sandbox: held read-only while a confined command runs, and
never left behind new.

A confined command may write anywhere in the session roots, and a few files there are code that runs
later with the user's full power, without anyone deciding to run it: the user's next ``git status``
runs ``core.fsmonitor`` from a repository's configuration; an editor runs the tasks and settings of the
folder it opens; CI runs the workflows of a push. :data:`RUN_LATER` names them, at the top of each root:

- ``.git``, whole: configuration, hooks, ``commondir`` (which points git at a configuration elsewhere),
  and everything else. A confined command can read the repository (``git status``, ``git log``,
  ``git diff``) but not commit, stash or configure it: that needs level ``none``, which the user sees.
  (A writable ``.git`` cannot be held by name: a new ``commondir`` is made like a new ``index.lock``.)
- editors' and tools' files: ``.vscode``, ``.idea``, ``.zed``, ``.devcontainer``, ``.github/workflows``,
  ``.gitlab-ci.yml``, ``.envrc`` (direnv), ``.mcp.json``, ``.husky`` and ``.pre-commit-config.yaml``
  (what git hooks run), the agents' ``.claude``, ``.cursor``, ``.gemini`` and ``.codex``;
- for a root that is a home directory: the shells' start-up files (``.bashrc``, ``.profile``,
  ``.zshrc``...), git's own configuration (``.gitconfig``, ``.config/git``), fish's, autostart entries,
  systemd user units, ``.local/bin`` (on the user's ``PATH``: a ``git`` planted there runs at their next
  ``git``) and ``.local/lib`` (Python's user site: a ``.pth`` file there runs at every Python's start).

Beyond those: every ``.git`` (directory or file) nested at most :data:`DEPTH` directories below a root,
found by a bounded walk (at most :data:`MAX_DIRECTORIES` directories, skipping :data:`SKIPPED`), with the
same editors' and tools' files at the top of its repository (a project in a root that is a home
directory: the editor that opens it runs its ``.vscode/tasks.json``), and
what git configuration the command could otherwise reach: a ``core.hooksPath`` and an ``include.path``
(or ``includeIf``) file inside a root, named by the repository's or the user's configuration.

The launcher's init calls :func:`hold` before the command: each of those that exists is mounted
read-only (:func:`refagent.sandbox.confine.namespaces.hold_read_only`), so it can be neither changed nor
replaced. One that does not exist cannot be held by a mount, so :func:`sweep` runs after every process
of the command has died: what the command made there (``git init`` at a root, a new ``.vscode/``, a
``.git`` file pointing elsewhere) is moved aside, to ``NAME.refagent-blocked``, and said on the
command's stderr. Nothing is deleted. While the command runs, something it made there exists: a tool
the user runs at that very moment could read it (a known limit, in ``docs/sandbox.md``).

Standard library only: the launcher runs this in a fresh ``python -I -S``.
"""

from __future__ import annotations

import os
import stat

from refagent.sandbox.within import within

TYPE_CHECKING = False  # typing itself costs 14 ms to import, and this module runs in the launcher
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

RUN_LATER = (
    ".git",
    ".vscode",
    ".idea",
    ".zed",
    ".devcontainer",
    ".github/workflows",
    ".gitlab-ci.yml",
    ".envrc",
    ".mcp.json",
    ".husky",
    ".pre-commit-config.yaml",
    ".claude",
    ".cursor",
    ".gemini",
    ".codex",
    ".gitconfig",
    ".config/git",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".config/autostart",
    ".config/systemd",
    ".local/bin",
    ".local/lib",
)
"""Paths at the top of a root that git, editors, CI and other agents run code from (see above), and,
for a root that is a home directory, what the user's shell, git and desktop run from there."""
HOME_RUN_LATER = (
    ".cargo/config.toml",
    ".cargo/config",
    ".cargo/bin",
    "go/bin",
    ".bun/bin",
    ".deno/bin",
    ".npm-global",
    ".config/pip",
    ".pip",
    ".pydistutils.cfg",
    ".pythonrc.py",
    ".ipython",
    ".gradle/init.d",
    ".gradle/gradle.properties",
    ".m2/settings.xml",
    ".bundle/config",
    ".gemrc",
    ".vimrc",
    ".vim",
    ".config/nvim",
    ".emacs",
    ".emacs.d",
    ".config/emacs",
    ".tmux.conf",
    ".config/tmux",
    ".inputrc",
    ".xprofile",
    ".xinitrc",
    ".xsession",
    ".xsessionrc",
    ".config/environment.d",
    ".config/Code/User",
    ".config/zed",
)
"""For a root that is the user's home directory only (``$HOME``): what every later build, interpreter,
editor and session there takes orders from (a ``rustc-wrapper`` in ``~/.cargo/config.toml``, a pip index
in ``~/.config/pip``, Gradle's init scripts, an editor's start-up files, the programs on ``PATH``). In a
project these names are the project's own, and what its own tools read is the repository's code."""
DEPTH = 3
"""How deep below a root a nested repository is looked for: ``a/b/c/.git`` is found, ``a/b/c/d/.git`` not."""
MAX_DIRECTORIES = 1000
"""How many directories of a root the walk for nested repositories looks into, at most."""
SKIPPED = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".tox", ".nox", "target", ".mypy_cache"})
"""Directories the walk does not enter: dependencies and build output, where nobody runs git."""
BLOCKED = ".refagent-blocked"
"""What a path the command made among those is renamed with (``.git`` -> ``.git.refagent-blocked``)."""
_INCLUDE_DEPTH = 5


class Held:
    """What :func:`hold` held, and what it found missing, for :func:`sweep` (a plain class: ``dataclasses``
    costs 15 ms to import)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = list(roots)
        self.present: set[str] = set()
        """Every path held, or found and left alone (a symlink's own path)."""
        self.absent: list[str] = []
        """The :data:`RUN_LATER` paths (and configured ones) that did not exist."""
        self.links: dict[str, str] = {}
        """Symbolic links among them, with where each pointed."""


def hold(roots: Sequence[str], hidden: Sequence[str] = (), held_too: Sequence[str] = ()) -> Held:
    """Hold read-only everything of the roots that git and editors run later (see the module docstring),
    hide the ``hidden`` paths (the agent's own files, the user's credentials) under empty stand-ins, hold
    ``held_too`` read-only as well (the agent's own code and interpreter, which its next start runs), and
    note what of them is missing. Call in the namespace's init, once the roots are mounted writable.

    First the way to each is pinned (:func:`pin_ways`): a mount holds a path's place, not its name, and a
    command could rename a directory above it (``mv .github gh``, ``mv ~/.config c``) and make the path
    anew beside the one held."""
    from refagent.sandbox.confine.namespaces import (  # here: the agent imports RUN_LATER, not ctypes (1.7 ms)
        hide,
        hold_read_only,
    )

    held = Held(roots)
    candidates: list[str] = []
    for root in roots:
        candidates += [os.path.join(root, name) for name in RUN_LATER]
        if is_home(root):
            candidates += [os.path.join(root, name) for name in HOME_RUN_LATER]
        for nested in nested_repositories(root):  # the top of each repository too: its editor and CI files
            candidates += [nested, *(os.path.join(os.path.dirname(nested), name) for name in RUN_LATER[1:])]
    candidates += configured(roots)
    candidates += [path for path in held_too if any(within(path, root) for root in roots)]
    pin_ways([*hidden, *candidates], roots)
    for path in hidden:
        if not os.path.lexists(path):
            if any(within(path, root) for root in roots) and path not in held.absent:
                held.absent.append(path)  # made by the command: moved aside when it ends
            continue
        hide(path)
        held.present.add(path)
    for path in candidates:
        if path in held.present or path in held.absent:
            continue
        try:
            is_link = os.path.islink(path)
            exists = os.path.lexists(path)
        except (OSError, ValueError):
            continue
        if not exists:
            held.absent.append(path)
            continue
        held.present.add(path)
        if is_link:  # a mount would cover where it leads, not the link: remember the link, hold its target
            held.links[path] = os.readlink(path)
            path = os.path.realpath(path)
            if not any(within(path, root) for root in roots) or not os.path.exists(path):
                continue  # outside the roots, everything is read-only already
        hold_read_only(path)
    return held


def is_home(root: str) -> bool:
    """Whether ``root`` is the user's home directory (``$HOME``, resolved)."""
    home = os.environ.get("HOME", "")
    return bool(home) and os.path.isabs(home) and os.path.realpath(home) == root


def pin_ways(paths: Sequence[str], roots: Sequence[str]) -> None:
    """Mount each directory on the way from a root to each of ``paths`` over itself, as it is (writable
    stays writable): a mount point can be neither renamed nor removed, so each path keeps its place. The
    roots themselves are mount points already; outside them, everything is read-only."""
    from refagent.sandbox.confine.namespaces import pin  # here: the agent imports RUN_LATER, not ctypes (1.7 ms)

    pinned: set[str] = set()
    for path in paths:
        for root in roots:
            if path == root or not within(path, root):
                continue
            way = root
            for part in os.path.relpath(os.path.dirname(path), root).split(os.sep):
                if part in ("", "."):
                    continue
                way = os.path.join(way, part)
                if way in pinned:
                    continue
                if os.path.islink(way) or not os.path.isdir(way):
                    break  # nothing (or a link) there: what lies beyond does not exist yet either
                pin(way)
                pinned.add(way)


def sweep(held: Held) -> list[str]:
    """After the command (every process of it dead): move aside what it made where :func:`hold` found
    nothing, or where a link it found now leads elsewhere; returns a line for each, to tell the command."""
    made = [path for path in held.absent if os.path.lexists(path)]
    for root in held.roots:
        for path in nested_repositories(root):
            if os.path.basename(path) != ".git":  # a directory made a repository by its shape: its HEAD goes
                path = os.path.join(path, "HEAD")
            if path not in held.present and path not in made and os.path.dirname(path) not in held.present:
                made.append(path)
    for link, target in held.links.items():
        try:
            changed = os.readlink(link) != target
        except OSError:
            changed = os.path.lexists(link)
        if changed:
            made.append(link)
    lines = []
    for path in made:
        aside = _aside(path)
        try:
            os.rename(path, aside)
        except OSError as exc:
            lines.append(f"refagent: {path} was made by the command and could not be moved aside: {exc.strerror}")
            continue
        lines.append(
            f"refagent: moved {path} to {aside}: the command made it, and a program outside the sandbox (git, an "
            "editor, a shell, a tool that reads it, refagent itself) would take what it says later (only a command "
            "at level `none` may make it)"
        )
    return lines


def _aside(path: str) -> str:
    aside = path + BLOCKED
    number = 1
    while os.path.lexists(aside):
        number += 1
        aside = f"{path}{BLOCKED}-{number}"
    return aside


def nested_repositories(root: str) -> list[str]:
    """Every ``.git`` (directory, file or link) below ``root``, at most :data:`DEPTH` directories down,
    its own ``.git`` left out, and every directory there, ``root`` included, that git takes for a
    repository by its shape (a bare one: ``HEAD``, ``objects/`` and ``refs/``, whose ``config`` git reads
    in it: ``core.pager``, aliases); a bounded walk (:data:`MAX_DIRECTORIES`, :data:`SKIPPED`) that follows
    no link and never enters a ``.git`` or such a directory."""
    found: list[str] = []
    level = [root]
    looked = 0
    for depth in range(DEPTH + 1):
        below = []
        for directory in level:
            if looked >= MAX_DIRECTORIES:
                return found
            looked += 1
            entries = list(_entries(directory))
            if _bare(entries):
                found.append(directory)
                continue
            for entry in entries:
                if entry.name == ".git":
                    if depth:
                        found.append(entry.path)
                elif depth < DEPTH and entry.name not in SKIPPED and _is_directory(entry):
                    below.append(entry.path)
        level = below
    return found


def _bare(entries: list[os.DirEntry[str]]) -> bool:
    """Whether a directory with these entries is a git directory by its shape, as git's discovery judges."""
    kinds = {entry.name: _is_directory(entry) for entry in entries if entry.name in ("HEAD", "objects", "refs")}
    return kinds == {"HEAD": False, "objects": True, "refs": True}


def _entries(directory: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            yield from entries
    except OSError:
        return


def _is_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


# -- git configuration that names paths inside the roots ----------------------------------------------------


def configured(roots: Sequence[str]) -> list[str]:
    """Paths inside the roots that git configuration makes git run or read as configuration: the
    ``core.hooksPath`` directory and ``include.path`` / ``includeIf.*.path`` files of each root's
    repository and of the user's and system's configuration (includes followed a few levels)."""
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    user = [os.path.join(home, ".gitconfig")] if home else []
    user += [os.path.join(xdg, "git", "config")] if xdg else []
    found: list[str] = []
    for root in roots:
        git = os.path.join(root, ".git")
        for config in [os.path.join(git, "config"), os.path.join(git, "config.worktree"), *user, "/etc/gitconfig"]:
            for key, value, where in _settings(config, _INCLUDE_DEPTH):
                base = root if key == "hookspath" else os.path.dirname(where)
                path = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
                if any(within(path, each) for each in roots) and path not in found:
                    found.append(path)
    return found


def _settings(config: str, depth: int) -> Iterator[tuple[str, str, str]]:
    """``(key, value, file)`` for ``core.hooksPath`` and include paths in ``config`` and what it includes."""
    lines = _read_regular(config).splitlines()
    section = ""
    for line in lines:
        line = line.strip()
        if line.startswith("["):  # [core], [include], [includeIf "gitdir:..."]
            header, _, line = line[1:].partition("]")
            section = header.replace('"', " ").split(" ", 1)[0].strip().lower()
        key, equals, value = line.partition("=")
        key, value = key.strip().lower(), _unquote(value)
        if not equals or not value:
            continue
        if section == "core" and key == "hookspath":
            yield "hookspath", value, config
        elif section in ("include", "includeif") and key == "path":
            yield "include", value, config
            if depth > 0:
                target = os.path.join(os.path.dirname(config), os.path.expanduser(value))
                yield from _settings(target, depth - 1)


def _read_regular(path: str) -> str:
    """The start of ``path`` if it is a regular file; "" otherwise (a FIFO planted there must not block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, 1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _unquote(value: str) -> str:
    """A value without its comment (`` # ...``, `` ; ...``) and its quotes."""
    for mark in (" #", " ;", "\t#", "\t;"):
        value = value.split(mark, 1)[0]
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value
