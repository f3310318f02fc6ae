"""MCP servers of the user's own: the config file's ``[mcp_servers]``, a project's ``.mcp.json`` only for
the names the user allows, merged with the editor's by name (the editor's wins), and ``/mcp``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent import config
from refagent.errors import ConfigError
from refagent.llm.scripted import ScriptedModel, text
from refagent.mcp.config import MAX_PROJECT_FILE, ServerConfigError, merged, project_servers
from refagent.settings import Settings
from refagent.testing.memory import connect
from tests.support.mcp_servers.harness import STDIO_SERVER, stdio_entry

pytestmark = pytest.mark.anyio

SERVER = [str(STDIO_SERVER)]


def load(tmp_path: Path, text_: str) -> config.Config:
    path = tmp_path / "config.toml"
    path.write_text(text_, encoding="utf-8")
    return config.load(None, {"REFAGENT_CONFIG": str(path)})


def test_the_config_files_servers_are_acp_entries(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        'project_mcp_servers = ["docs"]\n'
        '[mcp_servers.github]\ncommand = "github-mcp"\nargs = ["stdio"]\nenv = { TOKEN = "t" }\n'
        '[mcp_servers.search]\nurl = "https://mcp.example.com/mcp"\nheaders = { Authorization = "Bearer x" }\n'
        '[mcp_servers.old]\ntype = "sse"\nurl = "https://old.example.com/sse"\n',
    )
    assert loaded.mcp_servers == [
        {"name": "github", "command": "github-mcp", "args": ["stdio"], "env": {"TOKEN": "t"}},
        {
            "type": "http",
            "name": "search",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer x"},
        },
        {"type": "sse", "name": "old", "url": "https://old.example.com/sse", "headers": {}},
    ]
    assert loaded.project_mcp_servers == ("docs",)


@pytest.mark.parametrize(
    ("text_", "message"),
    [
        ('[mcp_servers.x]\nargs = ["a"]\n', "needs a command"),
        ('[mcp_servers.x]\ncommand = "c"\nargs = "a"\n', "args must be a list"),
        ('[mcp_servers.x]\ncommand = "c"\nport = 1\n', "unknown key 'port'"),
        ('mcp_servers = "x"\n', "mcp_servers must be a table"),
        ("project_mcp_servers = [1]\n", "project_mcp_servers must be a list"),
    ],
)
def test_mistakes_name_the_table(tmp_path: Path, text_: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text_)


def project_file(tmp_path: Path, servers: dict[str, Any]) -> None:
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def test_project_servers_by_name(tmp_path: Path) -> None:
    project_file(tmp_path, {"docs": {"command": "docs-mcp"}, "evil": {"command": "curl"}})
    entries, others = project_servers(str(tmp_path), ["docs"])
    assert entries == [{"command": "docs-mcp", "name": "docs"}]
    assert others == ["evil"]
    assert project_servers(str(tmp_path / "nowhere"), ["docs"]) == ([], [])


def test_a_project_file_that_is_a_link_or_too_large_or_not_json_is_said_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"mcpServers": {"docs": {"command": "x"}}}))
    project = tmp_path / "project"
    project.mkdir()
    os.symlink(secret, project / ".mcp.json")
    with pytest.raises(ServerConfigError, match="cannot be read"):
        project_servers(str(project), ["docs"])
    (project / ".mcp.json").unlink()
    (project / ".mcp.json").write_text("x" * (MAX_PROJECT_FILE + 1))
    with pytest.raises(ServerConfigError, match="larger than"):
        project_servers(str(project), ["docs"])
    (project / ".mcp.json").write_text("[1, 2]")
    with pytest.raises(ServerConfigError, match="not a JSON object"):
        project_servers(str(project), ["docs"])


def test_one_server_per_name_the_earlier_source_wins() -> None:
    editor = [{"name": "a", "command": "editor-a"}, {"command": "nameless"}]
    configured = [{"name": "a", "command": "config-a"}, {"name": "b", "command": "config-b"}]
    project = [{"name": "b", "command": "project-b"}, {"name": "c", "command": "project-c"}]
    assert [e["command"] for e in merged(editor, configured, project)] == [
        "editor-a",
        "nameless",
        "config-b",
        "project-c",
    ]


@pytest.mark.slow
async def test_a_session_gets_the_configs_servers_and_the_allowed_project_ones(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "docs": {"command": sys.executable, "args": SERVER},
                    "unasked": {"command": sys.executable, "args": SERVER},
                }
            }
        )
    )
    model = ScriptedModel([text("ok")])
    settings = Settings(
        make_model=lambda p: model,
        store=None,
        mcp_servers=[{"name": "mine", "command": sys.executable, "args": SERVER, "env": {}}],
        project_mcp_servers=("docs",),
    )
    async with connect(settings, check=check) as editor:
        await editor.initialize({"session": {"notices": {}}})
        sid = await editor.new_session(str(project), mcpServers=[stdio_entry("mine", "legacy")])
        with anyio.fail_after(30):
            await editor.settled(sid)
            session = editor.agent.sessions[sid]
            await session.mcp.wait_ready()
            await editor.prompt(sid, "/mcp")
            statuses = {s.name: s.state for s in session.mcp.status()}
    assert statuses == {"mine": "connected", "docs": "connected"}  # the editor's "mine"; "unasked" not started
    listing = editor.text(sid)
    assert "- mine: connected; tools: " in listing
    assert "echo" in listing
    notices = [u for u in editor.updates(sid) if u["sessionUpdate"] == "notice"]
    assert any("names unasked, which refagent does not start by itself" in n.get("description", "") for n in notices)


async def test_mcp_without_servers_says_where_they_come_from(tmp_path: Path, check: Any) -> None:
    settings = Settings(make_model=lambda p: ScriptedModel([]), store=None)
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        await editor.prompt(sid, "/mcp")
        assert "No MCP servers in this session" in editor.text(sid)
