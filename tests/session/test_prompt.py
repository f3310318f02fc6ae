"""The system prompt: the template filled with the session's environment."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.local import Sandbox
from refagent.sandbox.seams import Disk
from refagent.session.system_prompt import (
    MAX_INSTRUCTIONS_BYTES,
    MAX_INSTRUCTIONS_CHARS,
    git_state,
    make_system_prompt,
    project_instructions,
    read_instructions,
)
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import connect
from tests.support.tool_fakes import bare_sandbox

pytestmark = pytest.mark.anyio
DISK = LocalFileSystem()


async def system_prompt(cwd: str, roots: list[str], *, today: dt.date | None = None) -> str:
    """The prompt of a session with these roots on the local sandbox."""
    policy = RootPolicy(cwd, [root for root in roots if root != cwd])
    return await make_system_prompt(cwd, roots, policy=policy, disk=DISK, today=today)


async def instructions(roots: list[str]) -> str:
    return await project_instructions(roots, RootPolicy(roots[0], roots[1:]), DISK)


async def test_environment_is_filled_in(tmp_path: Path) -> None:
    extra = tmp_path / "lib"
    extra.mkdir()
    prompt = await system_prompt(str(tmp_path), [str(tmp_path), str(extra)], today=dt.date(2026, 1, 2))
    assert f"Working directory: {tmp_path}" in prompt
    assert f"Workspace roots: {tmp_path}, {extra}" in prompt
    assert "Date: 2026-01-02" in prompt
    assert "Git: no" in prompt
    assert "{" not in prompt.split("# Environment")[1]  # every placeholder was filled


async def test_git_branch_and_detached_head(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    sub = tmp_path / "src"
    sub.mkdir()
    assert (await git_state(str(sub), DISK)).endswith("on branch feature/x")
    (tmp_path / ".git" / "HEAD").write_text("0123456789abcdef0123\n")
    assert "detached at 0123456789ab" in await git_state(str(tmp_path), DISK)


async def test_worktree_gitdir_file(tmp_path: Path) -> None:
    real = tmp_path / "real-git"
    real.mkdir()
    (real / "HEAD").write_text("ref: refs/heads/wt\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".git").write_text(f"gitdir: {real}\n")
    assert (await git_state(str(work), DISK)).endswith("on branch wt")


async def test_agents_md_from_every_root(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "AGENTS.md").write_text("Use tabs.")
    (b / "AGENTS.md").write_text("Run make test.")
    text = await instructions([str(a), str(b)])
    assert "Use tabs." in text
    assert "Run make test." in text
    assert str(a / "AGENTS.md") in text
    assert "Use tabs." in await system_prompt(str(a), [str(a)])
    assert await instructions([str(tmp_path)]) == ""


# -- a hostile repository: AGENTS.md and HEAD are read before anyone is asked, and sent to the model --


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- hunter2\n")
    return secret


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


async def test_a_link_to_a_file_outside_the_roots_is_not_read(root: Path, outside: Path) -> None:
    (root / "AGENTS.md").symlink_to(outside)
    assert "hunter2" not in await system_prompt(str(root), [str(root)])
    assert await instructions([str(root)]) == ""


async def test_a_link_inside_the_roots_is_followed(root: Path) -> None:
    (root / "CLAUDE.md").write_text("Use tabs.")
    (root / "AGENTS.md").symlink_to("CLAUDE.md")  # common: one file for several agents
    assert "Use tabs." in await instructions([str(root)])


def first_environment_entry() -> str:
    with open("/proc/self/environ", "rb") as file:
        return file.read().split(b"\0")[0].decode("utf-8", "replace")


async def test_a_link_to_the_environment_is_not_read(root: Path) -> None:
    """/proc/self/environ holds the environment the agent started with: the model's API key, say."""
    (root / "AGENTS.md").symlink_to("/proc/self/environ")
    first = first_environment_entry()
    assert "=" in first
    prompt = await system_prompt(str(root), [str(root)])
    assert first not in prompt
    assert "# Project instructions" not in prompt


@pytest.mark.parametrize("kind", ["zero", "fifo", "directory", "socket"])
async def test_special_files_neither_block_nor_are_read(root: Path, kind: str) -> None:
    path = root / "AGENTS.md"
    server = socket.socket(socket.AF_UNIX)
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_text("Use tabs.")
    else:
        server.bind(str(path))
    with server, anyio.fail_after(5):  # the old reader waited for a writer forever, or read /dev/zero without end
        prompt = await system_prompt(str(root), [str(root)])
    assert "# Project instructions" not in prompt


