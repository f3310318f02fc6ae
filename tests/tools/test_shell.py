"""run_command: permission scopes, real local processes, and an editor terminal embedded in the call.

The attacks on "Always allow" are in tests/tools/test_command_scope.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.tools.base import CommandResult
from refagent.tools.command_scope import permission_scope
from refagent.tools.shell import MAX_OUTPUT_CHARS, RunCommand
from tests.support.tool_fakes import ScriptedTerminals, call, make_ctx, sent

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("command", "key"),
    [
        ("pytest -q", "command:pytest"),
        ("pytest tests/test_app.py -x", "command:pytest"),
        ("git status", "command:git status"),
        ("git status --short", "command:git status"),
        ("git push origin main", "command-exact:git push origin main"),  # not in the table
        ("git -C other status", "command-exact:git -C other status"),
        ("npm run test", "command:npm run test"),
        ("npm run test -- --watch", "command-exact:npm run test -- --watch"),  # arguments for the script
        ("npm test", "command:npm test"),
        ("uv run pytest -q", "command:uv run pytest"),
        ("cargo build --release", "command:cargo build"),
        ("make", "command:make"),
        ("make test", "command:make test"),
        ("python -m pytest -q", "command:python -m pytest"),
        ("python3.11 -m mypy refagent", "command:python3.11 -m mypy"),
        ("python script.py", "command-exact:python script.py"),  # any script: `python -c ...` too
        ("ls -la", "command:ls"),
        ("/usr/bin/env python x.py", "command-exact:/usr/bin/env python x.py"),
        ("FOO=1 pytest -q", "command-exact:FOO=1 pytest -q"),  # PYTEST_ADDOPTS=-p... is one too
        ("PATH=/tmp/evil:$PATH git status", "command-exact:PATH=/tmp/evil:$PATH git status"),
        ("pytest -q 2>&1", "command:pytest"),
        ("ls >/dev/null", "command:ls"),
        ("cd src && pytest", "command-exact:cd src && pytest"),
        ("pytest; rm -rf /", "command-exact:pytest; rm -rf /"),
        ("pytest | tail -5", "command-exact:pytest | tail -5"),
        ("pytest > out.txt", "command-exact:pytest > out.txt"),
        ("sleep 1 &", "command-exact:sleep 1 &"),
        ("echo $(whoami)", "command-exact:echo $(whoami)"),
        ("echo `whoami`", "command-exact:echo `whoami`"),
        ("git status a#b; rm x", "command-exact:git status a#b; rm x"),
        ("pytest\nrm -rf /", "command-exact:pytest\nrm -rf /"),
        ("sudo apt install x", "command-exact:sudo apt install x"),
        ("bash -c 'pytest'", "command-exact:bash -c 'pytest'"),
        ("xargs rm < files", "command-exact:xargs rm < files"),
        ("rm -rf build", "command-exact:rm -rf build"),
        ("find . -name '*.pyc' -delete", "command-exact:find . -name '*.pyc' -delete"),
        ("echo 'unbalanced", "command-exact:echo 'unbalanced"),
        ("echo 'a; b'", "command-exact:echo 'a; b'"),  # quotes can hide anything
        ("'my tool' --flag", "command-exact:'my tool' --flag"),
        ("git status -s src", "command:git status"),
        ("git diff --stat src/", "command:git diff"),
        ("ls -la src", "command:ls"),
        (".venv/bin/python -m pytest -q", "command:.venv/bin/python -m pytest"),
    ],
)
def test_permission_scope(command: str, key: str) -> None:
    assert permission_scope(command)[0] == key


def test_permission_labels() -> None:
    assert permission_scope("git status")[1] == "`git status` with read-only options and relative paths"
    assert permission_scope("npm run test")[1] == "`npm run test` with no other arguments"
    assert permission_scope("a && b")[1] == "exactly this command"


async def test_run_a_real_command(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("hello\n")
    ctx = make_ctx(str(tmp_path))
    tool = RunCommand()
    assert tool.title({"command": "cat f.txt"}) == "Run `cat f.txt`"
    plan = await tool.prepare({"command": "cat f.txt; echo err >&2", "cwd": "sub"}, ctx)
    assert plan.mutating
    assert plan.title == "Run `cat f.txt; echo err >&2` in sub"
    assert plan.permission_key == "command-exact:cat f.txt; echo err >&2"
    result = await plan.execute()
    assert result.output == "hello\nerr\n\nExit code: 0"
    assert not result.failed
    assert result.raw_output["exit_code"] == 0
    assert result.content[0]["type"] == "content"
    assert sent(ctx) == []  # a local process has no terminal to embed


async def test_a_failing_command_is_failed_but_the_model_reads_the_output(tmp_path: Path) -> None:
    result = await call(RunCommand(), make_ctx(str(tmp_path)), command="echo oops; exit 3")
    assert result.failed
    assert result.output == "oops\n\nExit code: 3"
    quiet = await call(RunCommand(), make_ctx(str(tmp_path)), command="true")
    assert quiet.output == "(no output)\n\nExit code: 0"


@pytest.mark.slow
async def test_a_command_that_runs_too_long_is_killed(tmp_path: Path) -> None:
    result = await call(RunCommand(), make_ctx(str(tmp_path)), command="echo started; sleep 30", timeout_seconds=1)
    assert result.failed
    assert result.output.startswith("started\n")
    assert result.output.endswith("Timed out after 1 s; the command was killed.")


async def test_an_editor_terminal_is_embedded_in_the_call(tmp_path: Path) -> None:
    terminals = ScriptedTerminals(CommandResult(output="ok\n", exit_code=0))
    ctx = make_ctx(str(tmp_path), terminals=terminals, call_id="call_42")
    result = await call(RunCommand(), ctx, command="pytest -q", timeout_seconds=30)
    assert terminals.calls == [("pytest -q", str(tmp_path), 30.0)]
    assert sent(ctx) == [
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_42",
            "content": [{"type": "terminal", "terminalId": "term_1"}],
        }
    ]
    assert result.content == [{"type": "terminal", "terminalId": "term_1"}]
    assert result.output == "ok\n\nExit code: 0"


async def test_signals_truncation_and_long_output(tmp_path: Path) -> None:
    big = "a" * MAX_OUTPUT_CHARS + "the end"
    terminals = ScriptedTerminals(CommandResult(output=big, exit_code=None, signal="SIGKILL", truncated=True))
    result = await call(RunCommand(), make_ctx(str(tmp_path), terminals=terminals), command="yes")
    assert result.failed
    assert "characters omitted" in result.output
    assert result.output.endswith("the end\n\nKilled by signal SIGKILL. (the output was truncated by the terminal)")
    assert len(result.output) < MAX_OUTPUT_CHARS + 200


async def test_long_commands_are_shown_whole_in_the_preview(tmp_path: Path) -> None:
    command = "python -c 'print(1)' " + "--flag " * 20
    plan = await RunCommand().prepare({"command": command}, make_ctx(str(tmp_path)))
    assert plan.title.endswith("…`")
    assert command in plan.preview[0]["content"]["text"]  # type: ignore[typeddict-item]


async def test_argument_errors(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("")
    ctx = make_ctx(str(tmp_path))
    with pytest.raises(ToolError, match=r"empty"):
        await RunCommand().prepare({"command": "  "}, ctx)
    with pytest.raises(ToolError, match=r"between 1 and 600"):
        await RunCommand().prepare({"command": "ls", "timeout_seconds": 601}, ctx)
    with pytest.raises(ToolError, match=r"not a directory"):
        await RunCommand().prepare({"command": "ls", "cwd": "file.txt"}, ctx)
    with pytest.raises(ToolError, match=r"outside"):
        await RunCommand().prepare({"command": "ls", "cwd": "/"}, ctx)
