"""``refagent demo`` (and ``make demo``): watch refagent fix a real bug, on a fresh copy of the demo project.

    refagent demo [--project DIR] [--workdir DIR] [--transcript FILE]
    python -m refagent.client.demo [...]            # the same

The demo project, ``refagent/demo-project`` (a tiny shop with one bug and a failing test), is package data:
it is installed with refagent, so the demo works from a wheel (``pipx install``, ``uv tool install``) as
from this checkout. The directory's name is not an identifier on purpose: it is data, never imported as a
module, and neither the repository's pytest run (``testpaths``) nor mypy collects it.

It copies the project to a new directory, then runs one task there with the terminal client of
``refagent run`` (:mod:`refagent.client.run`): a real ACP client, in this process, talking to a real
``refagent`` process over its stdin and stdout. Permission requests are answered by the demo client, on
screen, the way ``refagent run --yes`` does (with a real model and a terminal, you answer them yourself).
Afterwards it runs the project's tests itself, to show the bug is fixed.

Which model plays the session: with no model configured (no ``OPENAI_API_KEY``, no ``OPENAI_BASE_URL``,
no config file), the built-in scripted demo model (:mod:`refagent.llm.demo`, ``refagent
--demo``); otherwise the configured model, on the same project. The screen says which, first thing.

Exit code: 0 when the turn ended normally and the project's tests pass afterwards, else 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import anyio

import refagent
from refagent import config
from refagent.client.render import EXIT_OUTPUT_CLOSED, QuietPipe, Renderer, use_color
from refagent.client.run import RunOptions, replace_unshowable, run
from refagent.errors import ConfigError

PROJECT_DIR = "demo-project"
"""The demo project's directory in the package (package data, see ``pyproject.toml``)."""
TASK = "The tests fail (`python3 -m unittest`). Find the bug, fix it, and check that the tests pass."
COPY_IGNORES = ("__pycache__", "*.pyc", "ruff.toml")
"""Not part of the project (``ruff.toml`` is for linting refagent's own examples)."""


@dataclass(frozen=True, slots=True)
class ModelChoice:
    demo: bool
    """Use the built-in scripted demo model."""
    note: str
    """What to tell the user about it."""


def choose_model(env: dict[str, str]) -> ModelChoice:
    """The scripted demo model when no usable model is configured, else the configured one."""
    try:
        loaded = config.load(None, env)
    except ConfigError as exc:
        return ModelChoice(True, f"The model configuration is broken ({exc}), so the scripted demo model plays.")
    profile = loaded.profile
    if profile.scripted:
        return ModelChoice(
            True,
            "No model is configured, so refagent's built-in SCRIPTED demo model plays the session (no key, no "
            "network). To watch a real model do the same, set one up with `refagent login` (or set "
            "ANTHROPIC_API_KEY or OPENAI_API_KEY, or OPENAI_BASE_URL for a local server) and run `refagent demo` "
            "again.",
        )
    problem = config.missing_key(profile)
    if problem is not None:
        return ModelChoice(True, f"{problem} Until then, the scripted demo model plays.")
    return ModelChoice(False, f"A REAL model plays the session: {profile.name}.")


def default_project() -> Path:
    """The demo project installed with refagent: ``demo-project`` in the package's directory.

    Found beside ``refagent/__init__.py`` (``importlib.resources.files`` would give the same directory for
    an installed or an editable package; a plain path is what :func:`shutil.copytree` needs).
    """
    return Path(refagent.__file__).resolve().parent / PROJECT_DIR


