"""How fast refagent answers an editor that has just started it, side by side with bare Python and with
the Rust ACP agent ``codex-acp``.

Measured in one run, interleaved so that all see the same machine load:

- ``python -c pass``: spawn to exit, the floor for any Python agent;
- an empty ``anyio.run`` (spawn to exit): the floor for an agent on our stack, which imports anyio and
  asyncio and starts an event loop before it can answer anything;
- ``refagent`` (the console script an editor runs, else ``python -m refagent``): spawn to the
  ``initialize`` response, and spawn to the ``session/new`` response (``initialize`` is written to stdin
  right after the spawn, ``session/new`` as soon as its response is read, as an editor does);
- with ``--installed``, the same for refagent as a user installs it for an editor: this checkout built
  into a wheel (from a copy) and installed with ``uv tool install`` into a temporary tool directory (its
  dependencies from the package index), its console script run with the user's environment (no
  ``PYTHONPATH``, the bytecode written beside the modules). Reported apart, before anything else runs it:
  its first start after the install, when there is no bytecode yet (``uv tool install`` compiles none
  unless asked with ``--compile-bytecode``; ``pipx``, through ``pip``, compiles at install), to the two
  responses and to the first chunk of a first prompt, and a start with ``PYTHONDONTWRITEBYTECODE=1`` in the
  editor's environment, which leaves every start a first one. ``uv`` is the one on ``PATH``, else it is
  installed on first use into ``~/.cache/refagent-bench/uv`` (``--uv-cache``) with ``pip``;
- with ``--against REVISION``, the same for this repository's ``refagent`` package at ``REVISION`` (``git
  archive``), run as this checkout is, first on ``PYTHONPATH``: what a change does, in the same run;
- ``codex-acp`` (``@zed-industries/codex-acp``, a Rust binary, from npm): the same two measurements. It is
  installed on first use into ``~/.cache/refagent-bench/codex-acp`` (``--codex-cache``) with
  ``npm install``, and the platform binary inside ``node_modules`` (the package's
  ``@zed-industries/codex-acp-<os>-<cpu>/bin/codex-acp``) is run directly, not through the package's node
  wrapper (which adds node's own start-up: ``--help`` takes 16 ms from the binary, 120 ms through it, on
  the machine this was written on). ``--no-codex`` leaves it out, and so does a
  failing npm (the run says so and goes on);
- ``python -c "import openai"`` (a few runs): what the agent must not pay before ``initialize``;
- for every agent (codex-acp too), the first ``agent_message_chunk`` of the model's answer to a first
  prompt, the model refagent's scripted server on 127.0.0.1 (refagent through its Chat Completions
  endpoint, as a local model; codex-acp through its Responses API endpoint, as a model provider of its own
  without websockets): from the spawn, every request sent as soon as the previous answer is read (what is
  deferred past the responses must still be ready when the first prompt comes), and from the prompt, sent
  2 s after the ``session/new`` response (what the warm-up prepared meanwhile is not in its wait). Targets
  beside codex-acp: spawn to chunk within 1.5x, the prompt sent after 2 s no slower (1.0x).

codex-acp answers ``initialize`` with no credentials, but ``session/new`` only once authenticated (without,
it is ``-32000 Authentication required``). It runs as a logged-in user's would: with a fresh
``CODEX_HOME`` (and ``HOME``) under the cache directory, holding the ``auth.json`` that its ``authenticate``
with ``codex-api-key`` writes, for a dummy key; that ``CODEX_HOME`` is outside the temporary directory
because codex refuses to create its helper binaries under it, as it would in a real one. Its model
endpoint is pointed at a closed local port (``-c openai_base_url=...``): the websocket it opens in the
background after ``session/new`` fails at once, and the dummy key never leaves the machine. codex does
not exit when stdin closes: it is sent SIGTERM after each measurement.

Targets: refagent answers ``initialize`` in < 150 ms, no slower than codex-acp (ratio <= 1.0), and
``session/new`` within 1.5x of codex-acp. The ratios are of the medians; in brackets the median of the
ratios of the same round's runs. Only the first target, and ``openai`` not being imported before the
``initialize`` response, make the exit status (the others depend on another program's speed).

Every Python process of this checkout gets a fresh ``PYTHONPYCACHEPREFIX`` (filled by a warm-up run) and
no ``PYTHONDONTWRITEBYTECODE``: bytecode is cached as on a user's machine, without writing into the
checkout. (The tool install needs neither: its bytecode is its own.)

Then one diagnostic run, under ``-X importtime`` and with a hook on the agent's protocol writes (no change
to the agent: the hook wraps ``os.write`` from outside), reports whether ``openai`` was imported before the
``initialize`` response was written and before the ``session/new`` response, how many modules were loaded
at each, and the slowest imports before the first and between the two. The agent's idle RSS, a moment
after ``session/new`` (refagent starts its loop after that response), comes from ``/proc/PID/status``.

Run: ``python benchmarks/startup.py [--runs N] [--installed [--first-runs N]] [--against REVISION]
[--no-codex]``. refagent runs on its built-in scripted model (no ``OPENAI_*`` variables, a temporary ``HOME``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 150.0
INITIALIZE_RATIO = 1.0  # refagent / codex-acp, at most
SESSION_RATIO = 1.5
FIRST_CHUNK_RATIO = 1.5  # spawn -> the first chunk of a prompt sent at once
IDLE_CHUNK_RATIO = 1.0  # prompt -> the first chunk, the prompt sent IDLE_BEFORE_PROMPT s after session/new

CODEX_PACKAGE = "@zed-industries/codex-acp"
CODEX_VERSION = "0.16.0"
CODEX_CACHE = Path.home() / ".cache" / "refagent-bench" / "codex-acp"
UV_CACHE = Path.home() / ".cache" / "refagent-bench" / "uv"
# Where codex's model requests go: a port nothing listens on (9, discard), so they fail at once, locally.
CODEX_ENDPOINT = 'openai_base_url="http://127.0.0.1:9/v1"'

BYTECODE_NOTE = " (PYTHONDONTWRITEBYTECODE, set here, is unset)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientInfo": {"name": "startup-benchmark", "version": "1"}},
}

# Runs the agent exactly as `python -m refagent` does, with a hook on its protocol writes (os.write) that
# says which modules are loaded at the first one (the initialize response) and at the session/new
# response (id 1). It goes to stderr, in order with -X importtime's lines.
HOOKED_AGENT = """
import os
import sys

