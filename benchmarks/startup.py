"""How fast refagent answers an editor that has just started it, side by side with bare Python.

Measured in one run, interleaved so that both see the same machine load:

- ``python -c pass``: spawn to exit, the floor for any Python agent;
- an empty ``anyio.run`` (spawn to exit): the floor for an agent on our stack, which imports anyio and
  asyncio and starts an event loop before it can answer anything;
- ``refagent`` (the console script an editor runs, else ``python -m refagent``): spawn to the
  ``initialize`` response, and spawn to the ``session/new`` response (the
  requests are written to stdin right after the spawn, as an editor does);
- ``python -c "import openai"`` (a few runs): what the agent must not pay before ``initialize``.

Then one diagnostic run, under ``-X importtime`` and with a hook on the agent's first write to the
protocol stream (no change to the agent: the hook wraps ``os.write`` from outside),
reports whether ``openai`` was imported before the ``initialize`` response was written, and the slowest
imports before it. The agent's idle RSS after ``session/new`` comes from ``/proc/PID/status``.

Run: ``python benchmarks/startup.py [--runs N]``. The agent runs on its built-in scripted model (no
``OPENAI_*`` variables, a temporary ``HOME``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 150.0

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientInfo": {"name": "startup-benchmark", "version": "1"}},
}

# Runs the agent exactly as `python -m refagent` does, with a hook on the first protocol write (os.write)
# that says which modules are loaded at that moment. It goes to stderr, in order with -X importtime's lines.
HOOKED_AGENT = """
import os
import sys

original = os.write
first = []

def write(fd, data):
    if not first and bytes(data[:10]) == b'{"jsonrpc"':
        first.append(True)
        loaded = sorted(m for m in sys.modules if m == "openai" or m.startswith("openai."))
        sys.stderr.write(f"BENCH first write: modules={len(sys.modules)} openai={len(loaded)}\\n")
        sys.stderr.flush()
    return original(fd, data)

