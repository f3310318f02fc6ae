"""git as the oracle of the .gitignore tests: a repository made with it, and what it lists."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GIT = shutil.which("git")


def git_init(root: Path) -> None:
    """Make ``root`` a repository: with git when it is installed (it is the oracle), else just ``.git``."""
    if GIT is None:
        (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    else:
        subprocess.run([GIT, "init", "-q", str(root)], env=_git_env(), check=True, capture_output=True)


def git_listing(root: Path) -> tuple[set[str], set[str]]:
    """(the untracked files, those git does not ignore) of the repository at ``root``, by git itself."""
    assert GIT is not None

    def listed(*options: str) -> set[str]:
        argv = [GIT, "-c", f"core.excludesFile={os.devnull}", "ls-files", "-z", "--others", *options]
        out = subprocess.run(argv, cwd=root, env=_git_env(), check=True, capture_output=True).stdout
        return {os.fsdecode(name) for name in out.split(b"\0") if name}

    return listed(), listed("--exclude-standard")


def _git_env() -> dict[str, str]:
    # The user's git config (a global excludes file, say) must not change the answers.
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