original = os.write
seen = []

def write(fd, data):
    head = bytes(data[:10])
    if head == b'{"jsonrpc"' and (not seen or b'{"jsonrpc":"2.0","id":1,' in bytes(data)):
        seen.append(True)
        loaded = sorted(m for m in sys.modules if m == "openai" or m.startswith("openai."))
        sys.stderr.write(f"BENCH write {len(seen)}: modules={len(sys.modules)} openai={len(loaded)}\\n")
        sys.stderr.flush()
    return original(fd, data)

os.write = write
sys.argv[0] = "refagent"
from refagent.cli import main
raise SystemExit(main())
"""


@dataclass
class Agent:
    """An ACP agent to time: how to start it, and how it ends once stdin closes."""

    label: str
    command: list[str]
    env: dict[str, str]
    exits_on_eof: bool = True
    """refagent exits (status 0) when stdin closes; codex-acp does not, and gets SIGTERM."""
    model: Callable[[str], tuple[list[str], dict[str, str]]] = field(default=lambda base_url: ([], {}))
    """The arguments and variables that point it at a model server's base URL (:func:`time_first_chunk`)."""
    initialize: list[float] = field(default_factory=list)
    session: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)


def environment(home: Path, pythonpath: Path = ROOT) -> dict[str, str]:
    """Python's environment: a temporary ``HOME`` (whose sibling ``pycache`` holds the bytecode cache), no
    model configuration, and ``pythonpath`` first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_"))}
    # Bytecode is cached, as on a user's machine, but outside the checkout; PYTHONDONTWRITEBYTECODE (set in
    # some sandboxes and CI images) would have every run compile refagent from source, some 60 ms more.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home.parent / "pycache")
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def line(message: dict[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def session_new(cwd: Path) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}}


def read_response(stdout: IO[bytes], msg_id: int) -> dict[str, object]:
    while True:
        raw = stdout.readline()
        if not raw:
            raise RuntimeError(f"the agent exited before answering request {msg_id}")
        message = json.loads(raw)
        if message.get("id") == msg_id and "method" not in message:
            if "result" not in message:
                raise RuntimeError(f"request {msg_id} failed: {message}")
            return message  # type: ignore[no-any-return]


def rss_kib(pid: int) -> int:
    for entry in Path(f"/proc/{pid}/status").read_text().splitlines():
        if entry.startswith("VmRSS:"):
            return int(entry.split()[1])
    raise RuntimeError("no VmRSS")


IDLE_SECONDS = 0.3
"""How long after the session/new response the agent's memory is read: refagent starts its event loop and
the agent after it has answered."""

EMPTY_LOOP = "import anyio\nasync def main(): pass\nanyio.run(main)"


def time_python_c(code: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - started) * 1000


# What an editor runs: the `refagent` console script installed beside this Python (else `python -m`).
_SCRIPT = Path(sys.executable).parent / "refagent"
AGENT_COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "refagent"]


def time_agent(agent: Agent, cwd: Path) -> tuple[float, float, int]:
    """(ms to the initialize response, ms to the session/new response, RSS KiB after session/new)."""
    started = time.perf_counter()
    with spawned(agent.command, agent.env, cwd) as (process, stdin, stdout):
        send(stdin, INITIALIZE)
        read_response(stdout, 0)
        initialized = time.perf_counter()
        send(stdin, session_new(cwd))
        read_response(stdout, 1)
        created = time.perf_counter()
        time.sleep(IDLE_SECONDS)  # refagent loads its event loop and agent after the response
        rss = rss_kib(process.pid)
        stdin.close()
        if agent.exits_on_eof:
            code = process.wait(timeout=10)
            if code != 0:
                raise RuntimeError(f"{agent.label} exited with {code}")
        else:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    return (initialized - started) * 1000, (created - started) * 1000, rss


@contextmanager
def spawned(
    command: list[str], env: dict[str, str], cwd: Path
) -> Iterator[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]]:
    """An agent process and its stdin and stdout, started in ``cwd`` (as an editor starts it, in the project,
    not where a ``python -m`` would import from); killed on the way out if it is still running."""
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        yield process, process.stdin, process.stdout
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def send(stdin: IO[bytes], message: dict[str, object]) -> None:
    stdin.write(line(message))
    stdin.flush()


PROMPT = {"type": "text", "text": "Say hello."}
ANSWER = "Hello"
"""What the scripted model answers (its first chunk is what is timed)."""
BENCH_KEY = "sk-startup-bench"


IDLE_BEFORE_PROMPT = 2.0
"""Seconds between the session/new response and the prompt, for a prompt a user types after the editor opened
the session: what the agent prepared meanwhile (its warm-up) is not in the prompt's wait."""


