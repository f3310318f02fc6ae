"""Both sides of each backend pair pass the same behavioural tests: the editor's terminals (through a
fake editor that runs real processes) and local processes; the editor's files and the local disk."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import MethodNotFound, RequestError
from refagent.errors import ToolError
from refagent.sandbox.confine.confinement import UNCONFINED
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.disk.tracker import FileTracker
from refagent.sandbox.editor.files import EditorFiles
from refagent.sandbox.editor.terminals import EditorTerminals
from refagent.sandbox.local import Sandbox
from refagent.sandbox.seams import FromDisk
from refagent.sandbox.search.dispatch import LocalSearch
from refagent.testing.memory import FakeClient
from refagent.testing.terminals import FakeTerminalHost
from refagent.tools.base import Terminals, TextFiles
from tests.support.clients import session_client
from tests.support.procs import alive
from tests.support.tool_fakes import DirectPeer

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["local", "editor"])
async def terminals(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Terminals, FakeTerminalHost | None]]:
    if request.param == "local":
        yield LocalTerminals(), None
        return
    async with FakeTerminalHost() as host:
        client = FakeClient(extra=host.handlers())
        yield EditorTerminals(session_client(DirectPeer(client.handle_request), "sess_1")), host
        assert host.live == [], "every terminal must be released"


async def test_command_output_and_exit_code(terminals: Any, tmp_path: Path) -> None:
    backend, _ = terminals
    result = await backend.run("echo hello; echo oops >&2; exit 3", str(tmp_path), 10)
    assert result.exit_code == 3
    assert "hello" in result.output
    assert "oops" in result.output
    assert not result.timed_out


async def test_runs_in_the_given_directory(terminals: Any, tmp_path: Path) -> None:
    backend, _ = terminals
    result = await backend.run("pwd", str(tmp_path), 10)
    assert result.output.strip() == str(tmp_path)
    assert result.exit_code == 0


@pytest.mark.slow
async def test_time_limit_kills(terminals: Any, tmp_path: Path) -> None:
    backend, host = terminals
    with anyio.fail_after(10):
        result = await backend.run("echo started; sleep 30", str(tmp_path), 0.5)
    assert result.timed_out
    assert "started" in result.output
    if host is not None:
        assert [c for c, _ in host.calls if c in ("kill", "release")] == ["kill", "release"]


async def test_cancel_kills_and_releases(terminals: Any, tmp_path: Path) -> None:
    backend, host = terminals
    pid_file = tmp_path / "pid"
    with anyio.move_on_after(0.3):
        await backend.run(f"echo $$ > {pid_file}; exec sleep 30", str(tmp_path), 60)
    # Another process's state has no event to wait on: poll it, bounded.
    with anyio.fail_after(5):
        while not pid_file.exists() or not pid_file.read_text().strip():  # noqa: ASYNC110
            await anyio.sleep(0.01)
    pid = int(pid_file.read_text())
    with anyio.fail_after(5):
        while alive(pid):  # noqa: ASYNC110
            await anyio.sleep(0.01)
    if host is not None:
        assert host.live == []


async def test_editor_terminal_is_embedded_before_it_runs(tmp_path: Path) -> None:
    async with FakeTerminalHost() as host:
        client = FakeClient(extra=host.handlers())
        started: list[str] = []

        async def on_start(terminal_id: str) -> None:
            started.append(terminal_id)

        result = await EditorTerminals(session_client(DirectPeer(client.handle_request))).run(
            "echo hi", str(tmp_path), 10, on_start
        )
        assert started == ["term_1"]
        assert result.output == "hi\n"
        create = host.calls[0][1]
        assert create["command"] == "/bin/sh"
        assert create["args"] == ["-c", "echo hi"]
        assert create["outputByteLimit"] > 0


async def test_editor_terminal_errors_become_tool_errors(tmp_path: Path) -> None:
    client = FakeClient()  # supports no terminal methods
    with pytest.raises(ToolError, match="could not start a terminal"):
        await EditorTerminals(session_client(DirectPeer(client.handle_request))).run("echo hi", str(tmp_path), 10)


# -- text files -----------------------------------------------------------------------------------


@pytest.fixture(params=["local", "editor"])
def files(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[TextFiles, Callable[[str], str | None]]:
    """A backend and a way to see a file's content where that backend keeps it."""
    if request.param == "local":
        return LocalFileSystem(), lambda p: Path(p).read_text() if Path(p).exists() else None
    client = FakeClient()
    backend = EditorFiles(
        session_client(DirectPeer(client.handle_request)), LocalFileSystem(), RootPolicy(str(tmp_path), [])
    )
    return backend, client.files.get


