"""The ``thought_level`` config option, through the in-memory editor, with profiles from a real config file
(``reasoning_effort = [...]``): offered (category ``thought_level``) when the session's model takes a reasoning
effort, its value carried by the next model requests (``ModelRequest.reasoning_effort``), invalid values
``-32602``, dropped when the session switches to a model that takes none (and back at the default when it
switches back), never offered or sent for a profile without efforts; and kept right by a session that is
loaded, resumed or forked on another model than the agent's default.

There is no client capability for it: a config option is offered to every client (``session/new``'s
``configOptions``); the two cases are a model that takes an effort and one that does not."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from refagent import config
from refagent.acp.errors import RequestError
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect

pytestmark = pytest.mark.anyio

CONFIG = """
default_profile = "thinker"

[profiles.thinker]
base_url = "http://127.0.0.1:9/v1"
model = "o-think"
reasoning_effort = ["low", "medium", "high"]

[profiles.plain]
base_url = "http://127.0.0.1:9/v1"
model = "plain-model"

[profiles.terse]
base_url = "http://127.0.0.1:9/v1"
model = "o-terse"
reasoning_effort = ["minimal", "low"]
default_reasoning_effort = "low"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def settings(tmp_path: Path, model: ScriptedModel, *, default: str = "thinker") -> Settings:
    """The configuration of :data:`CONFIG` (its default profile ``default``), answered by ``model``."""
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.replace('default_profile = "thinker"', f'default_profile = "{default}"'))
    loaded = Settings.from_config(config.load(None, {"REFAGENT_CONFIG": str(path)}))
    store = SessionStore(tmp_path / "sessions")
    return dataclasses.replace(loaded, make_model=lambda profile: model, store=lambda: store)


def answering() -> ScriptedModel:
    return ScriptedModel(fallback=lambda request: text("ok"))


@asynccontextmanager
async def agent(tmp_path: Path, model: ScriptedModel, check: Any, *, default: str = "thinker") -> AsyncIterator[Editor]:
    async with connect(settings(tmp_path, model, default=default), check=check) as editor:
        await editor.initialize()
        yield editor


def option(options: list[dict[str, Any]], config_id: str = "thought_level") -> dict[str, Any]:
    found = [o for o in options if o["id"] == config_id]
    assert len(found) == 1, f"no {config_id} option in {[o['id'] for o in options]}"
    return found[0]


def ids(options: list[dict[str, Any]]) -> list[str]:
    return [o["id"] for o in options]


async def set_option(editor: Editor, sid: str, config_id: str, value: Any) -> list[dict[str, Any]]:
    result = await editor.request(
        "session/set_config_option", {"sessionId": sid, "configId": config_id, "value": value}
    )
    options: list[dict[str, Any]] = result["configOptions"]
    return options


async def refused(editor: Editor, sid: str, config_id: str, value: Any) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await set_option(editor, sid, config_id, value)
    return caught.value


async def new(editor: Editor, project: Path) -> tuple[str, list[dict[str, Any]]]:
    result = await editor.request("session/new", {"cwd": str(project), "mcpServers": []})
    await editor.settled(result["sessionId"])
    return result["sessionId"], result["configOptions"]


async def test_a_model_that_takes_an_effort_offers_thought_level(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check) as editor:
        sid, options = await new(editor, project)
        assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}
    assert ids(options) == ["mode", "model", "thought_level"]
    assert option(options) == {
        "id": "thought_level",
        "name": "Reasoning effort",
        "category": "thought_level",
        "type": "select",
        "currentValue": "medium",  # the default when it is listed
        "options": [
            {"value": "low", "name": "Low", "description": "Reasoning effort: low"},
            {"value": "medium", "name": "Medium", "description": "Reasoning effort: medium"},
            {"value": "high", "name": "High", "description": "Reasoning effort: high"},
        ],
    }
    assert [r.reasoning_effort for r in model.requests] == ["medium"]


async def test_setting_it_changes_the_next_requests(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check) as editor:
        sid, _ = await new(editor, project)
        await editor.prompt(sid, "first")
        options = await set_option(editor, sid, "thought_level", "high")
        await editor.prompt(sid, "second")
        options_low = await set_option(editor, sid, "thought_level", "low")
        await editor.prompt(sid, "third")
    assert option(options)["currentValue"] == "high"
    assert option(options_low)["currentValue"] == "low"
    assert ids(options) == ["mode", "model", "thought_level"]  # the complete list
    assert [r.reasoning_effort for r in model.requests] == ["medium", "high", "low"]


async def test_invalid_levels_are_refused_and_change_nothing(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check) as editor:
        sid, _ = await new(editor, project)
        for value in ("extreme", "HIGH", "", 3, None, ["high"]):
            error = await refused(editor, sid, "thought_level", value)
            assert error.code == -32602, value
        error = await refused(editor, sid, "thought_level", "extreme")
        await editor.prompt(sid, "hi")
    assert "unknown reasoning effort 'extreme'; available: low, medium, high" in error.message
    assert [r.reasoning_effort for r in model.requests] == ["medium"]