def refagent_model(base_url: str) -> tuple[list[str], dict[str, str]]:
    """refagent pointed at the scripted server: its Chat Completions endpoint, as a local model is."""
    return [], {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": BENCH_KEY, "REFAGENT_MODEL": "bench"}


def time_first_chunk(agent: Agent, cwd: Path, base_url: str, idle: float = 0.0) -> tuple[float, float]:
    """ms from the spawn, and ms from the prompt, to the first ``agent_message_chunk`` of the model's answer
    (initialize, session/new and session/prompt each sent as soon as the previous answer is read, the
    prompt ``idle`` seconds later), the model a scripted server on 127.0.0.1 (``base_url``): what deferring
    imports past the responses must not make slower, and what the warm-up leaves to the first prompt."""
    arguments, variables = agent.model(base_url)
    started = time.perf_counter()
    with spawned([*agent.command, *arguments], {**agent.env, **variables}, cwd) as (process, stdin, stdout):
        send(stdin, INITIALIZE)
        read_response(stdout, 0)
        send(stdin, session_new(cwd))
        session_id = read_response(stdout, 1)["result"]["sessionId"]  # type: ignore[index]
        if idle:
            time.sleep(idle)
        prompt = {"sessionId": session_id, "prompt": [PROMPT]}
        asked = time.perf_counter()
        send(stdin, {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt})
        while True:
            raw = stdout.readline()
            if not raw:
                raise RuntimeError(f"{agent.label} exited before its first chunk")
            message = json.loads(raw)
            update = message.get("params", {}).get("update", {}) if message.get("method") == "session/update" else {}
            # the model's words: codex-acp says some things of its own as message chunks too
            if update.get("sessionUpdate") == "agent_message_chunk" and ANSWER in update["content"].get("text", ""):
                chunked = time.perf_counter()
                break
        read_response(stdout, 2)
        stdin.close()
        if agent.exits_on_eof:
            process.wait(timeout=10)
        else:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    return (chunked - started) * 1000, (chunked - asked) * 1000


def measure(agent: Agent, cwd: Path) -> None:
    init_ms, new_ms, rss = time_agent(agent, cwd)
    agent.initialize.append(init_ms)
    agent.session.append(new_ms)
    agent.rss.append(rss)


# -- a non-editable install of this checkout ---------------------------------------------------


def ensure_uv(cache: Path) -> Path | str:
    """``uv``: the one on ``PATH``, else installed on first use into ``cache`` (``pip install --target``); or
    why there is none."""
    found = shutil.which("uv")
    if found:
        return Path(found)
    binary = cache / "bin" / "uv"
    if not binary.exists():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(cache), "uv"]
        failed = install_step("pip install uv", command)
        if failed is not None:
            return failed
        if not binary.exists():
            return f"pip install uv left no {binary}"
    return binary


