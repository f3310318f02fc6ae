"""The system prompt: the template filled with the session's environment."""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path

import anyio
import pytest

from refagent.session.system_prompt import (
    MAX_INSTRUCTIONS_BYTES,
    MAX_INSTRUCTIONS_CHARS,
    git_state,
    make_system_prompt,
    project_instructions,
    read_instructions,
    system_prompt,
)


def test_environment_is_filled_in(tmp_path: Path) -> None:
    extra = tmp_path / "lib"
    extra.mkdir()
    prompt = system_prompt(str(tmp_path), [str(tmp_path), str(extra)], today=dt.date(2026, 1, 2))
    assert f"Working directory: {tmp_path}" in prompt
    assert f"Workspace roots: {tmp_path}, {extra}" in prompt
    assert "Date: 2026-01-02" in prompt
    assert "Git: no" in prompt
    assert "{" not in prompt.split("# Environment")[1]  # every placeholder was filled


def test_git_branch_and_detached_head(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    sub = tmp_path / "src"
    sub.mkdir()
    assert git_state(str(sub)).endswith("on branch feature/x")
    (tmp_path / ".git" / "HEAD").write_text("0123456789abcdef0123\n")
    assert "detached at 0123456789ab" in git_state(str(tmp_path))


def test_worktree_gitdir_file(tmp_path: Path) -> None:
    real = tmp_path / "real-git"
    real.mkdir()
    (real / "HEAD").write_text("ref: refs/heads/wt\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".git").write_text(f"gitdir: {real}\n")
    assert git_state(str(work)).endswith("on branch wt")


def test_agents_md_from_every_root(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "AGENTS.md").write_text("Use tabs.")
    (b / "AGENTS.md").write_text("Run make test.")
    text = project_instructions([str(a), str(b)])
    assert "Use tabs." in text
    assert "Run make test." in text
    assert str(a / "AGENTS.md") in text
    assert "Use tabs." in system_prompt(str(a), [str(a)])
    assert project_instructions([str(tmp_path)]) == ""


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


def test_a_link_to_a_file_outside_the_roots_is_not_read(root: Path, outside: Path) -> None:
    (root / "AGENTS.md").symlink_to(outside)
    assert "hunter2" not in system_prompt(str(root), [str(root)])
    assert project_instructions([str(root)]) == ""


def test_a_link_inside_the_roots_is_followed(root: Path) -> None:
    (root / "CLAUDE.md").write_text("Use tabs.")
    (root / "AGENTS.md").symlink_to("CLAUDE.md")  # common: one file for several agents
    assert "Use tabs." in project_instructions([str(root)])


def test_a_link_to_the_environment_is_not_read(root: Path) -> None:
    """/proc/self/environ holds the environment the agent started with: the model's API key, say."""
    (root / "AGENTS.md").symlink_to("/proc/self/environ")
    with open("/proc/self/environ", "rb") as file:
        first = file.read().split(b"\0")[0].decode("utf-8", "replace")
    assert "=" in first
    prompt = system_prompt(str(root), [str(root)])
    assert first not in prompt
    assert "# Project instructions" not in prompt


@pytest.mark.anyio
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
        prompt = await make_system_prompt(str(root), [str(root)])
    assert "# Project instructions" not in prompt


def test_a_huge_agents_md_is_cut_and_not_read_whole(root: Path) -> None:
    (root / "AGENTS.md").write_bytes(b"Use tabs.\n" + "é".encode() * (10 * MAX_INSTRUCTIONS_BYTES))
    text = read_instructions(str(root / "AGENTS.md"), [str(root)])
    assert text is not None
    assert text.startswith("Use tabs.")
    assert text.endswith("[... truncated]")
    assert "\ufffd" not in text  # a character cut in half at the cap is dropped, not garbled
    assert len(text.encode()) <= MAX_INSTRUCTIONS_BYTES + 20
    assert len(project_instructions([str(root)])) < MAX_INSTRUCTIONS_CHARS + 500


def test_head_shows_only_a_branch_or_a_commit(root: Path, outside: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").symlink_to(outside)
    state = git_state(str(root))
    assert state == f"yes (repository at {root})"  # nothing of the linked file
    (root / ".git" / "HEAD").unlink()
    os.mkfifo(root / ".git" / "HEAD")
    assert git_state(str(root)) == "no"  # not waited on
    (root / ".git" / "HEAD").unlink()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\x1b[2J\n")
    assert git_state(str(root)) == f"yes (repository at {root})"
