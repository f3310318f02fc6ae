"""Custom tools from the config file (``tools = ["module:Class"]``, ``tool_path``): imported when the first
session's tools are built, offered after the built-in ones, and never fatal when wrong."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refagent import config
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.confine import confinement
from refagent.sandbox.confine.process import LocalTerminals
from refagent.server.handshake import answer_initialize
from refagent.settings import Settings
from refagent.testing.memory import connect
from refagent.tools.base import Plan
from refagent.tools.permissions import runs_later
from refagent.tools.registry import default_tools
from tests.support.helpers_process import ROOT, AgentProcess, agent_env

BUILTIN = [tool.name for tool in default_tools()]

SHOUT = """
from typing import Any, ClassVar

from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult


class Shout(BaseTool):
    name = "shout"
    description = "Upper-case a text."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    kind = "read"

    def title(self, args: dict[str, Any]) -> str:
        return f"Shout {args['text']}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        async def execute() -> ToolResult:
            return ToolResult(args["text"].upper())

        return Plan(title=self.title(args), execute=execute)
"""


@dataclasses.dataclass
class Tools:
    """A ``tools`` directory next to a config file, with uniquely named modules (imports are cached)."""

    root: Path

    @property
    def directory(self) -> Path:
        return self.root / "tools"

    def module(self, source: str, prefix: str = "tool") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.directory.mkdir(exist_ok=True)
        (self.directory / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return name

    def config(self, *entries: str) -> Path:
        path = self.root / "config.toml"
        path.write_text(f'tools = {json.dumps(list(entries))}\ntool_path = ["tools"]\n', encoding="utf-8")
        return path

    def settings(self, *entries: str) -> Settings:
        return Settings.from_config(config.load(None, {"REFAGENT_CONFIG": str(self.config(*entries))}))


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tools]:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader appends tool_path to it
    monkeypatch.setattr(confinement, "_OWN_CODE_TOO", [])  # what the tools imported here add to own code
    before = set(sys.modules)
    yield Tools(tmp_path)
    for name in set(sys.modules) - before:
        if name.startswith(("tool_", "marker_")):
            del sys.modules[name]


def names(settings: Settings) -> list[str]:
    return [tool.name for tool in settings.tools()]


def problems(settings: Settings) -> list[str]:
    assert settings.problems is not None
    return list(settings.problems())


# -- working tools -----------------------------------------------------------------------------


def test_the_session_tools_are_the_default_ones_then_the_custom_ones_in_order(tools: Tools) -> None:
    shout = tools.module(SHOUT)
    other = tools.module(SHOUT.replace('"shout"', '"whisper"'))
    settings = tools.settings(f"{other}:Shout", f"{shout}:Shout")
    assert names(settings) == [*BUILTIN, "whisper", "shout"]
    first, second = settings.tools(), settings.tools()
    assert first[-1] is not second[-1]  # a fresh instance per session, like the built-in tools
    assert problems(settings) == []


@pytest.mark.anyio
async def test_a_custom_tool_is_the_agents_own_code_once_imported(tools: Tools) -> None:
    """The next ``refagent`` imports it as it imports itself: where a root holds it, a command cannot
    change it, and the file tools ask before they do."""
    shout = tools.module(SHOUT)
    settings = tools.settings(f"{shout}:Shout")
    assert names(settings)[-1] == "shout"
    assert str(tools.directory.resolve()) in confinement.own_code()

    async def nothing() -> Any:
        raise AssertionError

    edit = Plan("Write", nothing, locations=[{"path": str(tools.directory / f"{shout}.py")}], mutating=True)
    assert runs_later(edit, [str(tools.root)]).runs_later == f"tools/{shout}.py: refagent runs it when it starts"
    if not confinement.machine_support().missing("workspace"):
        box = confinement.Confinement([str(tools.root)], confinement.machine_support())
        try:
            result = await LocalTerminals(confinement=box).run(
                f"echo evil >> tools/{shout}.py || echo refused; echo ok > notes.txt && echo wrote", str(tools.root), 30
            )
        finally:
            box.close()
        assert result.output.splitlines()[-2:] == ["refused", "wrote"], result.output


def test_no_custom_tools_means_the_default_tools_and_nothing_to_report(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("max_requests = 3\n", encoding="utf-8")
    settings = Settings.from_config(config.load(None, {"REFAGENT_CONFIG": str(path)}))
    assert names(settings) == BUILTIN
    assert settings.problems is None


@pytest.mark.anyio
async def test_a_custom_tool_is_offered_to_the_model_and_runs(tools: Tools, check: Any) -> None:
    shout = tools.module(SHOUT)
    call = ToolCallRequest("c1", "shout", json.dumps({"text": "hello"}))
    model = ScriptedModel([[call], text("Done.")])
    settings = dataclasses.replace(tools.settings(f"{shout}:Shout"), make_model=lambda profile: model)
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tools.root))
        assert await editor.prompt(sid, "shout hello") == {"stopReason": "end_turn"}
        calls = [u for u in editor.updates(sid) if u["sessionUpdate"] == "tool_call"]
        said = editor.text(sid)
    assert [t.name for t in model.requests[0].tools] == [*BUILTIN, "shout", "task"]  # task: the turn's own, last
    assert (calls[0]["title"], calls[0]["kind"]) == ("Shout hello", "read")
    assert [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"] == ["HELLO"]
    assert "left out" not in said  # nothing to report


@pytest.mark.anyio
async def test_the_example_tool_works_from_the_config_alone(tmp_path: Path, check: Any) -> None:
    """The config-only way of ``examples/custom_tool/README.md``."""
    example = ROOT / "examples" / "custom_tool"
    path = tmp_path / "config.toml"
    path.write_text(f'tools = ["outline:Outline"]\ntool_path = [{json.dumps(str(example))}]\n', encoding="utf-8")
    settings = Settings.from_config(config.load(None, {"REFAGENT_CONFIG": str(path)}))
    model = ScriptedModel([[ToolCallRequest("c1", "outline", json.dumps({"path": "a.py"}))], text("Done.")])
    (tmp_path / "a.py").write_text("class A:\n    def f(self): pass\n", encoding="utf-8")
    async with connect(dataclasses.replace(settings, make_model=lambda p: model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "outline a.py") == {"stopReason": "end_turn"}
    assert [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"] == [
        "    1: class A\n    2:     def f(self)"
    ]
    assert problems(settings) == []


# -- tools that cannot be used -----------------------------------------------------------------

VARIANTS = (
    SHOUT
    + """