def install_step(
    what: str, command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> str | None:
    """Run ``command``, a step of installing something the bench runs: None if it succeeded, else why not
    (``what`` failed, with the end of its stderr)."""
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what} failed: {exc}"
    if done.returncode != 0:
        return f"{what} failed ({done.returncode}): {done.stderr.strip()[-500:]}"
    return None


def tool_install(uv: Path, where: Path) -> tuple[Path, Path] | str:
    """Build this checkout into a wheel and ``uv tool install`` it under ``where``, as a user installs
    refagent for an editor: (its console script, the tool's environment), or why it could not be done.
    The wheel is built from a copy (nothing is left in the checkout); the dependencies come from the index.
    Like any ``uv tool install`` without ``--compile-bytecode``, no bytecode is compiled."""
    source = where / "src"
    source.mkdir(parents=True)
    shutil.copytree(ROOT / "refagent", source / "refagent", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    wheels = where / "dist"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(UV_TOOL_DIR=str(where / "tools"), UV_TOOL_BIN_DIR=str(where / "bin"))
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source)]
    failed = install_step("pip wheel", build, env=env)
    if failed is not None:
        return failed
    [wheel] = wheels.glob("refagent-*.whl")  # installed by its path: not a name an index may also have
    install = [str(uv), "tool", "install", "--quiet", "--python", sys.executable, str(wheel)]
    failed = install_step("uv tool install", install, env=env)
    if failed is not None:
        return failed
    return where / "bin" / "refagent", where / "tools" / "refagent"


def checkout_of(revision: str, where: Path) -> Path | str:
    """This repository's ``refagent`` package at ``revision`` (``git archive``), under ``where``: the
    directory to put first on ``PYTHONPATH``, or why it could not be had."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "refagent"],
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"git archive failed: {exc}"
    if archive.returncode != 0:
        return f"git archive {revision} failed: {archive.stderr.decode(errors='replace').strip()[-300:]}"
    where.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: no links out, no odd modes
            tar.extractall(where, filter="data")
        else:
            tar.extractall(where)  # this repository's own archive
    return where


def editor_environment(home: Path) -> dict[str, str]:
    """What an editor starts an installed refagent with: the user's environment (a temporary ``HOME``), no
    model configuration, and nothing of Python's (no ``PYTHONPATH``, no bytecode cache prefix): its
    bytecode goes where the interpreter puts it, beside the tool's modules."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_", "PYTHON"))}
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    return env


def drop_bytecode(tool: Path) -> None:
    """The tool's environment as ``uv tool install`` leaves it: no bytecode."""
    for cache in list(tool.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)


def first_starts(agent: Agent, tool: Path, project: Path, base_url: str, runs: int) -> dict[str, list[float]]:
    """The first start after the install, ``runs`` times (the bytecode dropped before each): spawn -> the
    initialize and session/new responses, and spawn -> the first chunk of a first prompt (which compiles
    the model client's modules too). Then, with ``PYTHONDONTWRITEBYTECODE=1`` in the editor's environment
    (set in some sandboxes and CI images), which makes every start a first one: nothing is ever written."""
    times: dict[str, list[float]] = {"initialize": [], "session/new": [], "first chunk": [], "no-bytecode": []}
    for _ in range(runs):
        drop_bytecode(tool)
        initialized, created, _ = time_agent(agent, project)
        times["initialize"].append(initialized)
        times["session/new"].append(created)
        drop_bytecode(tool)
        times["first chunk"].append(time_first_chunk(agent, project, base_url)[0])
    drop_bytecode(tool)
    unwritten = Agent(agent.label, agent.command, {**agent.env, "PYTHONDONTWRITEBYTECODE": "1"}, model=agent.model)
    for _ in range(runs):
        times["no-bytecode"].append(time_agent(unwritten, project)[0])
    time_agent(agent, project)  # its bytecode written again, for whatever comes next
    return times