async def test_write_then_read(files: Any, tmp_path: Path) -> None:
    backend, stored = files
    path = str(tmp_path / "a.txt")
    await backend.write_text(path, "one\ntwo\n")
    assert stored(path) == "one\ntwo\n"
    assert await backend.read_text(path) == "one\ntwo\n"


async def test_missing_file(files: Any, tmp_path: Path) -> None:
    backend, _ = files
    with pytest.raises(FileNotFoundError):
        await backend.read_text(str(tmp_path / "missing.txt"))


async def test_a_write_the_editor_refuses_fails_and_is_not_done_on_the_disk(tmp_path: Path) -> None:
    client = FakeClient(fs_error=RequestError("writes are disabled by the user"))
    backend = EditorFiles(
        session_client(DirectPeer(client.handle_request)), LocalFileSystem(), RootPolicy(str(tmp_path), [])
    )
    with pytest.raises(ToolError, match="writes are disabled by the user"):
        await backend.write_text(str(tmp_path / "a"), "x")
    assert not (tmp_path / "a").exists()


async def test_a_read_the_editor_fails_inside_the_roots_comes_from_the_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An editor that answers a read with an error (CodeCompanion's ``invalid sessionId`` when two sessions
    opened at once): the file inside the roots is read from the disk, the model told so, the editor's error
    logged once per session. Outside the roots, the editor's error stands."""
    client = FakeClient(fs_error=RequestError("invalid sessionId", code=-32602))
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    backend = EditorFiles(
        session_client(DirectPeer(client.handle_request)), LocalFileSystem(), RootPolicy(str(workspace), [])
    )
    (workspace / "b").write_text("disk\n")
    (workspace / "c").write_text("more\n")
    (outside / "d").write_text("secret\n")
    with caplog.at_level(logging.WARNING, logger="refagent.sandbox.editor.files"):
        text = await backend.read_text(str(workspace / "b"))
        again = await backend.read_text(str(workspace / "c"))
        with pytest.raises(ToolError, match=r"The editor refused to read .*invalid sessionId"):
            await backend.read_text(str(outside / "d"))
    assert (text, again) == ("disk\n", "more\n")
    assert isinstance(text, FromDisk)
    assert text.note == (
        f"The editor could not give its copy of {workspace}/b (invalid sessionId), so it was read from the disk: "
        "changes not yet saved in the editor may be missing."
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"the editor failed to read {workspace}/b (invalid sessionId); reading from the disk instead"
    ]
    with pytest.raises(FileNotFoundError):  # and a file the disk has not either is missing, not an error
        await backend.read_text(str(workspace / "missing"))


