"""The sandbox levels as the user meets them: the ``auto`` mode's decisions, ``run_command``'s titles,
previews and permission keys per level, the mode descriptions that follow what this machine can confine,
and the one-line warning a session gets on a machine that cannot confine commands fully."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.sandbox.confine.confinement import (
    GIT,
    LIFETIME,
    METADATA,
    NETWORK,
    PROCESSES,
    SECRETS,
    SIGNALS,
    TERMINALS,
    WRITES,
    Confinement,
    Support,
    machine_support,
)
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.disk.tracker import FileTracker
from refagent.sandbox.holding import Holding
from refagent.sandbox.local import Sandbox
from refagent.sandbox.seams import Level
from refagent.sandbox.search.dispatch import LocalSearch
from refagent.session.modes import modes_for
from refagent.settings import OwnSandboxes, Settings
from refagent.testing.memory import Editor, FakeClient, allow_once, connect
from refagent.tools.base import CommandResult, Plan, ToolResult
from refagent.tools.command_scope import permission_scope
from refagent.tools.modes import MODES
from refagent.tools.permissions import Permissions
from refagent.tools.shell import RunCommand
from tests.support.tool_fakes import ScriptedTerminals, call, check_plan, make_ctx

pytestmark = pytest.mark.anyio

FULL = Support(landlock=6, namespaces=True, netns=True)
NOTHING = Support()
DEGRADED = [WRITES, PROCESSES, LIFETIME]
"""What ScriptedTerminals report as not confined on a machine without Landlock or namespaces."""
MODE_ORDER = ["ask", "accept-edits", "auto", "read-only", "full-access"]
OK = CommandResult(output="ok\n", exit_code=0)


async def _nothing() -> ToolResult:
    raise AssertionError("decide never runs a plan")


def plan(**fields: Any) -> Plan:
    return Plan(title="t", execute=_nothing, **fields)


def preview_text(p: Plan) -> str:
    [content] = p.preview
    assert content["type"] == "content"
    text_block: Any = content["content"]
    return str(text_block["text"])


async def command_plan(
    root: Path, command: str = "npm install", *, missing: Sequence[str] = (), **args: Any
) -> tuple[Plan, ScriptedTerminals]:
    """The real tool's plan for ``command`` (``args``: its other arguments) on scripted terminals."""
    terminals = ScriptedTerminals(OK)
    holding = Holding(gaps={"workspace": missing, "network": missing})
    p = await RunCommand().prepare(
        {"command": command, **args}, make_ctx(str(root), terminals=terminals, holding=holding)
    )
    check_plan(p, "execute")
    return p, terminals


# -- Permissions.decide ---------------------------------------------------------------------------


def test_auto_allows_edits_inside_the_roots_and_confined_commands() -> None:
    permissions = Permissions()
    edit = plan(mutating=True, permission_key="edit")
    assert permissions.decide("auto", "edit", edit) == ("allow", "")
    assert permissions.decide("auto", "move", plan(mutating=True, permission_key="move")) == ("allow", "")
    confined = plan(mutating=True, confined=True, permission_key="command:make")
    assert permissions.decide("auto", "execute", confined) == ("allow", "")


def test_auto_asks_for_unconfined_commands_deletions_and_outside_reads() -> None:
    permissions = Permissions()
    unconfined = plan(mutating=True, confined=False, permission_key="command:make")
    assert permissions.decide("auto", "execute", unconfined) == ("ask", "")
    delete = plan(mutating=True, permission_key="delete")
    assert permissions.decide("auto", "delete", delete) == ("ask", "")
    outside = plan(outside=True, permission_key="read-outside:/etc")
    assert permissions.decide("auto", "read", outside) == ("ask", "")


def test_auto_still_refuses_what_the_user_always_rejected() -> None:
    permissions = Permissions(rejected={"command:make", "edit"})
    confined = plan(mutating=True, confined=True, permission_key="command:make", permission_label="`make`")
    decision, reason = permissions.decide("auto", "execute", confined)
    assert decision == "refuse"
    assert "always reject `make`" in reason
    assert permissions.decide("auto", "edit", plan(mutating=True, permission_key="edit"))[0] == "refuse"