os.write = write
sys.argv[0] = "refagent"
from refagent.cli import main
raise SystemExit(main())
"""


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_"))}
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def line(message: dict[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def read_response(stdout: object, msg_id: int) -> dict[str, object]:
    while True:
        raw = stdout.readline()  # type: ignore[attr-defined]
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


EMPTY_LOOP = "import anyio\nasync def main(): pass\nanyio.run(main)"


def time_python_c(code: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - started) * 1000


# What an editor runs: the `refagent` console script installed beside this Python (else `python -m`).
_SCRIPT = Path(sys.executable).parent / "refagent"
AGENT_COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "refagent"]


def time_agent(env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(ms to the initialize response, ms to the session/new response, RSS KiB after session/new)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        AGENT_COMMAND,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(line(INITIALIZE))
        process.stdin.flush()
        read_response(process.stdout, 0)
        initialized = time.perf_counter()
        new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}}
        process.stdin.write(line(new))
        process.stdin.flush()
        read_response(process.stdout, 1)
        created = time.perf_counter()
        rss = rss_kib(process.pid)
        process.stdin.close()
        code = process.wait(timeout=10)
        if code != 0:
            raise RuntimeError(f"the agent exited with {code}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return (initialized - started) * 1000, (created - started) * 1000, rss


def import_report(env: dict[str, str], cwd: Path) -> tuple[bool, bool, int, list[tuple[int, str]]]:
    """(openai before the initialize response?, openai by the end of session/new?, modules at the first
    write, the slowest imports before it as (cumulative us, module))."""
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", HOOKED_AGENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(line(INITIALIZE))
    process.stdin.flush()
    read_response(process.stdout, 0)
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}}
    process.stdin.write(line(new))
    process.stdin.flush()
    read_response(process.stdout, 1)
    _, stderr = process.communicate(timeout=10)  # closes stdin: the agent exits
    before: list[tuple[int, str]] = []
    everything_before: list[str] = []
    after: list[str] = []
    modules = -1
    for entry in stderr.decode(errors="replace").splitlines():
        if entry.startswith("BENCH first write:"):
            modules = int(entry.split("modules=")[1].split()[0])
            continue
        if not entry.startswith("import time:") or "|" not in entry or "cumulative" in entry:
            continue
        _, cumulative, raw_name = entry.split("|")
        name = raw_name.strip()
        if modules < 0:
            everything_before.append(name)
            if len(raw_name) - len(raw_name.lstrip()) == 1:  # not nested in another import
                before.append((int(cumulative.strip()), name))
        else:
            after.append(name)
    if modules < 0:
        raise RuntimeError("the hook never saw the first write")

    def is_openai(name: str) -> bool:
        return name == "openai" or name.startswith("openai.")

    openai_before = any(is_openai(name) for name in everything_before)
    openai_by_session = openai_before or any(is_openai(name) for name in after)
    return openai_before, openai_by_session, modules, sorted(before, reverse=True)[:8]


def summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20, help="spawns of each kind (default 20)")
    parser.add_argument("--openai-runs", type=int, default=5, help="spawns importing openai (default 5)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="refagent-bench-") as tmp:
        home = Path(tmp) / "home"
        project = Path(tmp) / "project"
        home.mkdir()
        project.mkdir()
        env = environment(home)

        # warm the OS caches (files, .pyc) so the first measured run is not an outlier
        time_python_c("pass", env)
        time_agent(env, project)

        bare: list[float] = []
        loop: list[float] = []
        initialize: list[float] = []
        session: list[float] = []
        rss: list[int] = []
        for _ in range(args.runs):
            bare.append(time_python_c("pass", env))
            loop.append(time_python_c(EMPTY_LOOP, env))
            init_ms, new_ms, rss_now = time_agent(env, project)
            initialize.append(init_ms)
            session.append(new_ms)
            rss.append(rss_now)
        openai_ms = [time_python_c("import openai", env) for _ in range(args.openai_runs)]
        openai_before, openai_by_session, modules, slowest = import_report(env, project)

    base = statistics.median(bare)
    rows = [
        (f"python -c pass (spawn -> exit), {args.runs} runs", bare),
        (f"empty anyio.run (spawn -> exit), {args.runs} runs", loop),
        (f"refagent spawn -> initialize response, {args.runs} runs", initialize),
        (f"refagent spawn -> session/new response, {args.runs} runs", session),
        (f'python -c "import openai" (spawn -> exit), {args.openai_runs} runs', openai_ms),
    ]
    print(f"refagent startup: Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    print()
    print(f"{'measurement':<58} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'x pass':>7}")
    print("-" * 95)
    for label, values in rows:
        median, low, high = summary(values)
        print(f"{label:<58} {median:>10.1f} {low:>8.1f} {high:>8.1f} {median / base:>6.1f}x")
    print("-" * 95)
    init_median = statistics.median(initialize)
    verdict = "PASS" if init_median < TARGET_MS else "FAIL"
    print(f"{'target: initialize answered in < ' + f'{TARGET_MS:.0f} ms':<58} {init_median:>10.1f}   {verdict}")
    print(f"{'refagent over bare python, to initialize':<58} {init_median - base:>+10.1f} ms")
    loop_median = statistics.median(loop)
    print(f"{'refagent over an empty anyio.run, to initialize':<58} {init_median - loop_median:>+10.1f} ms")
    print(f"{'idle RSS after session/new (VmRSS, median)':<58} {statistics.median(rss) / 1024:>10.1f} MB")
    print(f"{'modules loaded when the initialize response was written':<58} {modules:>10d}")
    print(f"{'openai imported before the initialize response':<58} {'yes' if openai_before else 'no':>10}")
    print(f"{'openai imported by the session/new response':<58} {'yes' if openai_by_session else 'no':>10}")
    print()
    print("slowest outermost imports before the initialize response (-X importtime, cumulative):")
    for us, name in slowest:
        print(f"  {us / 1000:>7.1f} ms  {name}")
    return 0 if verdict == "PASS" and not openai_before else 1


if __name__ == "__main__":
    raise SystemExit(main())
