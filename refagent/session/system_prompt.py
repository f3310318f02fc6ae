"""The system prompt: ``prompts/system.md`` filled with the session's environment.

The environment is what a model needs to act sensibly without asking: the roots, the OS and shell, the
date, whether the project is a git repository and on which branch, and the project's own instructions
from ``AGENTS.md`` files at the roots (the format many agents share). Everything is read from disk
without running git, so building the prompt costs a few file reads: build it off the event loop
(:func:`make_system_prompt` runs :func:`system_prompt` in a worker thread).

These files come with the repository and are read before anyone is asked, and what they hold goes to
the model's provider. So an ``AGENTS.md`` is read only if it is a regular file whose real path lies
inside the roots (a link to ``~/.ssh/id_ed25519`` or ``/proc/self/environ`` reads nothing), never waited
on (a FIFO) and never past :data:`MAX_INSTRUCTIONS_BYTES` (a link to ``/dev/zero`` is not regular
anyway). git's ``HEAD`` may lie outside the roots (a repository around the workspace, a worktree's
``gitdir``), so it is read wherever it is, as a small regular file, and only a branch name or a commit
id taken from it reaches the prompt.
"""

from __future__ import annotations

import codecs
import datetime as dt
import functools
import os
import platform
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import anyio.to_thread

from refagent.disk.safe_open import read_regular

MAX_INSTRUCTIONS_CHARS = 40_000
"""All ``AGENTS.md`` files together: more would crowd out the conversation."""
MAX_INSTRUCTIONS_BYTES = 4 * MAX_INSTRUCTIONS_CHARS
"""The most read of one ``AGENTS.md`` (~156 KiB): enough to fill the character budget even where every
character takes UTF-8's four bytes, and nothing beyond it is ever read (a bigger file is cut)."""
INSTRUCTION_FILES = ("AGENTS.md",)

_MAX_GIT_FILE_BYTES = 4096  # .git/HEAD and a `.git` file hold one short line
_BRANCH = re.compile(r"ref: refs/heads/([^\x00-\x20\x7f~^:?*\[\\]{1,255})")  # what git allows in a ref, roughly
_COMMIT = re.compile(r"[0-9a-f]{4,64}")


def template() -> str:
    return resources.files("refagent.prompts").joinpath("system.md").read_text(encoding="utf-8")


def _first_line(path: Path) -> str | None:
    data = read_regular(str(path), _MAX_GIT_FILE_BYTES, follow_symlinks=True)
    if data is None:
        return None
    return data.decode("utf-8", "replace").split("\n", 1)[0].strip()


def git_state(root: str) -> str:
    """``"yes, on branch main"``, ``"yes, detached at 1a2b3c4"`` or ``"no"``, read from ``.git/HEAD``."""
    path = Path(root)
    for candidate in (path, *path.parents):
        git = candidate / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = _first_line(git) or ""
            if text.startswith("gitdir:"):
                git = (candidate / text.removeprefix("gitdir:").strip()).resolve()
        head = _first_line(git / "HEAD")
        if head is None:
            continue
        where = f"yes (repository at {candidate})"
        if branch := _BRANCH.fullmatch(head):
            return f"{where}, on branch {branch.group(1)}"
        if _COMMIT.fullmatch(head):
            return f"{where}, detached at {head[:12]}"
        return where  # not a HEAD git wrote: nothing of it goes into the prompt
    return "no"


def read_instructions(path: str, roots: Sequence[str]) -> str | None:
    """The text of the instructions file ``path``, cut to :data:`MAX_INSTRUCTIONS_BYTES`; None unless it
    is a regular file whose real path is inside one of ``roots`` (absolute, resolved)."""
    data = read_regular(path, MAX_INSTRUCTIONS_BYTES, follow_symlinks=True, within=roots)
    if data is None:
        return None
    cut = len(data) > MAX_INSTRUCTIONS_BYTES
    # Incremental and not final: a character cut in half at the end is dropped, not shown as U+FFFD.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data[:MAX_INSTRUCTIONS_BYTES], final=not cut)
    return text + "\n[... truncated]" if cut else text


def project_instructions(roots: list[str]) -> str:
    """The contents of ``AGENTS.md`` at each root, capped, each labelled with its path."""
    real_roots = [os.path.realpath(root) for root in roots]
    sections: list[str] = []
    budget = MAX_INSTRUCTIONS_CHARS
    for root in roots:
        for name in INSTRUCTION_FILES:
            path = Path(root) / name
            text = read_instructions(str(path), real_roots)
            if text is None:
                continue
            text = text.strip()
            if not text or budget <= 0:
                continue
            if len(text) > budget:
                text = text[:budget] + "\n[... truncated]"
            budget -= len(text)
            sections.append(f"## {path}\n\n{text}")
    if not sections:
        return ""
    return "\n# Project instructions\nThe project's own instructions for agents. Follow them.\n\n" + "\n\n".join(
        sections
    )


def system_prompt(cwd: str, roots: list[str], *, today: dt.date | None = None) -> str:
    """The system prompt for a session (blocking: it reads files; see :func:`make_system_prompt`)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    return (
        template()
        .format(
            cwd=cwd,
            roots=", ".join(roots),
            os=f"{platform.system()} {platform.release()} ({platform.machine()})",
            shell=f"{shell} (run_command runs commands with /bin/sh -c)",
            date=(today or dt.date.today()).isoformat(),
            git=git_state(cwd),
            project_instructions=project_instructions(roots),
        )
        .rstrip()
        + "\n"
    )


async def make_system_prompt(cwd: str, roots: list[str], *, today: dt.date | None = None) -> str:
    """:func:`system_prompt`, built in a worker thread so that its file reads never hold the event loop."""
    build = functools.partial(system_prompt, cwd, list(roots), today=today)
    prompt: str = await anyio.to_thread.run_sync(build)
    return prompt
