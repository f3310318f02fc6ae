"""The system prompt: the template filled with the session's environment."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from refagent.prompt import git_state, project_instructions, system_prompt


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
