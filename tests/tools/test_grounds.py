""" "Always allow" means what the user saw: a command that runs with more than the sandbox holds is allowed
with what it would run (its grounds), and asked for again when an earlier change the user did not see
(a repository made where there was none, a program planted where it is looked for first, a script
rewritten with its old time put back) made the same text do something else."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect, select
from refagent.tools.grounds import changed, command_grounds

pytestmark = pytest.mark.anyio


def make_tool(directory: Path, name: str, output: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text(f"#!/bin/sh\necho {output}\n")
    tool.chmod(0o755)
    return tool


def test_a_repository_made_where_there_was_none(tmp_path: Path) -> None:
    before = command_grounds("git status", str(tmp_path), os.environ["PATH"])
    assert changed(before, command_grounds("git status", str(tmp_path), os.environ["PATH"])) == []
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n\tfsmonitor = ./evil\n")
    assert changed(before, command_grounds("git status", str(tmp_path), os.environ["PATH"])) == ["the repository"]


def test_a_program_planted_where_it_is_looked_for_first(tmp_path: Path) -> None:
    system = make_tool(tmp_path / "system", "lint", "system")
    path = f"{tmp_path / 'project' / '.venv' / 'bin'}{os.pathsep}{system.parent}"
    before = command_grounds("lint src", str(tmp_path / "system"), path)
    make_tool(tmp_path / "project" / ".venv" / "bin", "lint", "planted")
    assert changed(before, command_grounds("lint src", str(tmp_path / "system"), path)) == ["what `lint` runs"]


def test_a_module_planted_beside_python_m(tmp_path: Path) -> None:
    before = command_grounds("python3 -m pytest -q", str(tmp_path), os.environ["PATH"])
    (tmp_path / "pytest.py").write_text("import os; os.system('evil')\n")
    assert changed(before, command_grounds("python3 -m pytest -q", str(tmp_path), os.environ["PATH"])) == [
        "pytest.py (Python imports it first)"
    ]


def test_a_script_rewritten_with_its_old_time_put_back(tmp_path: Path) -> None:
    script = make_tool(tmp_path, "build.sh", "build")
    before = command_grounds("./build.sh", str(tmp_path), os.environ["PATH"])
    times = script.stat()
    script.write_text("#!/bin/sh\necho pwned\n")  # as long as before: the size is the same
    os.utime(script, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert changed(before, command_grounds("./build.sh", str(tmp_path), os.environ["PATH"])) == [
        "what `./build.sh` runs"
    ]


def test_a_makefile_changed_under_make(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    before = command_grounds("make test", str(tmp_path), os.environ["PATH"])
    (tmp_path / "Makefile").write_text("test:\n\tevil\n")
    assert changed(before, command_grounds("make test", str(tmp_path), os.environ["PATH"])) == ["Makefile"]


def test_other_arguments_of_a_scope_are_not_a_change(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    before = command_grounds("pytest a.py", str(tmp_path), os.environ["PATH"])
    assert changed(before, command_grounds("pytest b.py", str(tmp_path), os.environ["PATH"])) == []


def call(n: int, command: str, level: str) -> list[ToolCallRequest]:
    return [ToolCallRequest(f"c{n}", "run_command", json.dumps({"command": command, "sandbox": level}))]


async def asked_twice(tmp_path: Path, check: Any, between: Callable[[], None]) -> list[str]:
    """``git status`` at level ``none``, allowed always at the first prompt; ``between`` the two prompts,
    what an earlier command the user did not see left; the titles of the permission requests."""
    model = ScriptedModel([call(1, "git status", "none"), text("one"), call(2, "git status", "none"), text("two")])
    client = FakeClient(permission=select("allow_always"))
    async with connect(Settings(make_model=lambda profile: model), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        await editor.prompt(sid, "status?")
        between()
        await editor.prompt(sid, "and now?")
    return [request["toolCall"]["title"] for request in client.permission_requests]


async def test_always_allow_asks_again_once_a_repository_is_made(tmp_path: Path, check: Any) -> None:
    """A repository appears whose configuration git would run: the same command is asked for again, and
    the title says why."""

    def plant() -> None:
        (tmp_path / ".git").mkdir()
        (tmp_path / ".git" / "config").write_text("[core]\n\tfsmonitor = touch pwned\n")

    assert await asked_twice(tmp_path, check, plant) == [
        "Run `git status` (unconfined)",
        "Run `git status` (unconfined) (changed since you allowed it: the repository)",
    ]


async def test_always_allow_holds_while_nothing_changed(tmp_path: Path, check: Any) -> None:
    assert await asked_twice(tmp_path, check, lambda: None) == ["Run `git status` (unconfined)"]