async def test_a_model_without_efforts_drops_the_option(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check) as editor:
        sid, _ = await new(editor, project)
        await set_option(editor, sid, "thought_level", "high")
        options = await set_option(editor, sid, "model", "plain")
        assert ids(options) == ["mode", "model"]
        await editor.prompt(sid, "plain now")
        error = await refused(editor, sid, "thought_level", "high")
        assert error.code == -32602
        assert "available: mode, model" in error.message
        options = await set_option(editor, sid, "model", "thinker")  # back: at the model's default again
        assert option(options)["currentValue"] == "medium"
        await editor.prompt(sid, "thinking again")
        options = await set_option(editor, sid, "model", "terse")  # other levels: its own default
        assert [o["value"] for o in option(options)["options"]] == ["minimal", "low"]
        assert option(options)["currentValue"] == "low"
        await editor.prompt(sid, "tersely")
    assert [r.reasoning_effort for r in model.requests] == [None, "medium", "low"]


async def test_a_level_both_models_take_is_kept_across_a_switch(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check) as editor:
        sid, _ = await new(editor, project)
        await set_option(editor, sid, "thought_level", "low")
        options = await set_option(editor, sid, "model", "terse")
        await editor.prompt(sid, "hi")
    assert option(options)["currentValue"] == "low"
    assert [r.reasoning_effort for r in model.requests] == ["low"]


async def test_the_model_command_drops_it_too(project: Path, tmp_path: Path, check: Any) -> None:
    async with agent(tmp_path, answering(), check) as editor:
        sid, _ = await new(editor, project)
        mark = len(editor.updates(sid))
        assert await editor.prompt(sid, "/model plain") == {"stopReason": "end_turn"}
        [update] = [u for u in editor.updates(sid)[mark:] if u["sessionUpdate"] == "config_option_update"]
    assert ids(update["configOptions"]) == ["mode", "model"]


async def test_a_profile_without_efforts_offers_and_sends_nothing(project: Path, tmp_path: Path, check: Any) -> None:
    model = answering()
    async with agent(tmp_path, model, check, default="plain") as editor:
        sid, options = await new(editor, project)
        await editor.prompt(sid, "hi")
        error = await refused(editor, sid, "thought_level", "medium")
    assert ids(options) == ["mode", "model"]
    assert error.code == -32602
    assert [r.reasoning_effort for r in model.requests] == [None]


async def test_a_session_reopened_on_another_model_offers_that_models_levels(
    project: Path, tmp_path: Path, check: Any
) -> None:
    """A session saved on ``thinker`` (or ``terse``), opened again by an agent whose default is ``plain``
    (or ``thinker``): its own model's levels, at that model's default."""
    async with agent(tmp_path, answering(), check, default="plain") as editor:
        on_thinker, _ = await new(editor, project)
        await set_option(editor, on_thinker, "model", "thinker")
        on_terse, _ = await new(editor, project)
        await set_option(editor, on_terse, "model", "terse")
        for sid in (on_thinker, on_terse):
            await editor.prompt(sid, "hi")

    for method in ("session/load", "session/resume"):
        model = answering()
        async with agent(tmp_path, model, check, default="plain") as editor:
            result = await editor.request(method, {"sessionId": on_thinker, "cwd": str(project), "mcpServers": []})
            assert option(result["configOptions"], "model")["currentValue"] == "thinker"
            assert option(result["configOptions"])["currentValue"] == "medium", method
            await editor.prompt(on_thinker, "again")
        assert [r.reasoning_effort for r in model.requests] == ["medium"]

        model = answering()
        async with agent(tmp_path, model, check, default="thinker") as editor:
            result = await editor.request(method, {"sessionId": on_terse, "cwd": str(project), "mcpServers": []})
            assert option(result["configOptions"])["currentValue"] == "low", method
            await editor.prompt(on_terse, "again")
        assert [r.reasoning_effort for r in model.requests] == ["low"]  # not thinker's "medium"

    model = answering()
    async with agent(tmp_path, model, check, default="plain") as editor:
        result = await editor.request("session/fork", {"sessionId": on_thinker, "cwd": str(project)})
        assert option(result["configOptions"])["currentValue"] == "medium"
        await editor.settled(result["sessionId"])
        await editor.prompt(result["sessionId"], "in the fork")
    assert [r.reasoning_effort for r in model.requests] == ["medium"]


async def test_the_chosen_level_is_saved_with_the_session(project: Path, tmp_path: Path, check: Any) -> None:
    """Like the mode and the model, the level chosen survives a restart (load, resume) and goes into a fork."""
    async with agent(tmp_path, answering(), check) as editor:
        sid, _ = await new(editor, project)
        await set_option(editor, sid, "thought_level", "high")
        await editor.prompt(sid, "hi")

    for method in ("session/load", "session/resume"):
        model = answering()
        async with agent(tmp_path, model, check) as editor:
            result = await editor.request(method, {"sessionId": sid, "cwd": str(project), "mcpServers": []})
            assert option(result["configOptions"])["currentValue"] == "high", method
            await editor.prompt(sid, "again")
        assert [r.reasoning_effort for r in model.requests] == ["high"]

    model = answering()
    async with agent(tmp_path, model, check) as editor:
        result = await editor.request("session/fork", {"sessionId": sid, "cwd": str(project)})
        assert option(result["configOptions"])["currentValue"] == "high"
        await editor.settled(result["sessionId"])
        await editor.prompt(result["sessionId"], "in the fork")
    assert [r.reasoning_effort for r in model.requests] == ["high"]
