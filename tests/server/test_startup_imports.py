"""The editor's first answer stays light: what the agent has imported when it writes its ``initialize`` response.

Start-up reads the first line and answers ``initialize`` before the event loop starts
(:mod:`refagent.server.boot`, :mod:`refagent.server.handshake`). These tests spawn the real agent, as
``python -m refagent`` runs it, behind a hook on ``os.write`` (nothing in the agent changes): at the
agent's first protocol write the hook reports ``sys.modules`` on stderr, lets the response through and
ends the process, so the loop and the rest never start. A module that joins the early path makes these
fail; if it must, add it to :data:`EARLY_REFAGENT` with the reason it is needed. (The first
``session/new``, answered before the loop too: :mod:`tests.server.test_session_new_imports`.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the agent as `python -m refagent` does. At the first protocol write: the modules loaded then (and
# those the interpreter had loaded before the agent started) to stderr, the write itself, and exit.
HOOK = r"""
import sys
baseline = sorted(sys.modules)
import json
import os

original = os.write

def write(fd, data):
    data = bytes(data)
    if data.startswith(b'{"jsonrpc"'):
        report = {"baseline": baseline, "loaded": sorted(sys.modules)}
        original(2, b"MODULES " + json.dumps(report).encode() + b"\n")
        while data:
            data = data[original(fd, data):]
        os._exit(0)
    return original(fd, data)

os.write = write
sys.argv[0] = "refagent"
from refagent.cli import main
raise SystemExit(main())
"""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientInfo": {"name": "startup-imports", "version": "1"}},
}

EARLY_REFAGENT: dict[str, str] = {
    "refagent": "the package: __version__, for --version and agentInfo",
    "refagent.cli": "the entry point: parses the arguments, loads the configuration",
    "refagent.errors": "ConfigError: a broken configuration falls back to the scripted model",
    "refagent.config": "the configuration: its command-line options and the profiles it loads",
    "refagent.config.file": "where the config file is, and reading it (there may be none)",
    "refagent.config.flags": "the command-line options and the environment variables",
    "refagent.config.loading": "load(): the file, the environment and the flags combined",
    "refagent.config.profiles": "the profiles as configured (promptCapabilities and authMethods describe them)",
    "refagent.config.clients": "the client kinds profiles name (checked when read; no client is imported)",
    "refagent.config.providers": "the providers by name: a key variable alone (ANTHROPIC_API_KEY...) forms a profile",
    "refagent.config.limits": "max_requests, and [retry] when there is one",
    "refagent.config.custom_tools": "the custom tools the file names (listed, not imported)",
    "refagent.config.allowed": "what the file allows beyond the editor's (MCP servers listed, not started)",
    "refagent.llm": "the package of llm.profiles",
    "refagent.llm.profiles": "ModelProfile: image support (promptCapabilities), the key hint (authMethods)",
    "refagent.settings": "Settings, and sessions_root(): whether sessions are saved (loadSession, list, resume)",
    "refagent.server": "the package of server.boot",
    "refagent.server.boot": "start-up: reads the first line, answers it",
    "refagent.server.methods": "REQUESTS: which requests start-up answers, and how",
    "refagent.server.handshake": "early_initialize(): the initialize answer",
    "refagent.server.stdio": "guard_stdio(): the protocol's fds, before anything can write to stdout",
    "refagent.server.v2": "wants_v2(): an initialize that asks for v2 (when offered) is left to the agent",
    "refagent.acp": "PROTOCOL_VERSION",
    "refagent.acp.jsonrpc": "parse_line() of the first line, encode() of the answer",
    "refagent.acp.errors": "RequestError (jsonrpc's error responses; an invalid initialize is left to the agent)",
    "refagent.acp.params": "required(): protocolVersion is checked",
    "refagent.acp.text": "clean(): lone surrogates out of what is read and written (jsonrpc)",
    "refagent.sandbox": "the package of sandbox.confine (its __init__ imports nothing)",
    "refagent.sandbox.confine": "the package of confine.probe",
    "refagent.sandbox.confine.probe": "start(): the sandbox probe runs while the editor's first requests are answered",
    "refagent.dirs": "user_dir(): where the config file is, and whether sessions are saved (without platformdirs)",
    "refagent.logs": "logger(): the configuration's warnings, if any (logging itself is imported only then)",
}
"""Every refagent module loaded when the ``initialize`` response is written, and why it is needed then."""

EARLY_THIRD_PARTY: dict[str, str] = {}
"""Every other distribution's top-level package loaded by then (beyond what the interpreter loads itself)."""

