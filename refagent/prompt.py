"""The system prompt: ``prompts/system.md`` filled with the session's environment.

The environment is what a model needs to act sensibly without asking: the roots, the OS and shell, the
date, whether the project is a git repository and on which branch, and the project's own instructions
from ``AGENTS.md`` files at the roots (the format many agents share). Everything is read from disk
without running git, so building the prompt costs a few file reads.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import resources
from pathlib import Path

MAX_INSTRUCTIONS_CHARS = 40_000
INSTRUCTION_FILES = ("AGENTS.md",)


def template() -> str:
    return resources.files("refagent.prompts").joinpath("system.md").read_text(encoding="utf-8")


def git_state(root: str) -> str:
    """``"yes, on branch main"``, ``"yes, detached at 1a2b3c4"`` or ``"no"``, read from ``.git/HEAD``."""
    path = Path(root)
    for candidate in (path, *path.parents):
        git = candidate / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = git.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                git = (candidate / text.removeprefix("gitdir:").strip()).resolve()
        head = git / "HEAD"
        if head.is_file():
            ref = head.read_text(encoding="utf-8", errors="replace").strip()
            if ref.startswith("ref: refs/heads/"):
                return f"yes (repository at {candidate}), on branch {ref.removeprefix('ref: refs/heads/')}"
            return f"yes (repository at {candidate}), detached at {ref[:12]}"
    return "no"


def project_instructions(roots: list[str]) -> str:
    """The contents of ``AGENTS.md`` at each root, capped, each labelled with its path."""
    sections: list[str] = []
    budget = MAX_INSTRUCTIONS_CHARS
    for root in roots:
        for name in INSTRUCTION_FILES:
            path = Path(root) / name
            try:
                text = path.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
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