def test_read_only_refuses_confined_commands_too() -> None:
    confined = plan(mutating=True, confined=True, permission_key="command:make")
    assert Permissions().decide("read-only", "execute", confined)[0] == "refuse"


@pytest.mark.parametrize("level", ["workspace", "network", "none"])
async def test_full_access_allows_every_level_and_accept_edits_asks(level: Level, tmp_path: Path) -> None:
    p, _ = await command_plan(tmp_path, sandbox=level)
    assert p.confined == (level == "workspace")
    assert Permissions().decide("full-access", "execute", p) == ("allow", "")
    assert Permissions().decide("accept-edits", "execute", p) == ("ask", "")
    assert Permissions().decide("ask", "execute", p) == ("ask", "")
    assert Permissions().decide("auto", "execute", p) == ("allow" if level == "workspace" else "ask", "")


async def test_accept_edits_asks_even_for_a_confined_command(tmp_path: Path) -> None:
    p, _ = await command_plan(tmp_path, "make test")
    assert p.confined
    assert Permissions().decide("accept-edits", "execute", p) == ("ask", "")


# -- run_command: titles, previews, keys ------------------------------------------------------------


async def test_a_workspace_command_is_confined_and_says_so(tmp_path: Path) -> None:
    p, terminals = await command_plan(tmp_path, "make test")
    assert p.title == "Run `make test`"
    assert p.confined
    assert p.permission_key == "command:make test"
    assert p.permission_label == permission_scope("make test")[1]
    shown = preview_text(p)
    assert "Sandbox: workspace: writes only inside the workspace and a private /tmp, no network" in shown
    assert "cannot confine" not in shown
    assert "Reason:" not in shown
    await p.execute()
    assert terminals.levels == ["workspace"]


async def test_the_default_level_is_workspace_and_null_means_it_too(tmp_path: Path) -> None:
    explicit, _ = await command_plan(tmp_path, "make", sandbox="workspace")
    null, _ = await command_plan(tmp_path, "make", sandbox=None)
    default, _ = await command_plan(tmp_path, "make")
    assert explicit.title == null.title == default.title == "Run `make`"
    assert explicit.permission_key == null.permission_key == default.permission_key == "command:make"
    assert [explicit.confined, null.confined, default.confined] == [True, True, True]


async def test_a_network_command_says_so_with_its_reason(tmp_path: Path) -> None:
    p, terminals = await command_plan(tmp_path, "npm install", sandbox="network", reason="  installs the deps  ")
    assert p.title == "Run `npm install` (network access)"
    assert RunCommand().title({"command": "npm install", "sandbox": "network"}) == p.title
    assert not p.confined
    assert p.permission_key == "command@network:npm install"
    assert p.permission_label == permission_scope("npm install")[1] + " (network access)"
    shown = preview_text(p)
    assert "Sandbox: network: writes only inside the workspace and a private /tmp, with network access." in shown
    assert "\nReason: installs the deps" in shown
    assert f"Working directory: {tmp_path}" in shown
    await p.execute()
    assert terminals.levels == ["network"]


async def test_an_unconfined_command_says_so(tmp_path: Path) -> None:
    p, terminals = await command_plan(
        tmp_path, "cp a ~/.config/x", sandbox="none", reason="writes your config", cwd=".", missing=DEGRADED
    )
    assert p.title == "Run `cp a ~/.config/x` (unconfined)"
    assert RunCommand().title({"command": "cp a ~/.config/x", "sandbox": "none"}) == p.title
    assert not p.confined
    assert p.permission_key == "command-exact@none:cp a ~/.config/x"  # cp may overwrite anything: exactly this
    assert p.permission_label.endswith(" (unconfined)")
    shown = preview_text(p)
    assert "Sandbox: none: unconfined: your full access to files, network and processes." in shown
    assert "cannot confine" not in shown  # nothing was promised, so nothing is missing
    assert "Reason: writes your config" in shown
    await p.execute()
    assert terminals.levels == ["none"]


async def test_exact_keys_carry_the_level_too(tmp_path: Path) -> None:
    workspace, _ = await command_plan(tmp_path, "cd sub && make")
    network, _ = await command_plan(tmp_path, "cd sub && make", sandbox="network")
    assert workspace.permission_key == "command-exact:cd sub && make"
    assert network.permission_key == "command-exact@network:cd sub && make"