# -- codex-acp -------------------------------------------------------------------------------


def codex_binary(cache: Path) -> Path | None:
    """The platform binary of the installed package (what its node wrapper, bin/codex-acp.js, would run)."""
    systems = {"linux": "linux", "darwin": "darwin", "win32": "win32"}
    cpus = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
    system = next((name for prefix, name in systems.items() if sys.platform.startswith(prefix)), None)
    cpu = cpus.get(platform.machine().lower())
    if system is None or cpu is None:
        return None
    package = cache / "node_modules" / "@zed-industries" / f"codex-acp-{system}-{cpu}"
    binary = package / "bin" / ("codex-acp.exe" if system == "win32" else "codex-acp")
    try:
        version = json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return binary if version == CODEX_VERSION and binary.is_file() else None


def ensure_codex(cache: Path) -> Path | str:
    """The codex-acp binary, installed into ``cache`` with npm if it is not there yet; else why not."""
    binary = codex_binary(cache)
    if binary is not None:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        return "npm not found"
    cache.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", f"{CODEX_PACKAGE}@{CODEX_VERSION}"]
    print(f"installing {CODEX_PACKAGE}@{CODEX_VERSION} into {cache} ...", file=sys.stderr)
    failed = install_step("npm install", command, cwd=cache)
    if failed is not None:
        return failed
    binary = codex_binary(cache)
    return binary if binary is not None else f"no codex-acp binary for {sys.platform}/{platform.machine()} in {cache}"


def codex_agent(binary: Path, home: Path) -> Agent:
    """codex-acp as a logged-in user runs it, with a fresh ``CODEX_HOME`` under ``home``."""
    codex_home = home / "codex"
    (home / "home").mkdir(parents=True)
    codex_home.mkdir()
    # What `authenticate` with methodId "codex-api-key" writes: session/new needs it, initialize does not.
    (codex_home / "auth.json").write_text(json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-bench-dummy"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_", "RUST_LOG"))}
    env["HOME"] = str(home / "home")
    env["CODEX_HOME"] = str(codex_home)
    return Agent(
        f"codex-acp {CODEX_VERSION}", [str(binary), "-c", CODEX_ENDPOINT], env, exits_on_eof=False, model=codex_model
    )


def codex_model(base_url: str) -> tuple[list[str], dict[str, str]]:
    """codex-acp pointed at the scripted server's Responses API as a model provider of its own, without the
    websocket transport (the server speaks HTTP; codex would try a websocket five times first), the model a
    name codex knows (an unknown one makes it say so in the chat)."""
    provider = (
        f'model_providers.bench={{name="bench",base_url="{base_url}",wire_api="responses",'
        'supports_websockets=false,env_key="BENCH_API_KEY"}'
    )
    arguments = ["-c", 'model_provider="bench"', "-c", provider, "-c", 'model="gpt-5-mini"']
    return arguments, {"BENCH_API_KEY": BENCH_KEY}


# -- the diagnostic run ------------------------------------------------------------------------


@dataclass
class ImportReport:
    openai_before: bool
    """openai imported before the initialize response was written"""
    openai_by_session: bool
    modules_at_initialize: int
    modules_at_session: int
    slowest_before: list[tuple[int, str]]
    """the slowest outermost imports before the initialize response, (cumulative us, module)"""
    slowest_between: list[tuple[int, str]]
    """the same between the initialize and the session/new responses"""


