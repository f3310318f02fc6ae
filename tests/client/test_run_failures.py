"""``refagent run`` for scripts: exit codes, one error on stderr, and a stdout closed under it.

Each failure runs the real command (a subprocess) against a real agent: an endpoint that refuses the
connection (a closed port on 127.0.0.1), a host name that does not resolve (a resolver shim: no network), a
rejected key, a model the endpoint does not serve (the scripted server), a broken config file, an unknown
``--profile``, ``max_requests`` 0, an agent that exits at once; and bad usage, which exits 2. The agent
keeps answering such a turn ``end_turn``, with the failure in ``_meta`` on its message and on the
response; the command prints ``error: <message>`` once on stderr and exits 1. Every message the agent
sends is checked against the ACP schema: the ``--json`` transcript, or, without ``--json``, what a ``tee``
between the client and the agent saw.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.client.demo import COPY_IGNORES, default_project
from refagent.client.handler import Failure, TerminalClient, failure_of
from refagent.client.render import EXIT_OUTPUT_CLOSED, QuietPipe, Renderer
from refagent.client.run import NO_TERMINAL, RunOptions, run
from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, Turn
from refagent.testing.transcript import Transcript
from tests.support.acp_schema import checked_wire, validate_agent_message
from tests.support.helpers_process import agent_env

pytestmark = pytest.mark.anyio

AGENT = [sys.executable, "-m", "refagent"]
KEY = "sk-the-right-key"
WRONG_KEY = "sk-wrong-key-0123"
LOG_LINE = (" WARNING ", " ERROR ", "Traceback", "Exception ignored")
"""What a log line or a traceback on stderr looks like: none belongs there when an error is reported."""


def run_command(
    args: list[str], env: dict[str, str], *, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**env, "NO_COLOR": "1"}  # the lines as they read, whatever FORCE_COLOR the runner has
    return subprocess.run(
        [*AGENT, "run", *args], env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def checked(lines: list[str]) -> Transcript:
    """The ``--json`` transcript, every message the agent sent checked against the schema."""
    return checked_wire(lines)


def failure_in(transcript: Transcript) -> dict[str, Any]:
    """The failure the turn's response carries; its message chunk carries the same."""
    [response] = [m for m in transcript.sent_by("agent") if "stopReason" in (m.get("result") or {})]
    assert response["result"]["stopReason"] == "end_turn"
    failure: dict[str, Any] = response["result"]["_meta"]["refagent"]["failure"]
    [chunk] = [u for u in transcript.updates() if u["sessionUpdate"] == "agent_message_chunk"]
    assert chunk["_meta"]["refagent"]["failure"] == failure
    assert chunk["content"]["text"] == failure["message"]
    return failure


def said_once(stderr: str, message: str) -> None:
    """``error: message`` once on stderr, and nothing of a log or a traceback."""
    assert stderr.count(message) == 1, stderr
    assert f"error: {message}\n" in stderr
    for sign in LOG_LINE:
        assert sign not in stderr, stderr


def teed(tmp_path: Path) -> str:
    """``--agent``: refagent, with ``tee`` on both of its pipes (:func:`teed_transcript` reads them), for a run
    whose own stdout is not the transcript."""
    client, agent = (shlex.quote(str(tmp_path / name)) for name in ("client.out", "agent.out"))
    return shlex.join(["sh", "-c", f'tee {client} | {shlex.join(AGENT)} "$@" | tee {agent}', "agent"])


def teed_transcript(tmp_path: Path) -> Transcript:
    """What :func:`teed` saw, every message the agent sent checked against the schema."""
    transcript = Transcript(check=validate_agent_message)
    for line in (tmp_path / "client.out").read_bytes().splitlines():  # first: responses find their requests
        transcript.record("client", line)
    for line in (tmp_path / "agent.out").read_bytes().splitlines():
        transcript.record("agent", line)
    return transcript


def closed_port() -> int:
    with ScriptedOpenAIServer() as server:
        return server.port  # nothing listens there once the server has stopped


# -- a turn the model failed: exit 1, the reason once ---------------------------------------------


