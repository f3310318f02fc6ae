"""The system prompt: the agent's instructions, the tool contract, and the session's environment.

It has three parts, each a template in ``refagent/prompts``: ``system.md``, the built-in instructions (who
the agent is and how it works); ``tools.md``, the tool contract the loop relies on (plans, paths,
permissions and declined calls, the sandbox and how to ask past it, tool errors); and ``environment.md``,
filled with the session's environment. A client's system prompt (unstable ``systemPrompt`` on the session
requests, :class:`~refagent.acp.requests.ClientSystemPrompt`) either follows all three under its own
heading (``append``), or takes the place of the built-in instructions (``override``): the tool contract
and the environment stay, since the tools, the permissions and the sandbox are unchanged whatever the
client says, and a model that was not told of them fights them.

The environment is what a model needs to act sensibly without asking: the roots, the OS and shell, the
date, whether the project is a git repository and on which branch, and the project's own instructions
from ``AGENTS.md`` files at the roots (the format many agents share). Everything is read without running
git, through the session's sandbox (its :class:`~refagent.sandbox.seams.PathPolicy` and
:class:`~refagent.sandbox.seams.Disk`, never the host's disk directly: a sandbox elsewhere describes its own
files), so building the prompt costs a few small reads.

These files come with the repository and are read before anyone is asked, and what they hold goes to
the model's provider. So an ``AGENTS.md`` is read only if the policy places it inside the roots (not in
one of its private paths) and, when opened, it is a regular file whose real path lies inside the roots (a
link to ``~/.ssh/id_ed25519`` or ``/proc/self/environ`` reads nothing), never waited on (a FIFO) and never
past :data:`MAX_INSTRUCTIONS_BYTES` (a link to ``/dev/zero`` is not regular anyway). git's ``HEAD`` may
lie outside the roots (a repository around the workspace, a worktree's ``gitdir``), so it is read wherever
it is, as a small regular file, and only a branch name or a commit id taken from it reaches the prompt.
"""

from __future__ import annotations

import codecs
import datetime as dt
import os
import platform
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import PurePosixPath

from refagent.acp.requests import ClientSystemPrompt
from refagent.errors import ToolError
from refagent.sandbox.seams import Disk, PathPolicy

MAX_INSTRUCTIONS_CHARS = 40_000
"""All ``AGENTS.md`` files together: more would crowd out the conversation."""
MAX_INSTRUCTIONS_BYTES = 4 * MAX_INSTRUCTIONS_CHARS
"""The most read of one ``AGENTS.md`` (~156 KiB): enough to fill the character budget even where every
character takes UTF-8's four bytes, and nothing beyond it is ever read (a bigger file is cut)."""
INSTRUCTION_FILES = ("AGENTS.md",)

_MAX_GIT_FILE_BYTES = 4096  # .git/HEAD and a `.git` file hold one short line
_BRANCH = re.compile(r"ref: refs/heads/([^\x00-\x20\x7f~^:?*\[\\]{1,255})")  # what git allows in a ref, roughly
_COMMIT = re.compile(r"[0-9a-f]{4,64}")


CLIENT_HEADING = "# Instructions from the user's editor"
"""What an appended client system prompt comes under: the model can tell whose instructions they are."""


def template(name: str = "system.md") -> str:
    """The text of a prompt template of ``refagent/prompts``."""
    return resources.files("refagent.prompts").joinpath(name).read_text(encoding="utf-8")


async def _first_line(disk: Disk, path: str) -> str | None:
    data = await disk.read_start(path, _MAX_GIT_FILE_BYTES)
    if data is None:
        return None
    return data.decode("utf-8", "replace").split("\n", 1)[0].strip()


def _gitdir(candidate: str, line: str) -> str:
    """Where a ``.git`` file's ``gitdir: <path>`` line points (relative to its directory), as a path."""
    return os.path.normpath(os.path.join(candidate, line.removeprefix("gitdir:").strip()))


async def git_state(root: str, disk: Disk) -> str:
    """``"yes, on branch main"``, ``"yes, detached at 1a2b3c4"`` or ``"no"``, read from ``.git/HEAD`` on
    ``disk`` (in ``root`` or the nearest directory above it that has one)."""
    for candidate in (root, *(str(parent) for parent in PurePosixPath(root).parents)):
        git = os.path.join(candidate, ".git")
        text = await _first_line(disk, git)  # a worktree or submodule: a file, "gitdir: <path>"
        if text is not None and text.startswith("gitdir:"):
            git = _gitdir(candidate, text)
        head = await _first_line(disk, os.path.join(git, "HEAD"))
        if head is None:
            continue
        where = f"yes (repository at {candidate})"
        if branch := _BRANCH.fullmatch(head):
            return f"{where}, on branch {branch.group(1)}"
        if _COMMIT.fullmatch(head):
            return f"{where}, detached at {head[:12]}"
        return where  # not a HEAD git wrote: nothing of it goes into the prompt
    return "no"


async def read_instructions(path: str, policy: PathPolicy, disk: Disk) -> str | None:
    """The text of the instructions file ``path``, cut to :data:`MAX_INSTRUCTIONS_BYTES`; None unless the
    policy places it inside the roots and, when it is opened, it is a regular file whose real path is."""
    try:
        resolved = policy.resolve(path)
    except ToolError:
        return None
    if not resolved.inside:  # outside the roots, or one of the policy's private paths
        return None
    data = await disk.read_start(resolved.path, MAX_INSTRUCTIONS_BYTES, within=policy.roots)
    if data is None:
        return None
    cut = len(data) > MAX_INSTRUCTIONS_BYTES
    # Incremental and not final: a character cut in half at the end is dropped, not shown as U+FFFD.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data[:MAX_INSTRUCTIONS_BYTES], final=not cut)
    return text + "\n[... truncated]" if cut else text


async def project_instructions(roots: Sequence[str], policy: PathPolicy, disk: Disk) -> str:
    """The contents of ``AGENTS.md`` at each root, capped, each labelled with its path."""
    sections: list[str] = []
    budget = MAX_INSTRUCTIONS_CHARS
    for root in roots:
        for name in INSTRUCTION_FILES:
            path = os.path.join(root, name)
            text = await read_instructions(path, policy, disk)
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


async def make_system_prompt(
    cwd: str,
    roots: Sequence[str],
    *,
    policy: PathPolicy,
    disk: Disk,
    today: dt.date | None = None,
    client: ClientSystemPrompt | None = None,
) -> str:
    """The system prompt for a session with these roots, its files read through its sandbox's ``policy``
    and ``disk`` (each read in a worker thread by the local disk: never on the event loop), with the
    ``client``'s system prompt appended or in place of the built-in instructions (see the module's
    docstring)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    git = await git_state(cwd, disk)
    instructions = await project_instructions(roots, policy, disk)
    environment = template("environment.md").format(
        cwd=cwd,
        roots=", ".join(roots),
        os=f"{platform.system()} {platform.release()} ({platform.machine()})",
        shell=f"{shell} (run_command runs commands with /bin/sh -c)",
        date=(today or dt.date.today()).isoformat(),
        git=git,
        project_instructions=instructions,
    )
    own = template("system.md").strip()
    if client is not None and client.mode == "override":
        own = client.text.strip()
    parts = [own, template("tools.md").strip(), environment.strip()]
    if client is not None and client.mode == "append":
        parts.append(f"{CLIENT_HEADING}\n{client.text.strip()}")
    return "\n\n".join(part for part in parts if part) + "\n"