def import_report(env: dict[str, str], cwd: Path) -> ImportReport:
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", HOOKED_AGENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(line(INITIALIZE))
    process.stdin.flush()
    read_response(process.stdout, 0)
    process.stdin.write(line(session_new(cwd)))
    process.stdin.flush()
    read_response(process.stdout, 1)
    _, stderr = process.communicate(timeout=10)  # closes stdin: the agent exits
    phases: list[list[tuple[int, str, bool]]] = [[], [], []]  # before, between, after: (us, name, outermost)
    counts: list[int] = []
    for entry in stderr.decode(errors="replace").splitlines():
        if entry.startswith("BENCH write"):
            counts.append(int(entry.split("modules=")[1].split()[0]))
            continue
        if not entry.startswith("import time:") or "|" not in entry or "cumulative" in entry:
            continue
        _, cumulative, raw_name = entry.split("|")
        outermost = len(raw_name) - len(raw_name.lstrip()) == 1  # not nested in another import
        phases[min(len(counts), 2)].append((int(cumulative.strip()), raw_name.strip(), outermost))
    if len(counts) < 2:
        raise RuntimeError(f"the hook saw {len(counts)} of the 2 responses")

    def has_openai(phase: list[tuple[int, str, bool]]) -> bool:
        return any(name == "openai" or name.startswith("openai.") for _, name, _ in phase)

    def slowest(phase: list[tuple[int, str, bool]], count: int) -> list[tuple[int, str]]:
        return sorted(((us, name) for us, name, outermost in phase if outermost), reverse=True)[:count]

    return ImportReport(
        openai_before=has_openai(phases[0]),
        openai_by_session=has_openai(phases[0]) or has_openai(phases[1]),
        modules_at_initialize=counts[0],
        modules_at_session=counts[1],
        slowest_before=slowest(phases[0], 8),
        slowest_between=slowest(phases[1], 12),
    )


# -- the report --------------------------------------------------------------------------------


@contextmanager
def model_server() -> Iterator[str]:
    """refagent's scripted model server on 127.0.0.1, answering every prompt with a line of text through the
    API each agent speaks (Chat Completions for refagent, the Responses API for codex-acp): its base URL."""
    sys.path.insert(0, str(ROOT))
    from refagent.testing.openai_server import ScriptedOpenAIServer, Turn

    with ScriptedOpenAIServer(fallback=Turn(text="Hello."), api_key=BENCH_KEY) as server:
        yield server.base_url


@dataclass
class Chunks:
    """One agent's first chunks (ms): spawn -> the chunk of a prompt sent at once, and prompt -> the chunk of
    a prompt sent :data:`IDLE_BEFORE_PROMPT` seconds after session/new."""

    label: str
    at_once: list[float] = field(default_factory=list)
    after_idle: list[float] = field(default_factory=list)


def first_chunks(agents: list[Agent], project: Path, runs: int, idle_runs: int) -> list[Chunks]:
    """For each agent, interleaved, against one scripted model server: ``runs`` times spawn -> the first chunk
    of a first prompt sent at once, and ``idle_runs`` times prompt -> the first chunk of one sent after
    :data:`IDLE_BEFORE_PROMPT` seconds (:func:`time_first_chunk`)."""
    results = [Chunks(agent.label) for agent in agents]
    with model_server() as base_url:
        for agent in agents:  # warm-up: the model client's imports, cached bytecode
            time_first_chunk(agent, project, base_url)
        for round_ in range(max(runs, idle_runs)):
            for i in range(len(agents)):
                index = (round_ + i) % len(agents)
                if round_ < runs:
                    results[index].at_once.append(time_first_chunk(agents[index], project, base_url)[0])
                if round_ < idle_runs:
                    waited = time_first_chunk(agents[index], project, base_url, IDLE_BEFORE_PROMPT)[1]
                    results[index].after_idle.append(waited)
    return results


def summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def ratio_cell(ours: list[float], theirs: list[float], target: float) -> str:
    """``ratio of the medians [median of the paired ratios] PASS|MISS``, against ``target``."""
    ratio = statistics.median(ours) / statistics.median(theirs)
    paired = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return f"{ratio:>5.2f}x [{paired:.2f}x] {'PASS' if ratio <= target else 'MISS'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20, help="spawns of each kind (default 20)")
    parser.add_argument("--openai-runs", type=int, default=5, help="spawns importing openai (default 5)")
    parser.add_argument(
        "--idle-runs", type=int, default=5, help=f"prompts sent {IDLE_BEFORE_PROMPT:g} s after session/new (default 5)"
    )
    parser.add_argument("--no-codex", action="store_true", help="leave codex-acp out")
    parser.add_argument(
        "--codex-cache", type=Path, default=CODEX_CACHE, help=f"where codex-acp is installed (default {CODEX_CACHE})"
    )
    parser.add_argument(
        "--installed",
        action="store_true",
        help="also time this checkout as a user installs it for an editor (uv tool install), first starts apart",
    )
    parser.add_argument("--first-runs", type=int, default=3, help="first starts after the install (default 3)")
    parser.add_argument(
        "--against",
        metavar="REVISION",
        help="also time this repository's refagent at REVISION (git archive), run as this checkout is: "
        "what a change does, in the same run",
    )
    parser.add_argument(
        "--uv-cache", type=Path, default=UV_CACHE, help=f"where uv is installed if not on PATH (default {UV_CACHE})"
    )
    args = parser.parse_args()

    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="refagent-bench-") as tmp:
        home = Path(tmp) / "home"
        project = Path(tmp) / "project"
        home.mkdir()
        project.mkdir()
        env = environment(home)
        others = args.installed or args.against
        agents = [Agent("refagent" + (", this checkout" if others else ""), AGENT_COMMAND, env, model=refagent_model)]
        if args.against:
            copy = checkout_of(args.against, Path(tmp) / "against")
            if isinstance(copy, Path):
                label = f"refagent at {args.against}"
                agents.append(Agent(label, AGENT_COMMAND, environment(home, copy), model=refagent_model))
                notes.append(f"{label}: {copy} first on PYTHONPATH")
            else:
                notes.append(f"refagent at {args.against} left out: {copy}")
        starts: dict[str, list[float]] = {}
        if args.installed:
            uv = ensure_uv(args.uv_cache)
            installed = tool_install(uv, Path(tmp) / "installed") if isinstance(uv, Path) else uv
            if isinstance(installed, tuple):
                script, tool = installed
                agent = Agent(
                    "refagent, uv tool install", [str(script)], editor_environment(home), model=refagent_model
                )
                with model_server() as base_url:  # before anything has run it
                    starts = first_starts(agent, tool, project, base_url, args.first_runs)
                agents.append(agent)
                notes.append(f"installed: {script} (uv tool install of a wheel of this checkout, with {uv})")
            else:
                notes.append(f"installed refagent left out: {installed}")
        codex: Agent | None = None
        codex_dir: tempfile.TemporaryDirectory[str] | None = None
        if not args.no_codex:
            binary = ensure_codex(args.codex_cache)
            if isinstance(binary, Path):
                codex_dir = tempfile.TemporaryDirectory(prefix="home-", dir=args.codex_cache)
                codex = codex_agent(binary, Path(codex_dir.name))
                agents.append(codex)
                notes.append(f"codex-acp: {binary}")
            else:
                notes.append(f"codex-acp left out: {binary}")
        try:
            # warm the OS caches (files, .pyc; codex's CODEX_HOME) so the first measured run is no outlier
            time_python_c("pass", env)
            for agent in agents:
                time_agent(agent, project)

            bare: list[float] = []
            loop: list[float] = []
            for round_ in range(args.runs):
                bare.append(time_python_c("pass", env))
                loop.append(time_python_c(EMPTY_LOOP, env))
                for i in range(len(agents)):  # each round in another order: none is always first
                    measure(agents[(round_ + i) % len(agents)], project)
            chunks = first_chunks(agents, project, args.runs, args.idle_runs)
            openai_ms = [time_python_c("import openai", env) for _ in range(args.openai_runs)]
            report = import_report(env, project)
        finally:
            if codex_dir is not None:
                codex_dir.cleanup()

    base = statistics.median(bare)
    rows = [
        (f"python -c pass (spawn -> exit), {args.runs} runs", bare),
        (f"empty anyio.run (spawn -> exit), {args.runs} runs", loop),
    ]
    for agent in agents:
        rows.append((f"{agent.label}: initialize", agent.initialize))
        rows.append((f"{agent.label}: session/new", agent.session))
    for chunk in chunks:
        rows.append((f"{chunk.label}: first chunk of a first prompt, spawn ->", chunk.at_once))
    for chunk in chunks:
        rows.append(
            (f"{chunk.label}: first chunk, prompt {IDLE_BEFORE_PROMPT:g} s after session/new ->", chunk.after_idle)
        )
    rows.append((f'python -c "import openai" (spawn -> exit), {args.openai_runs} runs', openai_ms))
    width = max(62, *(len(label) for label, _ in rows))
    print(f"refagent startup: Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"spawn -> response, {args.runs} runs of each agent, interleaved")
    for note in notes:
        print(note)
    print(f"bytecode of this checkout's runs cached in a fresh PYTHONPYCACHEPREFIX{BYTECODE_NOTE}")
    if starts:
        print("the uv tool install runs as an editor starts it: its bytecode written beside its modules")
    print()
    print(f"{'measurement':<{width}} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'x pass':>7}")
    rule = "-" * (width + 37)
    print(rule)
    for label, values in rows:
        median, low, high = summary(values)
        print(f"{label:<{width}} {median:>10.1f} {low:>8.1f} {high:>8.1f} {median / base:>6.1f}x")
    print(rule)
    if starts:
        runs = len(starts["initialize"])
        print(f"first start after the uv tool install (no bytecode yet: uv compiles none by default), {runs} runs:")
        first_rows = [
            ("  initialize", starts["initialize"]),
            ("  session/new", starts["session/new"]),
            ("  first chunk of a first prompt (compiles the model client)", starts["first chunk"]),
            ("  initialize, every start with PYTHONDONTWRITEBYTECODE=1", starts["no-bytecode"]),
        ]
        for label, values in first_rows:
            median, low, high = summary(values)
            print(f"{label:<{width}} {median:>10.1f} {low:>8.1f} {high:>8.1f} {median / base:>6.1f}x")
        print(rule)
    ours = agents[0]
    init_median = statistics.median(ours.initialize)
    verdict = "PASS" if init_median < TARGET_MS else "FAIL"
    print(f"{'target: initialize answered in < ' + f'{TARGET_MS:.0f} ms':<{width}} {init_median:>10.1f}   {verdict}")
    print(f"{'refagent over bare python, to initialize':<{width}} {init_median - base:>+10.1f} ms")
    loop_median = statistics.median(loop)
    print(f"{'refagent over an empty anyio.run, to initialize':<{width}} {init_median - loop_median:>+10.1f} ms")
    print(f"idle RSS {IDLE_SECONDS:g} s after session/new (VmRSS, median):")
    for agent in agents:
        print(f"{'  ' + agent.label:<{width}} {statistics.median(agent.rss) / 1024:>10.1f} MB")
    if codex is not None:
        print()
        print(
            f"refagent / codex-acp: ratio of medians [median of paired ratios]; targets: initialize "
            f"<= {INITIALIZE_RATIO:.1f}x, session/new <= {SESSION_RATIO:.1f}x"
        )
        print(f"{'':<{width}} {'initialize':>22} {'session/new':>22}")
        for agent in agents:
            if agent is codex:
                continue
            init_cell = ratio_cell(agent.initialize, codex.initialize, INITIALIZE_RATIO)
            session_cell = ratio_cell(agent.session, codex.session, SESSION_RATIO)
            print(f"{agent.label:<{width}} {init_cell:>22} {session_cell:>22}")
        theirs = next(chunk for chunk in chunks if chunk.label == codex.label)
        print(
            f"first chunk, refagent / codex-acp on the same scripted model; targets: spawn -> chunk <= "
            f"{FIRST_CHUNK_RATIO:.1f}x, prompt {IDLE_BEFORE_PROMPT:g} s after session/new -> chunk "
            f"<= {IDLE_CHUNK_RATIO:.1f}x"
        )
        print(f"{'':<{width}} {'spawn -> chunk':>22} {'prompt -> chunk':>22}")
        for chunk in chunks:
            if chunk is theirs:
                continue
            at_once = ratio_cell(chunk.at_once, theirs.at_once, FIRST_CHUNK_RATIO)
            after_idle = ratio_cell(chunk.after_idle, theirs.after_idle, IDLE_CHUNK_RATIO)
            print(f"{chunk.label:<{width}} {at_once:>22} {after_idle:>22}")
    print()
    print("diagnostic run (the editable refagent, under -X importtime):")
    print(f"{'modules loaded when the initialize response was written':<{width}} {report.modules_at_initialize:>10d}")
    print(f"{'modules loaded when the session/new response was written':<{width}} {report.modules_at_session:>10d}")
    print(f"{'openai imported before the initialize response':<{width}} {'yes' if report.openai_before else 'no':>10}")
    print(f"{'openai imported by the session/new response':<{width}} {'yes' if report.openai_by_session else 'no':>10}")
    print()
    print("slowest outermost imports before the initialize response (-X importtime, cumulative):")
    for us, name in report.slowest_before:
        print(f"  {us / 1000:>7.1f} ms  {name}")
    print("slowest outermost imports between the initialize and session/new responses:")
    for us, name in report.slowest_between:
        print(f"  {us / 1000:>7.1f} ms  {name}")
    return 0 if verdict == "PASS" and not report.openai_before else 1


if __name__ == "__main__":
    raise SystemExit(main())
