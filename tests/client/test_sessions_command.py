"""``refagent sessions list | show | delete`` (:mod:`refagent.client.sessions`), against real ``refagent``
processes over real pipes.

Most tests run the command in this process (:func:`refagent.client.sessions.execute` on parsed arguments,
writing to strings, keeping the wire, which :func:`check_wire` checks against the ACP schema); a few
start ``refagent sessions`` itself, for the exit codes of bad usage, stderr, and a closed stdout. The
sessions are made by real agents (through :class:`~tests.support.helpers_process.AgentProcess`, which
checks every message) or, where a test needs many or old ones, written with the store's own API.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import MethodNotFound
from refagent.client.demo import COPY_IGNORES, default_project
from refagent.client.render import Renderer
from refagent.client.run import RunOptions, run
from refagent.client.sessions import (
    SessionsClient,
    TranscriptRenderer,
    agent_command,
    execute,
    parse_age,
    parse_args,
    session_lines,
    when,
)
from refagent.persistence.store import SessionStore
from refagent.testing.transcript import Transcript
from tests.support import process_sessions
from tests.support.acp_schema import checked_wire
from tests.support.process_sessions import prompted_sessions

pytestmark = pytest.mark.anyio

AGENT = [sys.executable, "-m", "refagent"]
DAY = 86400


def env_for(tmp_path: Path) -> dict[str, str]:
    """An agent on the built-in models, with its sessions under ``tmp_path/data``."""
    return process_sessions.env_for(tmp_path, None, REFAGENT_DEMO_PACE="0", PYTHONDONTWRITEBYTECODE="1")


def store(tmp_path: Path) -> SessionStore:
    return SessionStore(process_sessions.sessions_dir(tmp_path))


def check_wire(wire: io.StringIO) -> Transcript:
    """Every message the agent sent on ``wire`` (``open_agent``'s transcript), checked against the schema."""
    return checked_wire(wire.getvalue().splitlines())


async def sessions(tmp_path: Path, *argv: str) -> tuple[int, str, str, Transcript]:
    """``refagent sessions *argv`` in this process: exit code, stdout, stderr, the wire (checked)."""
    out, err, wire = io.StringIO(), io.StringIO(), io.StringIO()
    with anyio.fail_after(30):
        code = await execute(parse_args(list(argv)), out, err, env=env_for(tmp_path), transcript=wire)
    return code, out.getvalue(), err.getvalue(), check_wire(wire)


async def make_sessions(tmp_path: Path, check: Any, *places: tuple[Path, str]) -> list[str]:
    """A session in each directory, with one prompt (its title) on the built-in model, oldest first."""
    return await prompted_sessions(tmp_path, check, env_for(tmp_path), *places)


def stamp(moment: float) -> str:
    """``moment`` as the agent writes times (ISO 8601, UTC, milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{int(moment * 1000) % 1000:03d}Z"


def methods(transcript: Transcript) -> list[str]:
    return [m["method"] for m in transcript.sent_by("client") if "method" in m]


# -- list -------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_list_shows_this_directorys_sessions_newest_first(tmp_path: Path, check: Any) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    older, newer, other = await make_sessions(
        tmp_path, check, (here, "first here"), (here, "second here"), (elsewhere, "over there")
    )
    code, out, err, wire = await sessions(tmp_path, "list", "--cwd", str(here))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"{newer}  just now  second here", f"{older}  just now  first here"]
    assert methods(wire) == ["initialize", "session/list"]
    assert wire.sent_by("client")[1]["params"] == {"cwd": str(here)}

    code, out, err, wire = await sessions(tmp_path, "list", "--all")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{other}  just now  {elsewhere}  over there",
        f"{newer}  just now  {here}       second here",
        f"{older}  just now  {here}       first here",
    ]
    assert wire.sent_by("client")[1]["params"] == {}  # no cwd: every directory's

    code, out, _, _ = await sessions(tmp_path, "list", "--all", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(s["sessionId"], s["cwd"], s["title"]) for s in listed] == [
        (other, str(elsewhere), "over there"),
        (newer, str(here), "second here"),
        (older, str(here), "first here"),
    ]


@pytest.mark.slow
async def test_list_in_a_directory_without_sessions(tmp_path: Path) -> None:
    code, out, err, _ = await sessions(tmp_path, "list", "--cwd", str(tmp_path))
    assert (code, out) == (0, "")
    assert err == f"No sessions in {tmp_path} (refagent sessions list --all lists every directory's).\n"


@pytest.mark.slow
async def test_list_follows_the_pages(tmp_path: Path) -> None:
    saved = store(tmp_path)
    ids = [f"sess_{n:032x}" for n in range(57)]  # more than a page (50)
    for n, sid in enumerate(ids):
        saved.create(sid, str(tmp_path), [])
        saved.touch(
            sid, title=f"number {n}", updated_at=stamp(time.time() - (60 - n) * 3600)
        )  # the last made is the newest
    code, out, _, wire = await sessions(tmp_path, "list", "--cwd", str(tmp_path))
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ids[::-1]
    assert out.splitlines()[0].endswith("  4 h ago     number 56")
    assert methods(wire) == ["initialize", "session/list", "session/list"]
    assert "cursor" in wire.sent_by("client")[2]["params"]


@pytest.mark.slow
async def test_titles_and_transcripts_cannot_drive_the_terminal(tmp_path: Path, check: Any) -> None:
    (sid,) = await make_sessions(tmp_path, check, (tmp_path / "p", "clear \x1b[2J the\rscreen\nplease"))
    code, out, _, _ = await sessions(tmp_path, "list", "--cwd", str(tmp_path / "p"))
    assert code == 0
    assert out == f"{sid}  just now  clear \\x1b[2J the screen please\n"  # the ESC shown, not sent
    code, out, _, _ = await sessions(tmp_path, "show", sid)
    assert code == 0
    assert "\x1b" not in out
    assert "\r" not in out
    assert "you: clear \\x1b[2J the\\rscreen\nplease" in out


# -- show -------------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(default_project(), copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


async def fix_the_bug(tmp_path: Path, project: Path) -> str:
    """``refagent run --demo --yes`` (the client in this process): the demo model fixes the bug."""
    wire = io.StringIO()
    options = RunOptions("The tests fail. Fix the bug.", str(project), [*AGENT, "--demo"], yes=True, transcript=wire)
    options.env = env_for(tmp_path)
    with anyio.fail_after(30):
        outcome = await run(options, Renderer(io.StringIO()), handle_signals=False)
    assert outcome.exit_code == 0
    check_wire(wire)
    assert outcome.session_id is not None
    return outcome.session_id


@pytest.mark.slow
async def test_show_prints_the_transcript_as_plain_text(tmp_path: Path, project: Path) -> None:
    sid = await fix_the_bug(tmp_path, project)
    listed_before = (await sessions(tmp_path, "list", "--all", "--json"))[1]
    code, out, err, wire = await sessions(tmp_path, "show", sid[:10])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"{sid}  The tests fail. Fix the bug."
    assert lines[1].startswith(f"{project} · updated ")
    assert lines[1].endswith("(just now)")
    assert "you: The tests fail. Fix the bug." in lines
    assert any(line.startswith("thinking: ") for line in lines)
    for expected in (
        "Plan",
        "  ✓ Run the tests again to confirm the fix",
        "● Run `python3 -m unittest` (execute)",
        "    │ FAILED (failures=1)",  # a command's output, as a live session shows it
        "● Edit shop/pricing.py (edit)",
        "    --- a/shop/pricing.py",
        "    -    if quantity > BULK_QUANTITY:",
        "    +    if quantity >= BULK_QUANTITY:",
        "  ✓ completed",
        "  ✗ failed",  # the first test run
    ):
        assert expected in lines, expected
    assert lines.count("    -    if quantity > BULK_QUANTITY:") == 1  # the diff once
    assert "\x1b[" not in out  # not a terminal: no colors
    assert out.endswith("and all 7 tests pass now.\n")
    assert methods(wire) == ["initialize", "session/list", "session/load", "session/close"]
    load = wire.sent_by("client")[2]["params"]
    assert load == {"sessionId": sid, "cwd": str(project), "mcpServers": []}
    listed_after = (await sessions(tmp_path, "list", "--all", "--json"))[1]
    assert listed_after == listed_before  # looking changes nothing


@pytest.mark.slow
async def test_show_an_unknown_id_fails_clearly(tmp_path: Path, check: Any) -> None:
    first, second = await make_sessions(tmp_path, check, (tmp_path / "p", "one"), (tmp_path / "p", "two"))
    code, out, err, _ = await sessions(tmp_path, "show", "sess_nope")
    assert (code, out) == (1, "")
    assert err == "error: no session 'sess_nope' (refagent sessions list --all lists them)\n"
    code, out, err, _ = await sessions(tmp_path, "show", "sess_")
    assert (code, out) == (1, "")
    assert err.startswith("error: 'sess_' is the start of 2 session ids (")
    assert first in err
    assert second in err


# -- delete -----------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_delete_by_id(tmp_path: Path, check: Any) -> None:
    here = tmp_path / "here"
    keep, gone = await make_sessions(tmp_path, check, (here, "keep me"), (here, "delete me"))
    code, out, err, _ = await sessions(tmp_path, "delete", gone, "sess_nope")
    assert (code, out) == (1, "")  # one unknown id: nothing deleted
    assert err == "error: no session 'sess_nope' (refagent sessions list --all lists them)\n"
    assert (store(tmp_path).root / f"{gone}.jsonl").exists()

    code, out, err, wire = await sessions(tmp_path, "delete", gone[:12])
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"deleted  {gone}  just now  delete me", "Deleted 1 session."]
    assert methods(wire) == ["initialize", "session/list", "session/delete"]
    assert not (store(tmp_path).root / f"{gone}.jsonl").exists()
    assert not (store(tmp_path).root / f"{gone}.replay").exists()
    code, out, _, _ = await sessions(tmp_path, "list", "--cwd", str(here))
    assert out.splitlines() == [f"{keep}  just now  keep me"]


@pytest.mark.slow
async def test_delete_older_than(tmp_path: Path) -> None:
    saved = store(tmp_path)
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    now = time.time()
    ages = {"sess_old": 40 * DAY, "sess_recent": 2 * DAY, "sess_old_elsewhere": 60 * DAY}
    for sid, age in ages.items():
        saved.create(sid, str(elsewhere if sid.endswith("elsewhere") else here), [])
        saved.touch(sid, title=sid.removeprefix("sess_"), updated_at=stamp(now - age))
    old_date = time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 40 * DAY))

    code, out, _, wire = await sessions(tmp_path, "delete", "--older-than", "30d", "--cwd", str(here), "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        f"would delete  sess_old  {old_date}  old",
        f"Would delete 1 session last updated more than 30d ago in {here}.",
    ]
    assert "session/delete" not in methods(wire)
    assert (saved.root / "sess_old.jsonl").exists()

    code, out, _, _ = await sessions(tmp_path, "delete", "--older-than", "30d", "--cwd", str(here))
    assert code == 0
    assert out.splitlines() == [
        f"deleted  sess_old  {old_date}  old",
        f"Deleted 1 session last updated more than 30d ago in {here}.",
    ]
    assert sorted(p.name for p in saved.root.glob("*.jsonl")) == ["sess_old_elsewhere.jsonl", "sess_recent.jsonl"]

    code, out, _, _ = await sessions(tmp_path, "delete", "--older-than", "1w", "--all")
    assert code == 0
    assert out.splitlines()[-1] == "Deleted 1 session last updated more than 1w ago."
    assert out.splitlines()[0].startswith("deleted  sess_old_elsewhere  ")
    assert f"  {elsewhere}  old_elsewhere" in out.splitlines()[0]
    assert sorted(p.name for p in saved.root.glob("*.jsonl")) == ["sess_recent.jsonl"]

    code, out, _, _ = await sessions(tmp_path, "delete", "--older-than", "12h", "--all", "-n")
    assert out.splitlines() == [
        f"would delete  sess_recent  2 days ago  {here}  recent",
        "Would delete 1 session last updated more than 12h ago.",
    ]


# -- the pieces -------------------------------------------------------------------------------------


def test_no_command_lists() -> None:
    """``refagent sessions`` (and ``refagent sessions --all``) list, as ``refagent sessions list`` would."""
    assert parse_args([]).command == "list"
    assert (parse_args(["--all"]).command, parse_args(["--all"]).all) == ("list", True)
    assert parse_args(["show", "abc"]).command == "show"


def test_ages_and_times() -> None:
    assert parse_age("30d").seconds == 30 * DAY
    assert parse_age("12h").seconds == 12 * 3600
    assert parse_age("2w").seconds == 14 * DAY
    assert parse_age("1.5d").seconds == 1.5 * DAY
    now = 1_750_000_000.0
    utc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    assert when(f"{utc}.000Z", now + 5) == "just now"
    assert when(f"{utc}.000Z", now + 3 * 60 + 5) == "3 min ago"
    assert when(f"{utc}.000Z", now + 5 * 3600) == "5 h ago"
    assert when(f"{utc}.000Z", now + DAY + 1) == "1 day ago"
    assert when(f"{utc}.000Z", now + 3 * DAY) == "3 days ago"
    assert when(f"{utc}.000Z", now + 30 * DAY) == time.strftime("%Y-%m-%d %H:%M", time.localtime(now))
    assert when(f"{utc}.000Z", now - 3600) == time.strftime("%Y-%m-%d %H:%M", time.localtime(now))  # a clock ahead
    assert when("yesterday", now) == "?"
    assert when(None, now) == "?"


@pytest.mark.parametrize("age", ["30", "d", "30x", "-3d", "0d", "30 days"])
def test_a_bad_age_is_bad_usage(age: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["delete", f"--older-than={age}"])
    assert exited.value.code == 2
    assert "is not an age: a number and h, d or w (e.g. 30d)" in capsys.readouterr().err


def test_the_table_lines_up_and_says_untitled() -> None:
    entries = [
        {"sessionId": "sess_a", "cwd": "/p", "title": "t"},
        {"sessionId": "sess_bbb", "cwd": "/longer", "updatedAt": "2020-01-01T00:00:00.000Z"},
    ]
    lines = session_lines(entries, time.time(), directories=True)
    date = time.strftime("%Y-%m-%d %H:%M", time.localtime(1577836800))
    assert lines == [
        "sess_a    ?                 /p       t",
        f"sess_bbb  {date}  /longer  (untitled)",
    ]


def test_the_agent_started() -> None:
    assert agent_command(parse_args(["list"])) == [*AGENT, "--demo", "--log-level", "error"]
    assert agent_command(parse_args(["list", "--log-level", "debug", "--log-file", "/tmp/x.log"])) == [
        *AGENT,
        "--demo",
        "--log-level",
        "debug",
        "--log-file",
        "/tmp/x.log",
    ]
    assert agent_command(parse_args(["show", "x", "--agent", "my-agent --flag"])) == ["my-agent", "--flag"]


async def test_the_client_answers_no_request() -> None:
    client = SessionsClient()
    for method in ("session/request_permission", "fs/read_text_file", "terminal/create"):
        with pytest.raises(MethodNotFound):
            await client.handle_request(method, {"sessionId": "s"})


class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


async def test_a_pipe_closed_during_the_replay_stops_the_drawing_quietly() -> None:
    client = SessionsClient()
    client.show("s", TranscriptRenderer(ClosedPipe()))
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    await client.handle_notification("session/update", {"sessionId": "s", "update": chunk})
    assert client.broken
    assert client.renderer is None
    await client.handle_notification("session/update", {"sessionId": "s", "update": chunk})  # not drawn


async def test_an_agent_that_cannot_start(tmp_path: Path) -> None:
    code, out, err, _ = await sessions(tmp_path, "list", "--agent", str(tmp_path / "no-such-agent"))
    assert (code, out) == (1, "")
    assert err.startswith("error: cannot start the agent")


# -- the command ------------------------------------------------------------------------------------


def command(*args: str) -> list[str]:
    return [*AGENT, "sessions", *args]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["remove"], "invalid choice: 'remove'"),
        (["show"], "the following arguments are required: id"),
        (["delete"], "give session ids, or --older-than AGE"),
        (["delete", "sess_x", "--older-than", "3d"], "give session ids, or --older-than AGE"),
        (["delete", "sess_x", "--all"], "--all and --cwd go with --older-than"),
        (["list", "--all", "--cwd", "/tmp"], "not allowed with argument"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, argv: list[str], says: str) -> None:
    result = subprocess.run(
        command(*argv), env=env_for(tmp_path), capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert says in result.stderr


@pytest.mark.slow
def test_the_command_unknown_id_exits_1_with_one_line_on_stderr(tmp_path: Path) -> None:
    result = subprocess.run(
        command("show", "sess_nope"), env=env_for(tmp_path), capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "error: no session 'sess_nope' (refagent sessions list --all lists them)\n"


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    saved = store(tmp_path)
    saved.create("sess_one", str(tmp_path), [])
    saved.touch("sess_one", title="one")
    for argv in (["list", "--cwd", str(tmp_path)], ["show", "sess_one"]):
        process = subprocess.Popen(
            command(*argv), env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        process.stdout.close()  # before anything was written: the first write meets a closed pipe
        _, err = process.communicate(timeout=30)
        assert (process.returncode, err) == (141, ""), argv


def test_help() -> None:
    top = subprocess.run([*AGENT, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "sessions the saved sessions: list (the default), show ID, delete ID" in " ".join(top.split())
    usage = subprocess.run(command("--help"), capture_output=True, text=True, timeout=30, check=True).stdout
    for word in ("list", "show", "delete", "Exit codes"):
        assert word in usage
    usage = subprocess.run(command("delete", "--help"), capture_output=True, text=True, timeout=30, check=True).stdout
    for flag in ("--older-than", "--dry-run", "--all", "--cwd", "--agent"):
        assert flag in usage