def copy_project(project: Path, workdir: Path | None) -> Path:
    """A fresh copy of ``project`` in ``workdir`` (default: a new temporary directory)."""
    parent = workdir or Path(tempfile.mkdtemp(prefix="refagent-demo-"))
    parent.mkdir(parents=True, exist_ok=True)
    copy = parent / project.name
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def run_project_tests(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unittest"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )


def demo(
    project: Path, workdir: Path | None, out: TextIO, transcript: TextIO | None = None, pipe: QuietPipe | None = None
) -> int:
    """Run the demo on a copy of ``project``, drawing on ``out``; 0 if the bug got fixed. ``pipe``: what ``out``
    writes through, when its reader may leave (``refagent demo | head``): then the demo stops, quietly (141)."""
    screen = Renderer(out, color=use_color(out))
    choice = choose_model(dict(os.environ))
    copy = copy_project(project, workdir)
    screen.cwd = str(copy)
    interactive = not choice.demo and sys.stdin.isatty()
    screen.line("━━ refagent demo ━━", "bold", "cyan")
    screen.line("A real ACP client (the one behind `refagent run`) drives a real `refagent` process over stdio,")
    screen.line(f"on a fresh copy of {project.name}: {copy}")
    screen.line(choice.note, "bold", "yellow" if choice.demo else "green")
    if not interactive:
        screen.line("The demo client answers every permission request with Allow, and shows each one.")
    options = RunOptions(
        prompt=TASK,
        cwd=str(copy),
        agent=[sys.executable, "-m", "refagent", *(["--demo"] if choice.demo else [])],
        yes=not interactive,
        approval_note="the demo client approves, like `refagent run --yes`",
        show_approved=True,  # the demo shows what a permission question looks like
        transcript=transcript,
    )
    outcome = anyio.run(lambda: run(options, screen, interactive=interactive, stdout=pipe))
    if pipe is not None and pipe.closed:
        return EXIT_OUTPUT_CLOSED

    screen.line()
    screen.line("━━ Afterwards: the demo runs the project's tests itself ━━", "bold", "cyan")
    tests = run_project_tests(copy)
    lines = [line for line in tests.stderr.strip().splitlines() if line.startswith(("Ran ", "OK", "FAILED"))]
    screen.info(f"$ python -m unittest   ({', '.join(lines) or 'no output'})")
    if tests.returncode == 0:
        screen.line("✓ The bug is fixed: the project's tests pass.", "bold", "green")
    else:
        screen.line("✗ The project's tests still fail:", "bold", "red")
        for line in tests.stderr.strip().splitlines()[-15:]:
            screen.line(f"    {line}", "dim")
    who = "the scripted demo model" if choice.demo else "a real model"
    screen.info(f"That was {who}. The copy stays in {copy}; try, for example:")
    screen.info(f'  {refagent_command()} run --cwd {copy} "explain how the bulk discount works"')
    return 0 if outcome.exit_code == 0 and tests.returncode == 0 else 1


def refagent_command(executable: str | None = None, path: str | None = None) -> str:
    """How to type ``refagent`` here: the name if the one on ``path`` (default: ``PATH``) is this environment's
    script, else the script itself. A pipx or uv tool install puts a link to the script on ``PATH``
    (``~/.local/bin/refagent``), so the two are compared by where they lead. ``executable``: this Python
    (default: ``sys.executable``), whose directory holds the script."""
    script = Path(executable or sys.executable).parent / "refagent"
    found = shutil.which("refagent", path=path)
    if found is not None and os.path.realpath(found) == os.path.realpath(script):
        return "refagent"
    if script.exists():
        relative = os.path.relpath(script)
        return relative if not relative.startswith("..") else str(script)
    return f"{sys.executable} -m refagent"


def main(argv: list[str] | None = None, prog: str = "python -m refagent.client.demo") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Watch refagent fix a real bug in a fresh copy of the example project.",
    )
    parser.add_argument(
        "--project", type=Path, default=None, help="the project to copy (default: the one installed with refagent)"
    )
    parser.add_argument("--workdir", type=Path, help="copy it into this directory (default: a new temporary one)")
    parser.add_argument("--transcript", type=Path, help="also write the wire transcript here, as JSON lines")
    args = parser.parse_args(argv)
    project = (args.project or default_project()).resolve()
    if not project.is_dir():
        parser.error(f"{project}: no such project directory; pass --project")
    replace_unshowable(sys.stdout)
    stdout = QuietPipe(sys.stdout)
    if args.transcript is None:
        return demo(project, args.workdir, stdout.stream, pipe=stdout)
    with args.transcript.open("w", encoding="utf-8") as transcript:
        return demo(project, args.workdir, stdout.stream, transcript, pipe=stdout)


if __name__ == "__main__":
    sys.exit(main())