async def test_a_workspace_command_this_machine_cannot_confine(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    p, terminals = await command_plan(tmp_path, "make", missing=DEGRADED, cwd="sub")
    assert p.title == "Run `make` in sub (not sandboxed here)"
    assert RunCommand().title({"command": "make"}) == "Run `make`"  # before prepare, nothing is known
    assert not p.confined
    assert p.permission_key == "command:make"  # the same scope as on a machine that confines it
    shown = preview_text(p)
    assert "Sandbox: workspace: " in shown
    assert f"This machine cannot confine it from {', '.join(DEGRADED)}." in shown
    assert f"Working directory: {tmp_path / 'sub'}" in shown
    assert Permissions().decide("auto", "execute", p) == ("ask", "")
    await p.execute()
    assert terminals.levels == ["workspace"]  # the level is still asked for: as far as the machine can


async def test_a_network_command_this_machine_cannot_confine(tmp_path: Path) -> None:
    p, _ = await command_plan(tmp_path, "npm install", sandbox="network", missing=[WRITES])
    assert p.title == "Run `npm install` (network access; not sandboxed here)"
    assert not p.confined
    assert "This machine cannot confine it from writes outside the workspace." in preview_text(p)


@pytest.mark.parametrize("value", ["sandboxed", "", "WORKSPACE", 1, True])
async def test_a_bad_sandbox_value_names_the_valid_ones(value: Any, tmp_path: Path) -> None:
    terminals = ScriptedTerminals(OK)
    with pytest.raises(ToolError, match=r"`sandbox` must be one of workspace, network, none; got "):
        await RunCommand().prepare({"command": "make", "sandbox": value}, make_ctx(str(tmp_path), terminals=terminals))
    assert terminals.calls == []


async def test_always_allow_is_remembered_per_level(tmp_path: Path) -> None:
    workspace, _ = await command_plan(tmp_path, "npm install")
    network, _ = await command_plan(tmp_path, "npm install", sandbox="network")
    unconfined, _ = await command_plan(tmp_path, "npm install", sandbox="none")
    assert len({workspace.permission_key, network.permission_key, unconfined.permission_key}) == 3
    permissions = Permissions(allowed={workspace.permission_key})
    assert permissions.decide("ask", "execute", workspace) == ("allow", "")
    assert permissions.decide("ask", "execute", unconfined) == ("ask", "")
    assert permissions.decide("ask", "execute", network) == ("ask", "")
    assert permissions.decide("auto", "execute", unconfined) == ("ask", "")
    # and the other way round: allowing the unconfined command does not allow it at another level by name
    wide = Permissions(allowed={unconfined.permission_key})
    assert wide.decide("ask", "execute", unconfined) == ("allow", "")
    assert wide.decide("ask", "execute", network) == ("ask", "")


# -- a whole agent ---------------------------------------------------------------------------------


def request(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


def agent_settings(
    terminals: ScriptedTerminals,
    support: Support | None,
    *responses: Any,
    problems: Sequence[str] | None = None,
    own_holding: Holding | None = None,
) -> Settings:
    model = ScriptedModel(list(responses))

    def make_sandbox(cwd: str, extra: list[str]) -> Sandbox:
        return Sandbox(
            policy=RootPolicy(cwd, extra),
            disk=LocalFileSystem(),
            terminals=terminals,
            reads=FileTracker(),
            search=LocalSearch(),
            confinement=Confinement([cwd, *extra], support) if support is not None else None,
            own_holding=own_holding,
        )

    return Settings(
        make_model=lambda profile: model,
        make_sandbox=OwnSandboxes(make_sandbox),
        store=None,
        problems=(lambda: list(problems)) if problems is not None else None,
    )


def three_commands() -> list[Any]:
    return [
        [request(1, "write_file", path="a.txt", content="one\n")],
        [request(2, "run_command", command="make test")],
        [request(3, "run_command", command="npm install", sandbox="network", reason="fetches the packages")],
        [request(4, "run_command", command="cp a.txt ~/a.txt", sandbox="none", reason="copies it home")],
        text("done"),
    ]


async def run_three(
    tmp_path: Path, mode: str, missing: Sequence[str], support: Support, check: Any
) -> tuple[FakeClient, ScriptedTerminals]:
    terminals = ScriptedTerminals(OK)
    client = FakeClient(permission=allow_once)
    async with connect(agent_settings(terminals, support, *three_commands()), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": mode})
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        statuses = [u["status"] for u in editor.updates(sid) if u.get("status") in ("completed", "failed")]
    assert statuses == ["completed"] * 4
    assert (tmp_path / "a.txt").read_text() == "one\n"
    assert [c[0] for c in terminals.calls] == ["make test", "npm install", "cp a.txt ~/a.txt"]
    assert terminals.levels == ["workspace", "network", "none"]
    return client, terminals


def titles(client: FakeClient) -> list[str]:
    return [r["toolCall"]["title"] for r in client.permission_requests]


async def test_auto_runs_confined_commands_and_asks_for_the_rest(tmp_path: Path, check: Any) -> None:
    client, _ = await run_three(tmp_path, "auto", [], FULL, check)
    assert titles(client) == ["Run `npm install` (network access)", "Run `cp a.txt ~/a.txt` (unconfined)"]
    network, unconfined = client.permission_requests
    network_text = network["toolCall"]["content"][0]["content"]["text"]
    assert "Sandbox: network:" in network_text
    assert "Reason: fetches the packages" in network_text
    assert "Reason: copies it home" in unconfined["toolCall"]["content"][0]["content"]["text"]
    assert {o["name"] for o in network["options"]} >= {
        f"Always allow {permission_scope('npm install')[1]} (network access)"
    }


async def test_accept_edits_asks_for_every_command_on_a_confining_machine(tmp_path: Path, check: Any) -> None:
    client, _ = await run_three(tmp_path, "accept-edits", [], FULL, check)
    assert titles(client) == [
        "Run `make test`",
        "Run `npm install` (network access)",
        "Run `cp a.txt ~/a.txt` (unconfined)",
    ]


@pytest.mark.parametrize("mode", ["auto", "accept-edits"])
async def test_on_a_degraded_machine_auto_asks_like_accept_edits(mode: str, tmp_path: Path, check: Any) -> None:
    client, _ = await run_three(tmp_path, mode, DEGRADED, NOTHING, check)
    assert titles(client) == [
        "Run `make test` (not sandboxed here)",
        "Run `npm install` (network access; not sandboxed here)",
        "Run `cp a.txt ~/a.txt` (unconfined)",
    ]
    first = client.permission_requests[0]["toolCall"]["content"][0]["content"]["text"]
    assert "This machine cannot confine it from writes outside the workspace" in first


@pytest.mark.parametrize("holds", ["nothing", "everything"])
async def test_a_sandbox_of_ones_own_is_described_and_obeyed_by_one_answer(
    holds: str, tmp_path: Path, check: Any
) -> None:
    """A fork's sandbox without the launcher's confinement (a container's, say) is held to what it says it
    holds (``Sandbox.own_holding``; nothing, unless it says): the modes describe that, and ``auto`` obeys
    the same answer. Its terminals cannot claim otherwise (they are not asked)."""
    own = Holding(writes=True, network=True, hidden=True) if holds == "everything" else None
    responses = [
        [request(1, "run_command", command="make test")],
        [request(2, "run_command", command="make lint")],
        text("done"),
    ]
    terminals = ScriptedTerminals(OK)
    client = FakeClient(permission=allow_once)
    settings = agent_settings(terminals, None, *responses, own_holding=own)
    async with connect(settings, client=client, check=check) as editor:
        await editor.initialize()
        sid, result = await new_session(editor, tmp_path)
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"})
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        auto = descriptions(editor.agent.sessions[sid].state()["modes"]["availableModes"])["auto"]
    assert descriptions(result["modes"]["availableModes"])["auto"] == auto  # what the client was told
    assert [c[0] for c in terminals.calls] == ["make test", "make lint"]
    if holds == "nothing":
        assert titles(client) == ["Run `make test` (not sandboxed here)", "Run `make lint` (not sandboxed here)"]
        assert "Commands still ask" in auto
    else:
        assert client.permission_requests == []
        assert auto == next(mode.description for mode in MODES if mode.id == "auto")


async def test_full_access_asks_for_nothing_at_any_level(tmp_path: Path, check: Any) -> None:
    client, _ = await run_three(tmp_path, "full-access", [], FULL, check)
    assert client.permission_requests == []


async def test_auto_still_asks_before_a_deletion(tmp_path: Path, check: Any) -> None:
    (tmp_path / "old.txt").write_text("x\n")
    terminals = ScriptedTerminals(OK)
    responses = [[request(1, "delete_path", path="old.txt")], text("done")]
    client = FakeClient(permission=allow_once)
    async with connect(agent_settings(terminals, FULL, *responses), client=client, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"})
        await editor.prompt(sid, "go")
    [asked] = client.permission_requests
    assert asked["toolCall"]["kind"] == "delete"
    assert not (tmp_path / "old.txt").exists()


# -- modes, their descriptions, and the announcement ----------------------------------------------


def degraded(how: str) -> Support:
    """No support at all, or this machine's with Landlock and the namespaces switched off."""
    if how == "nothing":
        return NOTHING
    return machine_support(env={"REFAGENT_SANDBOX_DISABLE": "landlock,namespaces"})


def descriptions(modes: list[Any]) -> dict[str, str]:
    return {m["id"]: m["description"] for m in modes}


def test_modes_for_a_machine_that_confines() -> None:
    modes = modes_for(FULL.holding())
    assert [m["id"] for m in modes] == MODE_ORDER
    said = descriptions(modes)
    assert "run sandboxed commands (writes only inside the workspace, no network) without asking" in said["auto"]
    assert "Commands still run sandboxed" in said["full-access"]
    assert "cannot confine" not in said["auto"]
    assert "not fully confined" not in said["full-access"]


@pytest.mark.parametrize("how", ["nothing", "disabled"])
def test_modes_for_a_machine_that_cannot_confine(how: str) -> None:
    support = degraded(how)
    modes = modes_for(support.holding())
    assert [m["id"] for m in modes] == MODE_ORDER
    said = descriptions(modes)
    gaps = ", ".join(support.missing("workspace"))
    assert "Commands still ask: this machine cannot confine " + gaps in said["auto"]
    assert "sandboxed commands" not in said["auto"]
    assert "Commands are not fully confined on this machine (" + gaps in said["full-access"]
    assert descriptions(modes_for(FULL.holding()))["ask"] == said["ask"]  # the rest do not depend on the machine


def test_modes_name_only_what_is_missing() -> None:
    no_netns = descriptions(modes_for(Support(landlock=3, namespaces=True, netns=False).holding()))
    assert no_netns["auto"].endswith("this machine cannot confine the network.")
    assert "(the network)" in no_netns["full-access"]
    no_processes = descriptions(modes_for(Support(landlock=3, namespaces=False).holding()))
    missing = f"the network, {METADATA}, {GIT}, {SECRETS}, {TERMINALS}, {PROCESSES}, {SIGNALS}, {LIFETIME}"
    assert f"cannot confine {missing}" in no_processes["auto"]
    assert "writes outside" not in no_processes["auto"]


async def new_session(editor: Editor, cwd: Path) -> tuple[str, dict[str, Any]]:
    await editor.initialize()
    result: dict[str, Any] = await editor.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    return result["sessionId"], result


async def announcement(editor: Editor, sid: str) -> str:
    update = await editor.transcript.wait_for(
        lambda sender, m: (
            sender == "agent"
            and m.get("method") == "session/update"
            and m["params"]["sessionId"] == sid
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        )
    )
    return str(update["params"]["update"]["content"]["text"])


async def test_session_new_on_a_confining_machine(tmp_path: Path, check: Any) -> None:
    settings = agent_settings(ScriptedTerminals(OK), FULL, problems=["A custom tool was left out."])
    async with connect(settings, check=check) as editor:
        sid, result = await new_session(editor, tmp_path)
        assert editor.agent.sessions[sid].holding == FULL.holding()
        modes = result["modes"]["availableModes"]
        [option] = [o for o in result["configOptions"] if o["id"] == "mode"]
        said = await announcement(editor, sid)
    assert [m["id"] for m in modes] == MODE_ORDER
    assert [o["value"] for o in option["options"]] == MODE_ORDER
    assert descriptions(modes) == {o["value"]: o["description"] for o in option["options"]}
    assert "sandboxed commands" in descriptions(modes)["auto"]
    assert said == "A custom tool was left out.\n"  # and no word about the sandbox


@pytest.mark.parametrize("how", ["nothing", "disabled"])
async def test_session_new_on_a_machine_that_cannot_confine(how: str, tmp_path: Path, check: Any) -> None:
    settings = agent_settings(ScriptedTerminals(OK), degraded(how))
    async with connect(settings, check=check) as editor:
        sid, result = await new_session(editor, tmp_path)
        said = await announcement(editor, sid)
        session = editor.agent.sessions[sid]
        modes = result["modes"]["availableModes"]
        [option] = [o for o in result["configOptions"] if o["id"] == "mode"]
        history = list(session.history)
    gaps = ", ".join(degraded(how).missing("workspace"))
    assert said == f"Sandbox: commands are not fully confined on this machine ({gaps}).\n"
    for described in (descriptions(modes), {o["value"]: o["description"] for o in option["options"]}):
        assert "this machine cannot confine writes outside the workspace" in described["auto"]
        assert "not fully confined on this machine" in described["full-access"]
    assert history == []  # not recorded: it is about this run of the agent


async def test_the_announcement_follows_the_response_with_the_other_problems(tmp_path: Path, check: Any) -> None:
    settings = agent_settings(ScriptedTerminals(OK), NOTHING, problems=["A custom tool was left out."])
    async with connect(settings, check=check) as editor:
        sid, _ = await new_session(editor, tmp_path)
        said = await announcement(editor, sid)
        sent = editor.transcript.sent_by("agent")
    assert said.startswith("A custom tool was left out.\nSandbox: commands are not fully confined on this machine (")
    response = next(i for i, m in enumerate(sent) if (m.get("result") or {}).get("sessionId") == sid)
    chunk = next(
        i
        for i, m in enumerate(sent)
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    assert response < chunk


async def test_no_announcement_without_a_confinement(tmp_path: Path, check: Any) -> None:
    """A sandbox without confinement (a custom one) promises nothing, so the agent says nothing of it."""
    settings = agent_settings(ScriptedTerminals(OK), None, problems=["A custom tool was left out."])
    async with connect(settings, check=check) as editor:
        sid, _ = await new_session(editor, tmp_path)
        assert await announcement(editor, sid) == "A custom tool was left out.\n"


# -- switching to auto -----------------------------------------------------------------------------


async def test_set_mode_to_auto_is_announced(tmp_path: Path, check: Any) -> None:
    async with connect(agent_settings(ScriptedTerminals(OK), FULL), check=check) as editor:
        sid, _ = await new_session(editor, tmp_path)
        assert await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"}) == {}
        mode = await editor.transcript.wait_for_update("current_mode_update")
        options = await editor.transcript.wait_for_update("config_option_update")
        assert editor.agent.sessions[sid].mode_id == "auto"
        # the same mode again changes nothing and says nothing
        before = len(editor.updates(sid))
        assert await editor.request("session/set_mode", {"sessionId": sid, "modeId": "auto"}) == {}
        again = editor.updates(sid)[before:]
    assert mode == {"sessionUpdate": "current_mode_update", "currentModeId": "auto"}
    [option] = [o for o in options["configOptions"] if o["id"] == "mode"]
    assert option["currentValue"] == "auto"
    assert [u["sessionUpdate"] for u in again if u["sessionUpdate"] == "current_mode_update"] == []


async def test_the_mode_option_can_be_set_to_auto(tmp_path: Path, check: Any) -> None:
    async with connect(agent_settings(ScriptedTerminals(OK), FULL), check=check) as editor:
        sid, _ = await new_session(editor, tmp_path)
        result = await editor.request(
            "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "auto"}
        )
        mode = await editor.transcript.wait_for_update("current_mode_update")
    [option] = [o for o in result["configOptions"] if o["id"] == "mode"]
    assert option["currentValue"] == "auto"
    assert mode["currentModeId"] == "auto"


# -- Support ---------------------------------------------------------------------------------------


def test_support_missing_per_level() -> None:
    assert FULL.missing("workspace") == FULL.missing("network") == FULL.missing("none") == []
    assert NOTHING.missing("workspace") == [WRITES, NETWORK, SECRETS, TERMINALS, PROCESSES, SIGNALS, LIFETIME]
    # the network was not promised
    assert NOTHING.missing("network") == [WRITES, SECRETS, TERMINALS, PROCESSES, SIGNALS, LIFETIME]
    assert NOTHING.missing("none") == []
    landlock_only = Support(landlock=6).missing("workspace")
    assert WRITES not in landlock_only
    assert PROCESSES in landlock_only
    assert LIFETIME not in landlock_only  # the launcher's keeper ends them, and the command cannot signal it
    assert "the network over UDP" in landlock_only  # Landlock's network rules are TCP only
    assert Support(landlock=3).missing("workspace") == [
        *(NETWORK, METADATA, GIT, SECRETS, TERMINALS, PROCESSES, SIGNALS, LIFETIME)
    ]
    namespaces_only = Support(namespaces=True, netns=True)
    assert namespaces_only.missing("workspace") == []  # read-only mounts hold writes without Landlock
    assert namespaces_only.missing("network") == []
    assert Support(namespaces=True).missing("workspace") == [NETWORK]
    assert Support(landlock=1, namespaces=True).missing("network") == []


def test_support_summary() -> None:
    assert FULL.summary() == "Commands are confined to the workspace (Landlock ABI 6, Linux namespaces)."
    assert NOTHING.summary().startswith("Commands are not fully confined on this machine: nothing stops writes")


def test_support_without() -> None:
    full = Support(landlock=7, namespaces=True, netns=True)
    assert full.without([]) == full
    assert full.without(["landlock"]).landlock == 0
    assert full.without(["landlock-net"]).landlock == 3
    assert full.without(["landlock-scope"]).landlock == 5
    assert full.without(["landlock-net", "landlock-scope"]).landlock == 3
    assert Support(landlock=2).without(["landlock-net"]).landlock == 2  # caps, never raises
    assert Support(landlock=4).without(["landlock-scope"]).landlock == 4
    no_namespaces = full.without(["namespaces"])
    assert (no_namespaces.namespaces, no_namespaces.netns) == (False, False)  # netns needs the namespaces
    no_netns = full.without(["netns"])
    assert (no_netns.landlock, no_netns.namespaces, no_netns.netns) == (7, True, False)
    assert full.without(["landlock", "netns"]).missing("workspace") == [NETWORK]
    assert full.without(["netns", "landlock-net"]).missing("workspace") == [NETWORK]
    noted = full.without(["netns"])
    assert noted.notes == ("netns: switched off by REFAGENT_SANDBOX_DISABLE",)


def test_machine_support_honours_the_disable_variable() -> None:
    probed = machine_support(env={})
    assert machine_support(env={"REFAGENT_SANDBOX_DISABLE": ""}) == probed
    off = machine_support(env={"REFAGENT_SANDBOX_DISABLE": " landlock , namespaces ,"})
    assert (off.landlock, off.namespaces, off.netns) == (0, False, False)
    assert off.missing("workspace") == [WRITES, NETWORK, SECRETS, TERMINALS, PROCESSES, SIGNALS, LIFETIME]
    assert "landlock: switched off by REFAGENT_SANDBOX_DISABLE" in off.notes
    assert "namespaces: switched off by REFAGENT_SANDBOX_DISABLE" in off.notes
    capped = machine_support(env={"REFAGENT_SANDBOX_DISABLE": "landlock-net"})
    assert capped.landlock == min(probed.landlock, 3)
    assert (capped.namespaces, capped.netns) == (probed.namespaces, probed.netns)


def test_the_confinement_answers_for_its_support(tmp_path: Path) -> None:
    confinement = Confinement([str(tmp_path)], NOTHING)
    assert confinement.missing("workspace") == NOTHING.missing("workspace")
    assert Confinement([str(tmp_path)], FULL).missing("workspace") == []


async def test_call_helper_still_works_with_a_level(tmp_path: Path) -> None:
    terminals = ScriptedTerminals(OK)
    result = await call(RunCommand(), make_ctx(str(tmp_path), terminals=terminals), command="ls", sandbox="network")
    assert result.output == "ok\n\nExit code: 0"
    assert terminals.levels == ["network"]
