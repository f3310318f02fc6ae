"""The first ``session/new`` is answered before the event loop starts and the session's workspace is built:
what the agent has imported when it writes that response.

Like :mod:`tests.server.test_startup_imports`, these tests spawn the real agent behind a hook on ``os.write``
(nothing in the agent changes): ``initialize`` and ``session/new`` are sent as an editor sends them, and at
the ``session/new`` response the hook reports ``sys.modules`` on stderr, lets the response through and ends
the process. Start-up answers a ``session/new`` that follows ``initialize``, written with it or once its
answer is read, before it imports the event loop and the agent (:mod:`refagent.server.boot`); the tools,
the sandbox's backends and watcher, prompting, MCP and the model client are built after the response
(:mod:`refagent.session.manager`). So none of them may be loaded by then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# At the agent's protocol write of the session/new response (id 1): the modules loaded, the write, exit.
HOOK = r"""
import json
import os
import sys

original = os.write

def write(fd, data):
    data = bytes(data)
    if data.startswith(b'{"jsonrpc":"2.0","id":1,'):
        original(2, b"MODULES " + json.dumps(sorted(sys.modules)).encode() + b"\n")
        while data:
            data = data[original(fd, data):]
        os._exit(0)
    return original(fd, data)

os.write = write
sys.argv[0] = "refagent"
from refagent.cli import main
raise SystemExit(main())
"""

LOOP = (
    # the event loop and the agent, which start once start-up has answered what came with initialize
    "anyio",
    "sniffio",
    "asyncio",
    "refagent.server.agent",
    "refagent.acp.connection",
    "refagent.session.manager",
    "refagent.session.state",
    "refagent.persistence",
    "datetime",  # config.writer's (logout), which the agent imports
)
"""What a ``session/new`` start-up answers is answered without."""

NOT_YET = (
    # built or imported after the response, in its after-work (or at the first prompt)
    "refagent.tools",
    "refagent.mcp",
    "refagent.sandbox.local",
    "refagent.sandbox.disk.watcher",
    "refagent.sandbox.editor",
    "refagent.sandbox.confine.process",
    "refagent.session.workspace",
    "refagent.session.prompting",
    "refagent.session.commands",
    "refagent.session.turn",
    "refagent.llm.protocol",
    "refagent.llm.openai_client",
    "refagent.acp.types",
    "openai",
    "httpx",
    "mcp",
    "watchfiles",
    "multiprocessing",
    "unidiff",
    "ctypes",
    "uuid",
    "hashlib",
)
"""Packages and modules (with their submodules) that must not be loaded when the response is written,
whichever phase answers it."""

ANSWERED_WITH: dict[str, str] = {
    "refagent.tools": "the package of tools.modes (its __init__ imports nothing)",
    "refagent.tools.modes": "the modes the response describes (session.options): plain classes, no imports",
}
"""The modules under :data:`NOT_YET` that the response does need, and why."""


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


@pytest.mark.parametrize("keyed", [False, True], ids=["scripted-model", "configured-model"])
@pytest.mark.parametrize("together", [True, False], ids=["with-initialize", "after-its-answer"])
def test_session_new_is_answered_before_the_workspace_and_the_model_client_load(
    tmp_path: Path, keyed: bool, together: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    if keyed:  # a configured model: its client warms up, but only after the first session's response
        env.update(OPENAI_API_KEY="sk-test-not-a-key", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    process = subprocess.Popen(
        [sys.executable, "-c", HOOK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}}
    try:
        if together:  # start-up answers both
            process.stdin.write(json.dumps(initialize).encode() + b"\n" + json.dumps(new).encode() + b"\n")
            process.stdin.flush()
            assert json.loads(process.stdout.readline())["id"] == 0
        else:  # as most editors send it, once the answer is read: start-up waits for it after initialize
            process.stdin.write(json.dumps(initialize).encode() + b"\n")
            process.stdin.flush()
            assert json.loads(process.stdout.readline())["id"] == 0
            process.stdin.write(json.dumps(new).encode() + b"\n")
            process.stdin.flush()
        answer = process.stdout.readline()  # before stdin closes: EOF would cancel the request
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = stderr.decode(errors="replace")
    assert process.returncode == 0, text
    response = json.loads(answer)
    assert response["id"] == 1
    assert response["result"]["sessionId"].startswith("sess_")
    assert response["result"]["modes"]["availableModes"]
    [report] = [line for line in text.splitlines() if line.startswith("MODULES ")]
    loaded = json.loads(report.removeprefix("MODULES "))
    assert [m for m in loaded if _under(m, NOT_YET) and m not in ANSWERED_WITH] == []
    assert [m for m in loaded if _under(m, LOOP)] == []  # start-up answered it: the loop had not started