async def test_a_huge_agents_md_is_cut_and_not_read_whole(root: Path) -> None:
    (root / "AGENTS.md").write_bytes(b"Use tabs.\n" + "é".encode() * (10 * MAX_INSTRUCTIONS_BYTES))
    text = await read_instructions(str(root / "AGENTS.md"), RootPolicy(str(root)), DISK)
    assert text is not None
    assert text.startswith("Use tabs.")
    assert text.endswith("[... truncated]")
    assert "\ufffd" not in text  # a character cut in half at the cap is dropped, not garbled
    assert len(text.encode()) <= MAX_INSTRUCTIONS_BYTES + 20
    assert len(await instructions([str(root)])) < MAX_INSTRUCTIONS_CHARS + 500


async def test_head_shows_only_a_branch_or_a_commit(root: Path, outside: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").symlink_to(outside)
    state = await git_state(str(root), DISK)
    assert state == f"yes (repository at {root})"  # nothing of the linked file
    (root / ".git" / "HEAD").unlink()
    os.mkfifo(root / ".git" / "HEAD")
    assert await git_state(str(root), DISK) == "no"  # not waited on
    (root / ".git" / "HEAD").unlink()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\x1b[2J\n")
    assert await git_state(str(root), DISK) == f"yes (repository at {root})"


# -- through the sandbox: a sandbox whose files are elsewhere describes its own ------------------------


class RemoteDisk:
    """A disk on another machine: its files are these, whatever the host holds (only what the system prompt
    reads of a disk)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.asked: list[str] = []

    async def read_start(self, path: str, max_bytes: int, *, within: Sequence[str] = ()) -> bytes | None:
        self.asked.append(path)
        text = self.files.get(path)
        return None if text is None else text.encode()[: max_bytes + 1]


async def test_the_prompt_reads_the_sandboxs_disk_not_the_hosts(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("HOST instructions")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/host-branch\n")
    disk: Any = RemoteDisk(
        {
            f"{tmp_path}/AGENTS.md": "Remote instructions.",
            f"{tmp_path}/.git": f"gitdir: {tmp_path}/../gitdirs/project\n",
            f"{tmp_path.parent}/gitdirs/project/HEAD": "ref: refs/heads/remote-branch\n",
        }
    )
    prompt = await make_system_prompt(str(tmp_path), [str(tmp_path)], policy=RootPolicy(str(tmp_path)), disk=disk)
    assert "Remote instructions." in prompt
    assert "on branch remote-branch" in prompt
    assert "HOST" not in prompt
    assert "host-branch" not in prompt


async def test_agents_md_in_a_private_path_is_not_read(tmp_path: Path) -> None:
    """A root the policy keeps private (the agent's own directory, added as a root) gives no instructions:
    what the file tools may not read without asking does not reach the model either."""
    private = tmp_path / "config" / "refagent"
    private.mkdir(parents=True)
    (private / "AGENTS.md").write_text("SECRET keys = sk-123")
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    policy = RootPolicy(str(tmp_path), [str(private)], private=[str(private)])
    prompt = await make_system_prompt(str(tmp_path), [str(tmp_path), str(private)], policy=policy, disk=DISK)
    assert "Use tabs." in prompt
    assert "SECRET" not in prompt


async def test_a_session_on_a_sandbox_of_its_own_is_prompted_from_its_disk(tmp_path: Path, check: Any) -> None:
    """Through a whole session: the system prompt the model gets comes from the session's sandbox."""
    model = ScriptedModel([text("hi")])
    disk = RemoteDisk({f"{tmp_path}/AGENTS.md": "Remote instructions."})

    def make_sandbox(cwd: str, extra: list[str]) -> Sandbox:
        sandbox = bare_sandbox(cwd, extra)
        sandbox.disk = cast(Disk, disk)
        return sandbox

    settings = Settings(make_model=lambda profile: model, make_sandbox=OwnSandboxes(make_sandbox), store=None)
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}
    system = model.requests[0].messages[0]
    assert system["role"] == "system"
    assert f"## {tmp_path}/AGENTS.md\n\nRemote instructions." in system["content"]
    assert f"{tmp_path}/AGENTS.md" in disk.asked
