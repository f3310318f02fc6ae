"""Plans as the client takes them: by id (``plan_update``, ``plan_removed``) for a client that advertises the
unstable ``clientCapabilities.plan``, several plans each updated by its id and removed when emptied or done;
the whole v1 ``plan`` for one that advertises nothing, as before; and a load replays them in the form the
loading client takes, whichever form they were recorded in. Every message is validated against the unstable
schema too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from tests.support.acp_schema import validate_agent_message_unstable

pytestmark = pytest.mark.anyio

check = validate_agent_message_unstable
BY_ID = {"plan": {}}
PLAN_KINDS = ("plan", "plan_update", "plan_removed")


def step(content: str, status: str = "pending") -> dict[str, str]:
    return {"content": content, "status": status, "priority": "medium"}


CODE = [step("Write the parser", "in_progress"), step("Test it")]
CODE_DONE = [step("Write the parser", "completed"), step("Test it", "completed")]
DOCS = [step("Document the parser")]


def update_plan(call_id: str, entries: list[dict[str, str]], plan_id: str | None = None) -> ToolCallRequest:
    args: dict[str, Any] = {"entries": entries}
    if plan_id is not None:
        args["plan_id"] = plan_id
    return ToolCallRequest(id=call_id, name="update_plan", arguments=json.dumps(args))


def script() -> ScriptedModel:
    """Two plans (the default one and ``docs``), the default one finished, ``docs`` emptied; then a second
    turn that only answers."""
    return ScriptedModel(
        [
            [update_plan("c1", CODE), update_plan("c2", DOCS, "docs")],
            [update_plan("c3", CODE_DONE), update_plan("c4", [], "docs")],
            text("Done."),
            text("You are welcome."),
        ]
    )


def settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


def plans(editor: Editor, sid: str) -> list[dict[str, Any]]:
    return [u for u in editor.updates(sid) if u["sessionUpdate"] in PLAN_KINDS]


async def two_turns(editor: Editor, project: Path, capabilities: dict[str, Any]) -> tuple[str, list[Any], list[Any]]:
    """A session with the script's two turns; the plan updates of each."""
    await editor.initialize(capabilities)
    sid = await editor.new_session(str(project))
    assert await editor.prompt(sid, "Write a parser") == {"stopReason": "end_turn"}
    first = plans(editor, sid)
    assert await editor.prompt(sid, "Thanks") == {"stopReason": "end_turn"}
    return sid, first, plans(editor, sid)[len(first) :]


def by_id(plan_id: str, entries: list[dict[str, str]]) -> dict[str, Any]:
    return {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": plan_id, "entries": entries}}


def removed(plan_id: str) -> dict[str, Any]:
    return {"sessionUpdate": "plan_removed", "planId": plan_id}


def whole(entries: list[dict[str, str]]) -> dict[str, Any]:
    return {"sessionUpdate": "plan", "entries": entries}


async def test_a_client_that_takes_plans_by_id_gets_each_plan_by_its_id(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with connect(settings(tmp_path, script()), check=check) as editor:
        _, first, second = await two_turns(editor, project, BY_ID)
    assert first == [by_id("main", CODE), by_id("docs", DOCS), by_id("main", CODE_DONE), removed("docs")]
    assert second == [removed("main")]  # done: every step completed when the next turn began


async def test_a_client_that_advertises_nothing_gets_the_whole_v1_plan_as_before(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with connect(settings(tmp_path, script()), check=check) as editor:
        _, first, second = await two_turns(editor, project, {})
    assert first == [whole(CODE), whole([*CODE, *DOCS]), whole([*CODE_DONE, *DOCS]), whole(CODE_DONE)]
    assert second == []  # nothing new is said: the finished plan stays shown, as it always did

    one = ScriptedModel([[update_plan("c1", CODE)], [update_plan("c2", CODE_DONE)], text("Done.")])
    async with connect(settings(tmp_path, one), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "Write a parser")
        assert plans(editor, sid) == [whole(CODE), whole(CODE_DONE)]  # one plan: exactly the model's lists


@pytest.mark.parametrize(("recorded_with", "loaded_with"), [(BY_ID, {}), ({}, BY_ID), (BY_ID, BY_ID), ({}, {})])
async def test_a_load_replays_the_plans_in_the_form_the_loading_client_takes(
    tmp_path: Path, recorded_with: dict[str, Any], loaded_with: dict[str, Any]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([[update_plan("c1", CODE), update_plan("c2", DOCS, "docs")], text("Started.")])
    async with connect(settings(tmp_path, model), check=check) as editor:
        await editor.initialize(recorded_with)
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "Write a parser")
    # the next turn finishes the default plan; the load's board knows both plans
    later = ScriptedModel([[update_plan("c3", CODE_DONE)], text("Parser written."), text("ok")])
    async with connect(settings(tmp_path, later), check=check) as editor:
        await editor.initialize(loaded_with)
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        replayed = plans(editor, sid)
        await editor.prompt(sid, "Go on")
        went_on = plans(editor, sid)[len(replayed) :]
        await editor.prompt(sid, "Thanks")
        finished = plans(editor, sid)[len(replayed) + len(went_on) :]
    if loaded_with:
        # recorded whole, a v1 plan is the default plan, the only one a v1 client saw
        assert replayed == (
            [by_id("main", CODE), by_id("docs", DOCS)]
            if recorded_with
            else [
                by_id("main", CODE),
                by_id("main", [*CODE, *DOCS]),
            ]
        )
        assert went_on == [by_id("main", CODE_DONE)]
        assert finished == [removed("main")]
    else:
        assert replayed == [whole(CODE), whole([*CODE, *DOCS])]
        # the board started from the replay: by id, the docs plan is still there
        assert went_on == ([whole([*CODE_DONE, *DOCS])] if recorded_with else [whole(CODE_DONE)])
        assert finished == []
