"""Slash commands of the user's own: prompt files beside the config file, and a trusted project's, advertised
with the built-in ones, expanded with their arguments into an ordinary turn, shown to the user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.scripted import ScriptedModel, text
from refagent.session.commands import NAMES
from refagent.session.prompt_commands import MAX_BYTES, PromptCommand, expand, load, trusted
from refagent.settings import Settings
from refagent.testing.memory import connect

pytestmark = pytest.mark.anyio

REVIEW = (
    "---\ndescription: Review the staged diff\nargument-hint: [focus]\n---\n"
    "Review the staged changes. Focus: $ARGUMENTS\n"
)


def write(directory: Path, name: str, content: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(content, encoding="utf-8")
    return path


def test_files_become_commands_the_first_of_a_name_winning(tmp_path: Path) -> None:
    mine, project = tmp_path / "mine", tmp_path / "project"
    write(mine, "review.md", REVIEW)
    write(mine, "Explain.md", "# Explain the code\n\nExplain $1 in detail.")
    write(mine, "compact.md", "not the built-in")  # a built-in's name: never taken
    write(mine, "not a name.md", "x")
    write(mine, "notes.txt", "x")
    write(mine, "huge.md", "x" * (MAX_BYTES + 1))
    write(project, "review.md", "the project's review")  # mine came first
    write(project, "ship.md", "Ship it")
    os.symlink(mine / "review.md", project / "linked.md")  # a link is not followed
    commands = {c.name: c for c in load([str(mine), str(project), str(tmp_path / "none")], NAMES)}
    assert sorted(commands) == ["explain", "review", "ship"]
    review = commands["review"]
    assert (review.description, review.hint) == ("Review the staged diff", "[focus]")
    assert review.text == "Review the staged changes. Focus: $ARGUMENTS"
    assert commands["explain"].description == "Explain the code"  # its first line


def test_arguments_go_where_the_text_says_else_after_it() -> None:
    def command(text_: str) -> PromptCommand:
        return PromptCommand("c", text_, "", "", "c.md")

    assert expand(command("Focus: $ARGUMENTS."), "tests and docs") == "Focus: tests and docs."
    assert expand(command("Compare $1 with $2 ($3)."), "a.py b.py") == "Compare a.py with b.py ()."
    assert expand(command("Say hello."), "to Ann") == "Say hello.\n\nto Ann"
    assert expand(command("Say hello."), "") == "Say hello."


def test_a_project_is_trusted_when_listed_or_under_one_listed(tmp_path: Path) -> None:
    (tmp_path / "work" / "repo").mkdir(parents=True)
    assert trusted(str(tmp_path / "work" / "repo"), [str(tmp_path / "work")])
    assert not trusted(str(tmp_path / "work" / "repo"), [str(tmp_path / "wor")])
    assert not trusted(str(tmp_path / "work"), [])


@pytest.mark.parametrize("trust", [True, False], ids=["trusted", "not-trusted"])
async def test_a_command_runs_as_a_turn_and_the_user_sees_what_it_sent(tmp_path: Path, check: Any, trust: bool) -> None:
    home, project = tmp_path / "config", tmp_path / "project"
    write(home / "commands", "review.md", REVIEW)
    write(project / ".refagent" / "commands", "ship.md", "Prepare the release notes.")
    model = ScriptedModel([text("Looks fine."), text("Notes.")])
    settings = Settings(
        make_model=lambda p: model,
        store=None,
        config_file=str(home / "config.toml"),
        trusted_projects=(str(project),) if trust else (),
    )
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        [advertised] = [u for u in editor.updates(sid) if u["sessionUpdate"] == "available_commands_update"]
        names = {c["name"]: c for c in advertised["availableCommands"]}
        assert names["review"] == {
            "name": "review",
            "description": "Review the staged diff",
            "input": {"hint": "[focus]"},
        }
        assert ("ship" in names) is trust
        assert (await editor.prompt(sid, "/review the tests"))["stopReason"] == "end_turn"
        said = editor.text(sid)
        if trust:
            await editor.prompt(sid, "/ship")
    assert model.requests[0].messages[-1] == {"role": "user", "content": "Review the staged changes. Focus: the tests"}
    assert said.startswith("/review (")
    assert "commands/review.md): Review the staged changes. Focus: $ARGUMENTS" in said
    assert said.endswith("Looks fine.")
    if trust:
        assert "Prepare the release notes." in str(model.requests[1].messages[-1]["content"])