class Clash(Shout):
    name = "read_file"


class Twin(Shout):
    pass


class NeedsToken(Shout):
    def __init__(self) -> None:
        raise ValueError("needs a token")


class Bare(BaseTool):
    name = "bare"


class BadName(Shout):
    name = "sh out"


class BadSchema(Shout):
    parameters = ["text"]


class Plain:
    name = "plain"


def make() -> Shout:
    return Shout()
"""
)

BROKEN = {
    "not an entry": ("{tools}.Shout", 'not "module:Class"'),
    "missing module": ("no_such_module_{uid}:Tool", "importing no_such_module_{uid} failed: ModuleNotFoundError"),
    "syntax error": ("{broken}:Tool", "importing {broken} failed: SyntaxError"),
    "raises on import": ("{raises}:Tool", "importing {raises} failed: RuntimeError: no network here"),
    "exits on import": ("{exits}:Tool", "importing {exits} failed: SystemExit: 3"),
    "missing class": ("{tools}:Shuot", r"{tools} \(.*{tools}.py\) has no Shuot"),
    "not a BaseTool": ("{tools}:Plain", "Plain in {tools} .* is not a subclass of refagent.tools.base.BaseTool"),
    "not a class": ("{tools}:make", "make in {tools} .* is not a subclass"),
    "constructor raises": ("{tools}:NeedsToken", r"NeedsToken\(\) failed: ValueError: needs a token"),
    "built-in name": ("{tools}:Clash", "its name 'read_file' is taken by a built-in tool"),
    "custom name": ("{tools}:Twin", "its name 'shout' is taken by the custom tool '{tools}:Shout'"),
    "no description": ("{tools}:Bare", "it has no description"),
    "bad name": ("{tools}:BadName", "its name must be 1-64 letters"),
    "bad schema": ("{tools}:BadSchema", "its parameters must be a JSON schema object"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_tool_that_cannot_be_used_is_left_out_and_logged_once(
    tools: Tools, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    modules = {
        "uid": uuid.uuid4().hex[:8],
        "tools": tools.module(VARIANTS),
        "broken": tools.module("def (:\n"),
        "raises": tools.module("raise RuntimeError('no network here')\n"),
        "exits": tools.module("import sys\nsys.exit(3)\n"),
    }
    entry, problem = (part.format(**modules) for part in BROKEN[case])
    good = f"{modules['tools']}:Shout"
    settings = tools.settings(good, entry) if case == "custom name" else tools.settings(entry, good)
    # At info: the session tells the user, and a warning would tell refagent run's user a second time.
    with caplog.at_level(logging.INFO, logger="refagent.tools.custom"):
        assert names(settings) == [*BUILTIN, "shout"]  # the good one stays
        assert names(settings) == [*BUILTIN, "shout"]  # a second session: the same, and not logged again
    assert len(caplog.records) == 1, caplog.text
    [reported] = problems(settings)
    assert reported == caplog.records[0].getMessage()
    assert reported.startswith(f"custom tool {entry!r} left out: ")
    assert re.search(problem, reported), reported


def test_an_import_failure_says_where_modules_were_looked_for(tools: Tools) -> None:
    settings = tools.settings("no_such_module_xyz:Tool")
    names(settings)
    assert f"(tool_path: {tools.directory})" in problems(settings)[0]


def test_problems_are_only_known_once_the_tools_are_built(tools: Tools) -> None:
    settings = tools.settings("no_such_module_xyz:Tool")
    assert problems(settings) == []  # nothing imported yet
    names(settings)
    assert len(problems(settings)) == 1


@pytest.mark.anyio
async def test_the_user_hears_about_a_tool_left_out_in_each_session(tools: Tools, check: Any) -> None:
    plain = tools.module("class Plain:\n    pass\n")
    shout = tools.module(SHOUT)
    settings = tools.settings(f"{plain}:Plain", f"{shout}:Shout")
    model = ScriptedModel([text("Hi."), text("Hi again."), text("Back.")])
    async with connect(dataclasses.replace(settings, make_model=lambda p: model), check=check) as editor:
        await editor.initialize()
        first = await editor.new_session(str(tools.root))
        assert await editor.prompt(first, "hello") == {"stopReason": "end_turn"}  # the agent works
        second = await editor.new_session(str(tools.root))
        assert await editor.prompt(second, "hello") == {"stopReason": "end_turn"}
        said = [editor.text(first), editor.text(second)]
        await editor.request("session/resume", {"sessionId": first, "cwd": str(tools.root), "mcpServers": []})
        assert await editor.prompt(first, "again") == {"stopReason": "end_turn"}
        resumed = editor.text(first)
    assert [t.name for t in model.requests[0].tools] == [*BUILTIN, "shout", "task"]  # task: the turn's own, last
    for thread in said:
        assert thread.startswith(f"custom tool '{plain}:Plain' left out: Plain in {plain} (")
        assert thread.count("left out") == 1
    assert resumed.count("left out") == 2  # said again when the session is opened again


# -- startup -----------------------------------------------------------------------------------


def marking(marker: Path) -> str:
    """The shout tool in a module that leaves ``marker`` behind when it is imported."""
    return f"from pathlib import Path\n\nPath({str(marker)!r}).write_text('imported')\n" + SHOUT


def test_initialize_is_answered_without_importing_custom_tools(tools: Tools) -> None:
    marker = tools.root / "imported"
    module = tools.module(marking(marker), prefix="marker")
    settings = tools.settings(f"{module}:Shout")
    answer_initialize(settings, settings.saves_sessions(), {"protocolVersion": 1})
    assert not marker.exists()
    assert module not in sys.modules
    assert names(settings)[-1] == "shout"
    assert marker.exists()


@pytest.mark.anyio
async def test_a_real_agent_imports_custom_tools_at_the_first_session(tools: Tools, check: Any) -> None:
    marker = tools.root / "imported"
    module = tools.module(marking(marker), prefix="marker")
    env = agent_env(tools.root / "home", REFAGENT_CONFIG=str(tools.config(f"{module}:Shout", "missing_tool_mod:X")))
    async with AgentProcess.start(tools.root, check=check, env=env) as agent:
        await agent.initialize()
        assert not marker.exists()  # initialize answered, the session machinery warming up: no tool yet
        sid = await agent.new_session(tools.root)
        # The session's tools are made after its response, before its announcements.
        await agent.wait_for(
            lambda m: (
                m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] == "available_commands_update"
            )
        )
        assert marker.exists()
        result = await agent.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert result == {"stopReason": "end_turn"}
        assert "custom tool 'missing_tool_mod:X' left out: importing missing_tool_mod failed" in agent.text(sid)
        await agent.close_stdin()
        await agent.wait_exit(10)
    # Told in the session, logged at info only: not a second time on stderr (refagent run's user reads both).
    assert "custom tool 'missing_tool_mod:X' left out" not in agent.stderr()


def test_a_tool_written_against_tools_base_finds_the_seams_there() -> None:
    """The backend protocols moved to refagent.sandbox.seams; a custom tool that imports them from
    refagent.tools.base (as tools written before the move do) gets the same objects."""
    import refagent.sandbox.seams as seams
    import refagent.tools.base as base

    for name in ("TextFiles", "Disk", "Terminals", "CommandResult", "PathPolicy", "ReadTracker", "ResolvedPath"):
        assert getattr(base, name) is getattr(seams, name), name
        assert name in base.__all__