@pytest.mark.slow
def test_a_refused_connection_while_finding_the_model(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"  # no model named: the agent asks GET /models first
    result = run_command(["--json", "--cwd", str(tmp_path), "hi"], agent_env(tmp_path / "home", OPENAI_BASE_URL=url))
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure == {
        "kind": "model",
        "message": f"Cannot connect to {url}: connection refused (is the server running?).",
    }
    said_once(result.stderr, failure["message"])


@pytest.mark.slow
def test_a_refused_connection_while_asking_the_model(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    config = tmp_path / "config.toml"
    config.write_text(f'[retry]\nattempts = 1\n\n[profiles.local]\nbase_url = "{url}"\nmodel = "m"\n')
    result = run_command(
        ["--json", "--config", str(config), "--cwd", str(tmp_path), "hi"], agent_env(tmp_path / "home")
    )
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure["kind"] == "model"
    assert failure["message"] == (
        f"Cannot connect to {url}: connection refused (is the server running?). Gave up after 1 attempt (model 'm')."
    )
    said_once(result.stderr, failure["message"])


UNKNOWN_HOST = "llm.example.invalid"
NO_SUCH_HOST = f"""
import socket

_getaddrinfo = socket.getaddrinfo


def getaddrinfo(host, *args, **kwargs):
    if host == {UNKNOWN_HOST!r}:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = getaddrinfo
"""
"""A ``sitecustomize`` for the processes of a test: the resolver says one host name does not exist, as a real
one would, without asking any DNS server (tests have no network)."""


@pytest.mark.slow
def test_a_host_name_that_does_not_resolve(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_SUCH_HOST)
    env = agent_env(tmp_path / "home", OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
    env["PYTHONPATH"] = os.pathsep.join([str(shim), env["PYTHONPATH"]])
    url = f"https://{UNKNOWN_HOST}/v1"
    result = run_command(["--json", "--base-url", url, "--cwd", str(tmp_path), "hi"], env)
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure == {
        "kind": "model",
        "message": f"Cannot connect to {url}: its host name was not found (DNS: Name or service not known); "
        "check the URL.",
    }
    said_once(result.stderr, failure["message"])


@contextlib.contextmanager
def self_signed_tls_server(tmp_path: Path) -> Iterator[int]:
    """A TLS server on 127.0.0.1 whose certificate no one trusts (made here with ``openssl``); its port."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection, contextlib.suppress(OSError):  # the client gives up during the handshake
                context.wrap_socket(connection, server_side=True).close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_a_tls_certificate_that_cannot_be_verified(tmp_path: Path) -> None:
    with self_signed_tls_server(tmp_path) as port:
        url = f"https://127.0.0.1:{port}/v1"
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
        result = run_command(["--json", "--cwd", str(tmp_path), "hi"], env)
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure["kind"] == "model"
    unverified = f"Cannot connect to {url}: its TLS certificate could not be verified ("
    assert failure["message"].startswith(unverified), failure
    assert "self-signed certificate" in failure["message"], failure
    said_once(result.stderr, failure["message"])


@pytest.mark.slow
def test_a_rejected_key_names_where_it_came_from_and_never_shows_it(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="never")], api_key=KEY) as server:
        env = agent_env(
            tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=WRONG_KEY, REFAGENT_MODEL="m"
        )
        result = run_command(["--json", "--cwd", str(tmp_path), "hi"], env)
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure == {
        "kind": "auth",
        "message": f"{server.base_url}/chat/completions rejected the key from OPENAI_API_KEY "
        "(401: Incorrect API key provided.). Put a valid key there.",
    }
    said_once(result.stderr, failure["message"])
    assert WRONG_KEY not in result.stderr
    assert WRONG_KEY not in result.stdout


@pytest.mark.slow
def test_a_model_the_endpoint_does_not_serve(tmp_path: Path) -> None:
    gone = Fault.status(404, message="The model `nope` does not exist.")
    with ScriptedOpenAIServer([Turn(fault=gone)], api_key=KEY) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
        result = run_command(["--json", "--model", "nope", "--cwd", str(tmp_path), "hi"], env)
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure["kind"] == "config"
    assert failure["message"].startswith(
        f"{server.base_url}/chat/completions answered 404 for the model 'nope' (The model `nope` does not exist.)"
    )
    assert f"{server.base_url}/models lists its models" in failure["message"]
    said_once(result.stderr, failure["message"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--config", "BROKEN"], {}, "not valid TOML"),
        (["--profile", "nope"], {}, "unknown model profile 'nope' (known: scripted)"),
        ([], {"REFAGENT_MAX_REQUESTS": "0"}, "max_requests must be at least 1, not 0"),
    ],
    ids=["broken-file", "unknown-profile", "max-requests-0"],
)
def test_a_configuration_that_cannot_work(tmp_path: Path, args: list[str], env: dict[str, str], said: str) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[profiles.work\nmodel = 'x'\n")  # an unclosed table header
    args = [str(broken) if a == "BROKEN" else a for a in args]
    result = run_command(["--json", *args, "--cwd", str(tmp_path), "hi"], agent_env(tmp_path / "home", **env))
    assert result.returncode == 1, result.stderr
    failure = failure_in(checked(result.stdout.splitlines()))
    assert failure["kind"] == "config"
    assert failure["message"].startswith("The configuration is broken: ")
    assert said in failure["message"]
    said_once(result.stderr, failure["message"])


@pytest.mark.slow
def test_no_model_set_up_fails_without_sending_the_prompt_and_says_how_to_set_one(tmp_path: Path) -> None:
    result = run_command(["--json", "--cwd", str(tmp_path), "fix the bug"], agent_env(tmp_path / "home"))
    assert result.returncode == 1, result.stderr  # a CI job that lost its key must not go green
    sent = [m.get("method") for m in checked(result.stdout.splitlines()).sent_by("client")]
    assert "session/new" in sent
    assert "session/prompt" not in sent  # the offline model is not asked
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # --json: the session too
    assert line.startswith("error: no model is set up, so the task was not run.")
    for way in ("`refagent login`", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "--model provider/model", "--demo"):
        assert way in line


@pytest.mark.slow
def test_a_missing_key_is_said_once(tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", OPENAI_BASE_URL="https://models.example.com/v1", REFAGENT_MODEL="m")
    result = run_command(["--json", "--cwd", str(tmp_path), "hi"], env)
    assert result.returncode == 1
    checked(result.stdout.splitlines())  # session/new answered "authentication required"
    [line] = [line for line in result.stderr.splitlines() if "OPENAI_API_KEY" in line]
    assert line.startswith("error: ")
    assert "or run `refagent login`" in line
    for sign in LOG_LINE:
        assert sign not in result.stderr


@pytest.mark.parametrize(
    "command", ["false", "true", f"{shlex.quote(sys.executable)} -c 'import os; os.kill(os.getpid(), 9)'"]
)
def test_an_agent_that_exits_at_once_is_said_to_have_exited(tmp_path: Path, command: str) -> None:
    result = run_command(["--agent", command, "--cwd", str(tmp_path), "hi"], agent_env(tmp_path / "home"))
    assert result.returncode == 1
    expected = {"false": "exited (status 1)", "true": "exited (status 0)"}.get(command, "was killed by SIGKILL")
    assert result.stderr == f"error: the agent {expected} before answering\n"
    assert result.stdout == ""


def test_the_session_is_on_stdout_and_the_failure_only_on_stderr(tmp_path: Path) -> None:
    """Without ``--json``: the failure's message is not drawn as the session's text, nor a stop reason."""
    with ScriptedOpenAIServer([Turn(text="never")], api_key=KEY) as server:
        env = agent_env(
            tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=WRONG_KEY, REFAGENT_MODEL="m"
        )
        result = run_command(["--agent", teed(tmp_path), "--cwd", str(tmp_path), "hi"], env)
    failure = failure_in(teed_transcript(tmp_path))
    assert result.returncode == 1
    assert "> hi" in result.stdout
    assert failure["message"] not in result.stdout
    assert "stop reason" not in result.stdout
    said_once(result.stderr, failure["message"])


async def test_in_process_the_error_goes_to_the_error_stream(tmp_path: Path) -> None:
    out, err, wire = io.StringIO(), io.StringIO(), io.StringIO()
    with ScriptedOpenAIServer([Turn(fault=Fault.status(404, message="No such model."))], api_key=KEY) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
        options = RunOptions("hi", str(tmp_path), AGENT, env=env, transcript=wire)
        with anyio.fail_after(30):
            outcome = await run(options, Renderer(out, err=err), handle_signals=False)
    failure = failure_in(checked(wire.getvalue().splitlines()))
    assert (outcome.exit_code, outcome.stop_reason) == (1, "end_turn")
    assert failure["message"] not in out.getvalue()
    assert err.getvalue() == f"error: {failure['message']}\n"


# -- bad usage: exit 2 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "stdin", "said"),
    [
        (["--max-requests", "0", "hi"], "", "argument --max-requests: must be at least 1, not 0"),
        (["--max-requests", "many", "hi"], "", "argument --max-requests: must be a whole number, not 'many'"),
        (["--cwd", "/no/such/dir", "hi"], "", "--cwd /no/such/dir: not a directory"),
        (["  "], "", "the prompt is empty"),
        (["-"], "\n\n", "the prompt is empty (nothing on stdin)"),
        ([], "", "the following arguments are required: prompt"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, args: list[str], stdin: str, said: str) -> None:
    result = run_command(args, agent_env(tmp_path / "home"), stdin=stdin)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"refagent run: error: {said}"
    assert result.stdout == ""


# -- a closed stdout --------------------------------------------------------------------------------


def copy_of_the_demo_project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(default_project(), copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def read_lines_then_close(process: subprocess.Popen[bytes], count: int) -> list[bytes]:
    """What ``| head -<count>`` does: read ``count`` lines of the process's stdout, then close the pipe."""
    assert process.stdout is not None
    lines = [process.stdout.readline() for _ in range(count)]
    process.stdout.close()
    return lines


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    """``refagent run --demo --yes ... | head -3``: no traceback, no "Exception ignored", the agent stopped."""
    project = copy_of_the_demo_project(tmp_path)
    started = time.monotonic()
    process = subprocess.Popen(
        [*AGENT, "run", "--demo", "--yes", "--agent", teed(tmp_path), "--cwd", str(project), "Fix the bug."],
        env=agent_env(tmp_path / "home", REFAGENT_DEMO_PACE="0.02", NO_COLOR="1"),  # the demo's pace: seconds long
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines = read_lines_then_close(process, 3)
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=30) == EXIT_OUTPUT_CLOSED
    assert lines[0].startswith(b"refagent ")
    assert stderr == ""
    teed_transcript(tmp_path)  # what the agent sent before it was stopped is valid ACP
    assert "quantity > BULK_QUANTITY" in (project / "shop" / "pricing.py").read_text()  # stopped before the fix
    assert time.monotonic() - started < 25


@pytest.mark.slow
def test_a_closed_stdout_under_json_ends_quietly_and_stops_the_model(tmp_path: Path) -> None:
    slow = Turn(text=["word "] * 400, chunk_delay=0.05)
    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
        process = subprocess.Popen(
            [*AGENT, "run", "--json", "--cwd", str(tmp_path), "go"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while not server.chat_requests:  # the turn streams: the transcript keeps growing
            assert time.monotonic() < deadline, "the model was never asked"
            time.sleep(0.02)
        lines = read_lines_then_close(process, 3)
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=30)
        assert server.wait_for_disconnect(10)  # the agent stopped asking the model
    assert code == EXIT_OUTPUT_CLOSED
    checked([line.decode() for line in lines])
    for sign in (*LOG_LINE, "BrokenPipe", "Quit."):
        assert sign not in stderr, stderr


async def test_a_quiet_pipe_tells_once_and_drops_the_rest(tmp_path: Path) -> None:
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    pipe = QuietPipe(stream)
    told: list[str] = []
    pipe.on_closed = lambda: told.append("closed")
    pipe.stream.write("first\n")
    pipe.stream.flush()
    assert os.read(read, 100) == b"first\n"
    os.close(read)
    for _ in range(3):
        pipe.stream.write("nobody reads this\n")
        pipe.stream.flush()  # no BrokenPipeError
    assert told == ["closed"]
    assert pipe.closed
    stream.write("the interpreter's last flush\n")
    stream.flush()  # the descriptor is /dev/null now
    stream.close()


# -- the client's side of the contract --------------------------------------------------------------

ASK = {
    "sessionId": "s",
    "toolCall": {"toolCallId": "c", "title": "Run `make`", "kind": "execute"},
    "options": [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ],
}


async def nobody_types() -> str | None:
    raise AssertionError("no one can be asked")


async def test_a_failure_chunk_is_kept_not_drawn() -> None:
    out = io.StringIO()
    client = TerminalClient(Renderer(out), nobody_types)
    failure = {"kind": "auth", "message": "The key was rejected."}
    chunk = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "The key was rejected."},
        "_meta": {"refagent": {"failure": failure}},
    }
    await client.handle_notification("session/update", {"sessionId": "s", "update": chunk})
    assert out.getvalue() == ""
    assert client.failure == Failure("auth", "The key was rejected.")
    other = {**chunk, "_meta": {"another.agent": {"failure": failure}}}  # another agent's _meta: drawn as text
    await client.handle_notification("session/update", {"sessionId": "s", "update": other})
    assert "The key was rejected." in out.getvalue()
    assert failure_of({"stopReason": "end_turn"}) is None
    assert failure_of({"stopReason": "end_turn", "_meta": {"refagent": {"failure": failure}}}) == Failure(**failure)


async def test_with_no_one_to_ask_a_permission_request_is_rejected_saying_why() -> None:
    out = io.StringIO()
    client = TerminalClient(Renderer(out), nobody_types, unanswerable=NO_TERMINAL)
    assert await client.permission(ASK) == {"outcome": {"outcome": "selected", "optionId": "reject"}}
    assert f"→ rejected: {NO_TERMINAL}" in out.getvalue()


@pytest.mark.slow
def test_mode_starts_the_run_in_that_mode_and_an_unknown_one_is_bad_usage(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Done.")], api_key=KEY) as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
        result = run_command(["--json", "--mode", "auto", "--cwd", str(tmp_path), "go"], env)
        assert result.returncode == 0, result.stderr
        sent = checked(result.stdout.splitlines()).sent_by("client")
        assert [m["params"]["modeId"] for m in sent if m.get("method") == "session/set_mode"] == ["auto"]
        result = run_command(["--mode", "yolo", "--cwd", str(tmp_path), "go"], env)
    assert result.returncode == 2
    assert (
        "error: --mode yolo: the agent has no such mode (ask, accept-edits, auto, read-only, full-access)"
        in result.stderr
    )
    assert len(server.chat_requests) == 1  # the unknown mode's prompt was not sent