@pytest.mark.parametrize(
    "refusal",
    [
        RequestError("Permission denied", code=-32000),  # an editor whose user keeps the file from agents
        RequestError("Internal error", data={"details": "EACCES: permission denied"}, code=-32603),
        RequestError("Invalid params", data={"details": "path is excluded by the user's settings"}, code=-32602),
        RequestError("Request cancelled", code=-32800),
    ],
)
async def test_a_read_the_editor_refuses_is_not_read_from_the_disk(tmp_path: Path, refusal: RequestError) -> None:
    """The editor decides what it shares: its refusal of a read inside the roots stands, with its words,
    and the file's text reaches no one. Only an editor that lost the session is read around (above)."""
    client = FakeClient(fs_error=refusal)
    backend = EditorFiles(
        session_client(DirectPeer(client.handle_request)), LocalFileSystem(), RootPolicy(str(tmp_path), [])
    )
    (tmp_path / ".env").write_text("API_TOKEN=hunter2\n")
    with pytest.raises(ToolError) as refused:
        await backend.read_text(str(tmp_path / ".env"))
    assert str(refused.value).startswith(f"The editor refused to read {tmp_path}/.env: {refusal.message}")
    assert "It was not read another way" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert backend.editor_failed is False


def _sandbox(tmp_path: Path, *, confined: bool = True, editor_files: bool = True) -> Sandbox:
    confinement = UNCONFINED if confined else None
    return Sandbox(
        policy=RootPolicy(str(tmp_path), []),
        disk=LocalFileSystem(),
        terminals=LocalTerminals(),
        reads=FileTracker(),
        search=LocalSearch(),
        confinement=confinement,
        editor_files=editor_files,
    )


async def test_the_sandbox_joins_what_the_client_offers(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    peer = DirectPeer(lambda m, p: _unsupported(m))
    nothing = session_client(peer, capabilities={})
    assert sandbox.files_with(nothing) is sandbox.disk
    assert sandbox.files_with(session_client(peer, capabilities={"fs": {"readTextFile": False}})) is sandbox.disk
    mixed = sandbox.files_with(session_client(peer, capabilities={"fs": {"readTextFile": True}}))
    assert isinstance(mixed, EditorFiles)
    assert (mixed.read, mixed.write) == (True, False)
    assert mixed.policy is sandbox.policy  # the editor's files are checked by the sandbox's own policy
    assert sandbox.terminals_with(nothing) is sandbox.terminals
    editor = sandbox.terminals_with(session_client(peer, capabilities={"terminal": True}))
    assert isinstance(editor, EditorTerminals)
    assert editor.confinement is sandbox.confinement  # and its commands run under the sandbox's confinement


async def test_a_sandbox_of_ones_own_holds_whatever_the_client_offers(tmp_path: Path) -> None:
    """A sandbox with its own terminals (no launcher to run in the editor's) and a disk the editor does not
    see keeps both, even with a client that offers its files and terminals."""
    sandbox = _sandbox(tmp_path, confined=False, editor_files=False)
    everything = session_client(DirectPeer(lambda m, p: _unsupported(m)))
    assert sandbox.files_with(everything) is sandbox.disk
    assert sandbox.terminals_with(everything) is sandbox.terminals


async def _unsupported(method: str) -> Any:
    raise MethodNotFound(method)


async def test_a_terminal_the_editor_makes_after_a_cancel_is_released() -> None:
    """The turn is cancelled while the editor is making the terminal: its answer still comes, and the
    terminal it names (running the command) is released, not left to no one."""
    answer = anyio.Event()
    created: list[str] = []
    released: list[str] = []

    async def create(params: dict[str, Any]) -> dict[str, Any]:
        await answer.wait()  # the editor is slow: it answers after the agent's cancel
        created.append("term_late")
        return {"terminalId": "term_late"}

    async def release(params: dict[str, Any]) -> dict[str, Any]:
        released.append(params["terminalId"])
        return {}

    async def wait_for_exit(params: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    handlers = {"terminal/create": create, "terminal/release": release, "terminal/wait_for_exit": wait_for_exit}
    client = FakeClient(extra=handlers)
    terminals = EditorTerminals(session_client(DirectPeer(client.handle_request), "sess_1"))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(terminals.run, "sleep 100", "/", 60)
            await anyio.wait_all_tasks_blocked()
            tasks.cancel_scope.cancel()  # the turn's cancel, while terminal/create waits
            answer.set()
    assert created == ["term_late"]
    assert released == ["term_late"]