NOT_YET = (
    # what the session machinery and the loop bring: each is imported after the answer, or at the first prompt
    "anyio",
    "sniffio",
    "asyncio",
    "openai",
    "httpx",
    "pydantic",
    "mcp",
    "watchfiles",
    "unidiff",
    "concurrent",
    "selectors",
    "socket",
    "ssl",
    "subprocess",
    "ctypes",
    "multiprocessing",
    "uuid",
    "hashlib",
    "logging",
    "platformdirs",
    "tempfile",
    "argparse",
    "pathlib",
    "refagent.server.agent",
    "refagent.server.v2.bridge",
    "refagent.acp.connection",
    "refagent.session",
    "refagent.tools",
    "refagent.persistence",
    "refagent.sandbox.local",
    "refagent.sandbox.seams",
    "refagent.sandbox.disk",
    "refagent.sandbox.search",
    "refagent.sandbox.confine.confinement",
    "refagent.sandbox.confine.launcher",
    "refagent.sandbox.editor",
    "refagent.mcp",
    "refagent.llm.openai_client",
    "refagent.llm.openai_stream",
    "refagent.llm.retry",
    "refagent.llm.scripted",
    "refagent.config.writer",
    "refagent.llm.protocol",
    "refagent.prompts",
)
"""Packages and modules (with their submodules) that must not be loaded when the answer is written."""


def _environment(home: Path, keyed: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_"))}
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    if keyed:  # a configured model: the profile has a key, and the model client is not made yet
        env["OPENAI_API_KEY"] = "sk-test-not-a-key"
        env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    return env


def _first_write(tmp_path: Path, keyed: bool) -> tuple[dict[str, Any], list[str], list[str]]:
    """(the initialize response, the modules loaded at the agent's first write, those loaded before it started)."""
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", HOOK],
        input=json.dumps(INITIALIZE).encode() + b"\n",
        capture_output=True,
        env=_environment(home, keyed),
        cwd=tmp_path,
        timeout=30,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    reports = [line for line in stderr.splitlines() if line.startswith("MODULES ")]
    assert len(reports) == 1, stderr
    report = json.loads(reports[0].removeprefix("MODULES "))
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0]), report["loaded"], report["baseline"]


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


@pytest.mark.parametrize("keyed", [False, True], ids=["scripted-model", "configured-model"])
def test_initialize_is_answered_before_the_session_machinery_loads(tmp_path: Path, keyed: bool) -> None:
    response, loaded, baseline = _first_write(tmp_path, keyed)

    assert response["id"] == 0
    assert response["result"]["protocolVersion"] == 1
    assert response["result"]["agentInfo"]["name"] == "refagent"
    # The profiles were read (the early path is the real one): the sign-in method says what to set.
    [method] = response["result"]["authMethods"]
    assert ("refagent login" in method["description"]) is not keyed

    too_early = [m for m in loaded if _under(m, NOT_YET)]
    assert too_early == [], f"loaded before the initialize response: {too_early}"

    assert sorted(m for m in loaded if _under(m, ("refagent",))) == sorted(EARLY_REFAGENT)

    before = set(baseline)
    others = {
        m.split(".")[0] for m in loaded if m not in before and m != "__main__" and not _under(m, ("refagent",))
    } - set(sys.stdlib_module_names)
    assert others == set(EARLY_THIRD_PARTY)
