"""The examples work: the custom tool and its registration, the minimal client, the editor snippets."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refagent.client.demo import COPY_IGNORES, default_project, refagent_command
from refagent.client.render import Renderer
from refagent.client.run import RunOptions, run
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import connect
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.tools.registry import default_tools
from tests.support.helpers_process import ROOT, agent_env

pytestmark = pytest.mark.anyio

EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES / "custom_tool"))

from outline import Outline  # noqa: E402


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "demo-project"
    shutil.copytree(default_project(), copy, ignore=shutil.ignore_patterns(*COPY_IGNORES))
    return copy


def outline_call(path: str) -> ToolCallRequest:
    return ToolCallRequest("c1", "outline", json.dumps({"path": path}))


async def test_the_custom_tool_is_offered_and_works(project: Path, check: Any) -> None:
    model = ScriptedModel(
        [[outline_call("shop/cart.py")], [outline_call("README.md")], [outline_call("nope.py")], text("Done.")]
    )
    settings = Settings(make_model=lambda p: model, tools=lambda: [*default_tools(), Outline()])
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "outline the cart") == {"stopReason": "end_turn"}
        calls = [u for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
    assert "outline" in [t.name for t in model.requests[0].tools]
    assert (calls[0]["title"], calls[0]["kind"]) == ("Outline shop/cart.py", "read")
    assert editor.client.permission_requests == []  # a read: nothing to ask
    results = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert results[0].splitlines() == [
        "    6: class Cart",
        "    7:     def __init__(self)",
        "   10:     def add(self, product: str, unit_price: int, quantity: int=1)",
        "   15:     def quantity(self, product: str)",
        "   18:     def total(self)",
    ]
    assert results[1].startswith("Error: README.md is not a Python file")
    assert results[2] == "Error: File not found: nope.py"


@pytest.mark.slow
async def test_the_registration_runs_as_an_agent(project: Path, tmp_path: Path) -> None:
    """``examples/custom_tool/agent.py`` is an agent an editor can start: here, ``refagent run --agent``."""
    turns = [Turn(tool_calls=[ToolCall("outline", {"path": "shop/pricing.py"})]), Turn(text="Two names.")]
    with ScriptedOpenAIServer(turns, api_key="sk-x") as server:
        env = agent_env(tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-x", REFAGENT_MODEL="m")
        out = io.StringIO()
        agent = [sys.executable, str(EXAMPLES / "custom_tool" / "agent.py")]
        outcome = await run(
            RunOptions("outline pricing", str(project), agent, env=env), Renderer(out), handle_signals=False
        )
        result = server.chat_requests[1].body["messages"][-1]["content"]
    assert outcome.exit_code == 0, out.getvalue()
    assert "● Outline shop/pricing.py (read)" in out.getvalue()
    assert "def line_total(unit_price: int, quantity: int)" in result


@pytest.mark.slow
def test_the_minimal_client_still_works(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "minimal_client.py"), "Hello!", "--cwd", str(tmp_path)],
        env=agent_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("connected to refagent")
    assert "[stop reason: end_turn]" in result.stdout


def test_editor_snippets_start_the_installed_refagent() -> None:
    """The README installs ``refagent`` on PATH (pipx, uv tool): every editor example runs that command."""
    editors = EXAMPLES / "editors"
    for name in ("zed-settings.json", "jetbrains-acp.json"):
        server = json.loads((editors / name).read_text())["agent_servers"]["refagent"]
        assert server["command"] == "refagent"
    for name, line in (
        ("emacs-agent-shell.el", '\'("refagent" "--log-file"'),
        ("toad.sh", "REFAGENT=refagent "),
        ("acpx.sh", "REFAGENT=refagent "),
        ("neovim-codecompanion.lua", '"refagent",'),
    ):
        text = (editors / name).read_text()
        assert line in text, name
        assert ".venv" not in text, name


def test_the_emacs_example_uses_only_public_functions() -> None:
    """agent-shell's ``--`` functions are its own, and change without notice."""
    text = (EXAMPLES / "editors" / "emacs-agent-shell.el").read_text()
    assert re.findall(r"\(agent-shell--[\w-]+", text) == []
    assert "(agent-shell-start :config (refagent-make-agent-config))" in text


def test_the_codecompanion_example_names_the_command_that_picks_the_adapter() -> None:
    """``:CodeCompanionChat refagent`` sends the word as a prompt to the default adapter; ``adapter=`` picks it."""
    lua = (EXAMPLES / "editors" / "neovim-codecompanion.lua").read_text()
    table = (EXAMPLES / "editors" / "README.md").read_text()
    assert "Open a chat with `:CodeCompanionChat adapter=refagent`" in lua
    assert "`:CodeCompanionChat adapter=refagent`" in table
    assert "`:CodeCompanionChat refagent`" not in table
    assert re.search(r'commands = \{\s*default = \{\s*"refagent",', lua)  # the installed command, on PATH
    assert 'adapter = "refagent"' in lua


def test_the_demo_names_refagent_as_a_user_types_it(tmp_path: Path) -> None:
    """After a pipx or uv tool install, ``refagent`` on PATH is a link to the environment's script: the demo's
    closing hint says ``refagent``, not the environment's path; another ``refagent`` on PATH is not this one."""
    bin_dir = tmp_path / "tool" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "refagent"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    python = str(bin_dir / "python")
    on_path = tmp_path / "local-bin"
    on_path.mkdir()
    (on_path / "refagent").symlink_to(script)
    assert refagent_command(python, str(on_path)) == "refagent"
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "refagent").write_text("#!/bin/sh\n")
    (other / "refagent").chmod(0o755)
    assert refagent_command(python, str(other)) == str(script)
    assert refagent_command(python, str(tmp_path / "empty")) == str(script)
