"""Opening the session of ``refagent run`` and ``refagent chat`` (:mod:`refagent.client.opening`), against real
``refagent`` processes over real pipes: a new session, ``--resume <id>`` (by ``session/resume``, or by
``session/load`` with its replay), ``--continue`` (the newest session of this directory, never another
directory's), the errors; and what ``refagent run --continue "/undo"`` rests on: a second agent process
reopens the first one's session and ``/undo`` restores the file its turn changed.

Every message the agents send is checked against the ACP schema: the sessions are made through
:class:`~tests.support.helpers_process.AgentProcess` (which checks as it reads), and the clients under test
keep the wire (``open_agent``'s ``transcript``), checked at the end of each test (:func:`check_wire`).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.connection import Connection
from refagent.acp.errors import MethodNotFound
from refagent.client.agent_process import initialize, open_agent
from refagent.client.demo import COPY_IGNORES, default_project
from refagent.client.opening import (
    NoEarlierSession,
    NoSuchSession,
    NotSupported,
    OpenedSession,
    find_session,
    list_sessions,
    open_session,
)
from refagent.client.render import Renderer
from refagent.client.run import RunOptions, run
from refagent.testing.transcript import Transcript
from tests.support import process_sessions
from tests.support.acp_schema import checked_wire
from tests.support.process_sessions import prompted_sessions

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = [sys.executable, "-m", "refagent"]
DEMO_PROJECT = default_project()


def env_for(tmp_path: Path) -> dict[str, str]:
    """An agent on the built-in models, with its sessions under ``tmp_path/data``."""
    return process_sessions.env_for(tmp_path, None, REFAGENT_DEMO_PACE="0", PYTHONDONTWRITEBYTECODE="1")


def check_wire(wire: io.StringIO) -> Transcript:
    """Every message the agent sent on ``wire`` (``open_agent``'s transcript), checked against the schema."""
    return checked_wire(wire.getvalue().splitlines())


class Updates:
    """A client that keeps the ``session/update``\\ s it is sent, and asks for nothing."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        raise MethodNotFound(f"Method not found: {method}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/update":
            self.updates.append(params["update"])

    def texts(self, kind: str) -> list[str]:
        return [u["content"]["text"] for u in self.updates if u["sessionUpdate"] == kind]


@asynccontextmanager
async def client(
    tmp_path: Path, *flags: str, wire: io.StringIO | None = None
) -> AsyncIterator[tuple[Connection, dict[str, Any], Updates]]:
    """A client of a new agent process: its connection, the ``initialize`` result, what it was sent."""
    updates = Updates()
    async with open_agent([*AGENT, *flags], updates, env=env_for(tmp_path), transcript=wire) as connection:
        init = await initialize(connection, "test", "test")
        yield connection, init, updates


async def make_sessions(tmp_path: Path, check: Any, *places: tuple[Path, str]) -> list[str]:
    """A session in each directory, with one prompt (its title) on the built-in model, oldest first."""
    return await prompted_sessions(tmp_path, check, env_for(tmp_path), *places)


async def test_a_new_session_by_default(tmp_path: Path) -> None:
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, _):
        opened = await open_session(connection, init, str(tmp_path))
    assert opened.how == "new"
    assert not opened.resumed
    assert not opened.replayed
    assert opened.session_id.startswith("sess_")
    assert opened.cwd == str(tmp_path)
    assert {"modes", "configOptions"} <= set(opened.result)
    check_wire(wire)


async def test_continue_opens_the_newest_session_of_this_directory_only(tmp_path: Path, check: Any) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    older, newer, _other = await make_sessions(
        tmp_path, check, (here, "first here"), (here, "second here"), (elsewhere, "the newest, elsewhere")
    )
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, updates):
        opened = await open_session(connection, init, str(here), latest=True)
        assert (opened.session_id, opened.how, opened.cwd) == (newer, "resume", str(here))
        assert opened.resumed
        assert not opened.replayed
        assert opened.info["title"] == "second here"
        assert updates.texts("user_message_chunk") == []  # resumed: no history sent back
        listed = await list_sessions(connection, init, str(here))
        assert [s["sessionId"] for s in listed] == [newer, older]
        result = await connection.request(
            "session/prompt", {"sessionId": newer, "prompt": [{"type": "text", "text": "and again"}]}
        )
        assert result == {"stopReason": "end_turn"}
        assert "'and again'" in "".join(updates.texts("agent_message_chunk"))
    transcript = check_wire(wire)
    sent = [m["method"] for m in transcript.sent_by("client") if "method" in m]
    assert sent[:3] == ["initialize", "session/list", "session/resume"]


async def test_continue_in_a_directory_without_sessions_says_so(tmp_path: Path, check: Any) -> None:
    await make_sessions(tmp_path, check, (tmp_path / "elsewhere", "not here"))
    empty = tmp_path / "empty"
    empty.mkdir()
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, _):
        with pytest.raises(NoEarlierSession) as caught:
            await open_session(connection, init, str(empty), latest=True)
    assert str(caught.value) == (
        f"no earlier session in {empty}: start one with refagent chat or refagent run (without --continue)"
    )
    check_wire(wire)


async def test_continue_finds_a_session_opened_through_a_link(tmp_path: Path, check: Any) -> None:
    real = tmp_path / "real"
    (sid,) = await make_sessions(tmp_path, check, (real, "made in the real directory"))
    link = tmp_path / "link"
    link.symlink_to(real)
    async with client(tmp_path) as (connection, init, _):
        opened = await open_session(connection, init, str(link), latest=True)
    assert (opened.session_id, opened.cwd) == (sid, str(real))


async def test_resume_by_id_or_its_start_in_the_sessions_own_directory(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    first, second = await make_sessions(tmp_path, check, (project, "hello"), (project, "another"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, _):
        opened = await open_session(connection, init, str(elsewhere), resume=first)
        assert (opened.session_id, opened.how, opened.cwd) == (first, "resume", str(project))
        start = next(n for n in range(6, len(second)) if first[:n] != second[:n])
        by_start = await open_session(connection, init, str(elsewhere), resume=second[:start])
        assert by_start.session_id == second
    check_wire(wire)


async def test_replay_prefers_session_load_and_the_history_arrives_first(tmp_path: Path, check: Any) -> None:
    (sid,) = await make_sessions(tmp_path, check, (tmp_path / "project", "hello"))
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, updates):
        opened = await open_session(connection, init, str(tmp_path), resume=sid, replay=True)
        replayed = list(updates.updates)  # what had arrived when open_session returned
    assert (opened.how, opened.resumed, opened.replayed) == ("load", True, True)
    assert [u["sessionUpdate"] for u in replayed] == ["user_message_chunk", "agent_message_chunk"]
    assert replayed[0]["content"]["text"] == "hello"
    check_wire(wire)


async def test_without_resume_advertised_it_loads_and_without_either_it_cannot(tmp_path: Path, check: Any) -> None:
    (sid,) = await make_sessions(tmp_path, check, (tmp_path / "project", "hello"))
    async with client(tmp_path) as (connection, init, updates):
        capabilities = init["agentCapabilities"]
        no_resume = {
            **init,
            "agentCapabilities": {
                **capabilities,
                "sessionCapabilities": {k: v for k, v in capabilities["sessionCapabilities"].items() if k != "resume"},
            },
        }
        opened = await open_session(connection, no_resume, str(tmp_path), resume=sid)
        assert (opened.how, opened.replayed) == ("load", True)
        assert updates.texts("user_message_chunk") == ["hello"]
        no_list = {**no_resume, "agentCapabilities": {**no_resume["agentCapabilities"], "sessionCapabilities": {}}}
        # Without session/list, the id is taken as it is, and the session opened in the cwd given.
        opened = await open_session(connection, no_list, str(tmp_path), resume=sid)
        assert (opened.session_id, opened.cwd, opened.info) == (sid, str(tmp_path), {})
        with pytest.raises(NotSupported, match="cannot list"):
            await open_session(connection, no_list, str(tmp_path), latest=True)
        neither = {**no_list, "agentCapabilities": {**no_list["agentCapabilities"], "loadSession": False}}
        with pytest.raises(NotSupported, match="cannot reopen sessions"):
            await open_session(connection, neither, str(tmp_path), resume=sid)


async def test_an_unknown_id_is_no_such_session(tmp_path: Path, check: Any, capfd: pytest.CaptureFixture[str]) -> None:
    await make_sessions(tmp_path, check, (tmp_path / "project", "hello"))
    wire = io.StringIO()
    async with client(tmp_path, wire=wire) as (connection, init, _):
        with pytest.raises(NoSuchSession) as listed:
            await open_session(connection, init, str(tmp_path), resume="sess_nope")
        no_list = {**init, "agentCapabilities": {**init["agentCapabilities"], "sessionCapabilities": {"resume": {}}}}
        with pytest.raises(NoSuchSession) as answered:  # the agent's own answer (-32002)
            await open_session(connection, no_list, str(tmp_path), resume="sess_nope")
    assert str(listed.value) == "no session 'sess_nope' (refagent sessions list --all lists them)"
    assert str(answered.value) == "no session 'sess_nope' (the agent answered: Session not found: sess_nope)"
    check_wire(wire)
    assert capfd.readouterr().err == ""  # the agent's log (our stderr) has nothing to say about it


async def test_resume_and_latest_together_is_a_mistake(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        await open_session(None, {}, str(tmp_path), resume="x", latest=True)  # type: ignore[arg-type]


def test_find_session_by_id_or_by_a_start_only_one_id_has() -> None:
    sessions = [{"sessionId": "sess_abc1"}, {"sessionId": "sess_abd2"}, {"sessionId": "sess_ab"}]
    assert find_session(sessions, "sess_ab") == {"sessionId": "sess_ab"}  # whole ids first
    assert find_session(sessions, "sess_abc") == {"sessionId": "sess_abc1"}
    with pytest.raises(NoSuchSession, match="is the start of 3 session ids"):
        find_session(sessions, "sess_a")
    with pytest.raises(NoSuchSession, match="no session ''"):
        find_session(sessions, "")


# -- /undo after --continue ---------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(DEMO_PROJECT, copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def buggy(project: Path) -> bool:
    return "quantity > BULK_QUANTITY" in (project / "shop" / "pricing.py").read_text()


async def fix_the_bug(tmp_path: Path, project: Path) -> str:
    """``refagent run --demo --yes`` (the client in this process): the demo model fixes the bug."""
    wire = io.StringIO()
    options = RunOptions(
        prompt="The tests fail. Fix the bug.",
        cwd=str(project),
        agent=[*AGENT, "--demo"],
        yes=True,
        transcript=wire,
        env=env_for(tmp_path),
    )
    with anyio.fail_after(30):
        outcome = await run(options, Renderer(io.StringIO()), handle_signals=False)
    assert outcome.exit_code == 0
    assert not buggy(project)
    check_wire(wire)
    assert outcome.session_id is not None
    return outcome.session_id


async def undo_in_a_new_process(tmp_path: Path, project: Path, **how: Any) -> tuple[OpenedSession, str]:
    wire = io.StringIO()
    async with client(tmp_path, "--demo", wire=wire) as (connection, init, updates):
        opened = await open_session(connection, init, str(project), **how)
        before = len(updates.updates)
        result = await connection.request(
            "session/prompt", {"sessionId": opened.session_id, "prompt": [{"type": "text", "text": "/undo"}]}
        )
        assert result == {"stopReason": "end_turn"}
        said = "".join(
            u["content"]["text"] for u in updates.updates[before:] if u["sessionUpdate"] == "agent_message_chunk"
        )
    check_wire(wire)
    return opened, said


@pytest.mark.parametrize("how", [{"latest": True}, {"latest": True, "replay": True}])
async def test_undo_after_continue_in_a_new_process_restores_the_file(
    tmp_path: Path, project: Path, how: dict[str, Any]
) -> None:
    session_id = await fix_the_bug(tmp_path, project)
    opened, said = await undo_in_a_new_process(tmp_path, project, **how)
    assert opened.session_id == session_id
    assert buggy(project)  # back as it was before the run
    assert said.startswith(
        f"Restored 1 file to its state before the last turn:\n- {project / 'shop' / 'pricing.py'}\n\n"
    )
    # the undo is recorded: a third process has nothing more to undo
    _, again = await undo_in_a_new_process(tmp_path, project, resume=session_id[:12])
    assert again == "There is nothing to undo: no turn of this session changed files."
    assert buggy(project)


def test_the_command_run_continue_undo_restores_the_previous_runs_change(tmp_path: Path, project: Path) -> None:
    env = env_for(tmp_path)
    command = [*AGENT, "run", "--demo", "--yes", "--cwd", str(project)]
    subprocess.run([*command, "Fix the bug."], env=env, capture_output=True, timeout=60, check=True)
    assert not buggy(project)
    undone = subprocess.run(
        [*command, "--continue", "/undo"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert undone.returncode == 0, undone.stderr
    assert "Restored 1 file to its state" in undone.stdout
    assert buggy(project)


def test_the_command_run_resume_goes_on_with_that_session_and_continue_without_one_fails(
    tmp_path: Path, project: Path
) -> None:
    env = env_for(tmp_path)
    command = [*AGENT, "run", "--demo", "--yes", "--cwd", str(project)]
    nothing = subprocess.run([*command, "--continue", "/undo"], env=env, capture_output=True, text=True, timeout=60)
    assert nothing.returncode == 1
    assert nothing.stderr.count("no earlier session in") == 1, nothing.stderr
    fixed = subprocess.run([*command, "Fix the bug."], env=env, capture_output=True, text=True, timeout=60)
    session_id = next(word for word in fixed.stdout.split() if word.startswith("sess_"))
    unknown = subprocess.run([*command, "--resume", "sess_nope", "/undo"], env=env, capture_output=True, text=True)
    assert unknown.returncode == 1
    assert not buggy(project)
    undone = subprocess.run(
        [*command, "--resume", session_id[:12], "/undo"], env=env, capture_output=True, text=True, timeout=60
    )
    assert undone.returncode == 0, undone.stderr
    assert buggy(project)
    both = subprocess.run([*command, "--continue", "--resume", session_id, "hi"], env=env, capture_output=True)
    assert both.returncode == 2
