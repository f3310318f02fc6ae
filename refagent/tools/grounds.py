"""What a command's effect depends on beyond its text: :func:`command_grounds`.

"Always allow" remembers a command by its text (:mod:`refagent.tools.command_scope`), but the same text can
do something else later: ``git status`` in a directory where a repository has been made since (its
``core.fsmonitor`` runs), ``pytest`` once a ``pytest`` has been planted earlier on ``PATH``, ``python -m
pytest`` once a ``pytest.py`` lies in the working directory, ``make test`` with another ``Makefile``,
``./build.sh`` rewritten. At ``workspace`` the sandbox confines whatever runs; a command that runs with more
(``network``, ``none``, or a machine that cannot confine) is allowed for what the user saw. So the scope
is remembered with these grounds (:meth:`refagent.tools.permissions.Permissions.ask`), and a later
command it would cover is asked for again, saying what changed, when they differ
(:meth:`~refagent.tools.permissions.Permissions.decide`).

The grounds, each ``(what, state)``:

- the repository git would use: the first ``.git`` from the working directory up, its identity, and the
  identity of its ``config`` and ``hooks`` (what git runs from it), or none;
- what the program resolves to: a path it names, or the first match on ``PATH`` (what it finds there);
- files the command names that exist (a script, a ``Makefile`` given with ``-f``), and those its program
  reads by convention in the working directory (:data:`CONVENTIONAL`: a ``Makefile``, ``package.json``,
  ``conftest.py``...), and for ``python -m MODULE`` a module of that name there, which Python imports first.

An identity is ``(st_dev, st_ino, st_ctime_ns, st_size)``: the change time is the kernel's, set on every
write and every change of the times, so a file rewritten and given its old modification time back
still differs. Reads the disk (a few ``lstat``); never follows a link of the workspace's to read it.
"""

from __future__ import annotations

import os
import shlex
import shutil

Ground = tuple[str, object]

CONVENTIONAL: dict[str, tuple[str, ...]] = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json", ".npmrc"),
    "npx": ("package.json", ".npmrc"),
    "pnpm": ("package.json", ".npmrc"),
    "yarn": ("package.json", ".yarnrc.yml"),
    "bun": ("package.json", "bunfig.toml"),
    "pytest": ("conftest.py", "pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"),
    "tox": ("tox.ini", "pyproject.toml"),
    "cargo": ("Cargo.toml", "build.rs", ".cargo/config.toml"),
    "go": ("go.mod",),
    "just": ("justfile", "Justfile"),
    "gradle": ("build.gradle", "build.gradle.kts", "settings.gradle"),
    "mvn": ("pom.xml",),
}
"""Files a program reads from the working directory by itself, and runs what they say."""


def command_grounds(command: str, cwd: str, path: str) -> tuple[Ground, ...]:
    """The grounds of ``command`` run in ``cwd`` with ``PATH`` ``path`` (see the module docstring)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value in front
        words = words[1:]
    grounds: list[Ground] = [("the repository", _repository(cwd))]
    if not words:
        return tuple(grounds)
    program = words[0]
    grounds.append((f"what `{program}` runs", _program(program, cwd, path)))
    name = os.path.basename(program)
    named = [word for word in words[1:] if not word.startswith("-")]
    for word in named:
        target = os.path.join(cwd, word)
        if os.path.lexists(target) and not os.path.isdir(target):
            grounds.append((f"{word}", _identity(target)))
    for conventional in CONVENTIONAL.get(name, ()):
        grounds.append((conventional, _identity(os.path.join(cwd, conventional))))
    if name.startswith("python") and "-m" in words[1:-1]:
        module = words[words.index("-m", 1) + 1].split(".")[0]
        for shadow in (f"{module}.py", module):
            grounds.append((f"{shadow} (Python imports it first)", _identity(os.path.join(cwd, shadow))))
    return tuple(grounds)


def changed(before: tuple[Ground, ...], now: tuple[Ground, ...]) -> list[str]:
    """What differs between the grounds a scope was allowed on and a command's now, by name: those both
    have (a scope covers commands with other arguments, which name other files)."""
    then = dict(before)
    return [what for what, state in now if what in then and then[what] != state]


def _repository(cwd: str) -> object:
    directory = os.path.abspath(cwd)
    while True:
        git = os.path.join(directory, ".git")
        if os.path.lexists(git):
            return (
                git,
                _identity(git, times=False),
                _identity(os.path.join(git, "config")),
                _identity(os.path.join(git, "hooks")),
            )
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _program(program: str, cwd: str, path: str) -> object:
    if "/" in program:
        found: str | None = os.path.join(cwd, program)
    else:
        found = shutil.which(program, path=path)
        if found is not None and not os.path.isabs(found):  # a relative PATH entry: from the cwd
            found = os.path.join(cwd, found)
    if found is None:
        return None
    return found, _identity(found)


def _identity(path: str, *, times: bool = True) -> tuple[int, ...] | None:
    """``path``'s ``(st_dev, st_ino, st_ctime_ns, st_size)`` by ``lstat`` (without the last two: ``times``
    False, for a directory whose entries change by themselves); None if nothing is there."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not times:
        return info.st_dev, info.st_ino
    return info.st_dev, info.st_ino, info.st_ctime_ns, info.st_size
