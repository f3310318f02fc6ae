"""The params of every request the agent answers are read into typed objects by the server
(:mod:`refagent.acp.requests`), through the real dispatch of the in-memory editor: a missing field, a field
of the wrong type, or an unknown session each get their JSON-RPC error with a message that names what is
wrong, and the session machinery never reads the raw JSON (no module of ``session/`` reads params)."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import RequestError
from refagent.acp.requests import (
    NewSessionParams,
    OpenSessionParams,
    PromptParams,
    SessionParams,
    SetConfigOptionParams,
)
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from tests.test_layers import PACKAGE

pytestmark = pytest.mark.anyio

INVALID, NOT_FOUND = -32602, -32002
SID = "<sid>"
"""Replaced by the id of a session the test opened."""
CWD = "<cwd>"
"""Replaced by an absolute directory."""


@asynccontextmanager
async def agent(tmp_path: Path, check: Any) -> AsyncIterator[tuple[Editor, str, str]]:
    """An agent that saves sessions (so that every method is offered), with one session open."""
    model = ScriptedModel([text("ok")] * 5)
    settings = Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))
    project = tmp_path / "project"
    project.mkdir()
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        yield editor, sid, str(project)


def filled(params: dict[str, Any], sid: str, cwd: str) -> dict[str, Any]:
    return {key: sid if value == SID else cwd if value == CWD else value for key, value in params.items()}


async def error_of(editor: Editor, method: str, params: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await editor.request(method, params)
    return caught.value


CASES = [
    # missing fields
    ("session/new", {"mcpServers": []}, INVALID, "missing required field 'cwd'"),
    ("session/new", {"cwd": CWD}, INVALID, "missing required field 'mcpServers'"),
    ("session/load", {"cwd": CWD, "mcpServers": []}, INVALID, "missing required field 'sessionId'"),
    ("session/load", {"sessionId": SID, "cwd": CWD}, INVALID, "missing required field 'mcpServers'"),
    ("session/resume", {"sessionId": SID}, INVALID, "missing required field 'cwd'"),
    ("session/fork", {"cwd": CWD}, INVALID, "missing required field 'sessionId'"),
    ("session/close", {}, INVALID, "missing required field 'sessionId'"),
    ("session/delete", {"sessionId": None}, INVALID, "missing required field 'sessionId'"),
    ("session/prompt", {"sessionId": SID}, INVALID, "missing required field 'prompt'"),
    ("session/set_mode", {"sessionId": SID}, INVALID, "missing required field 'modeId'"),
    ("session/set_config_option", {"sessionId": SID, "value": "ask"}, INVALID, "missing required field 'configId'"),
    ("session/set_config_option", {"sessionId": SID, "configId": "mode"}, INVALID, "missing required field 'value'"),
    ("authenticate", {}, INVALID, "missing required field 'methodId'"),
    # the wrong type
    ("session/new", {"cwd": 7, "mcpServers": []}, INVALID, "'cwd' must be a string"),
    ("session/new", {"cwd": "relative", "mcpServers": []}, INVALID, "'cwd' must be an absolute path"),
    ("session/new", {"cwd": CWD, "mcpServers": {}}, INVALID, "'mcpServers' must be an array"),
    ("session/new", {"cwd": CWD, "mcpServers": [], "additionalDirectories": ["rel"]}, INVALID, "[0]' must be"),
    ("session/resume", {"sessionId": ["s"], "cwd": CWD}, INVALID, "'sessionId' must be a string"),
    ("session/list", {"cwd": "relative"}, INVALID, "'cwd' must be an absolute path"),
    ("session/list", {"cursor": 42}, INVALID, "'cursor' must be a string"),
    ("session/prompt", {"sessionId": SID, "prompt": "hi"}, INVALID, "'prompt' must be an array"),
    ("session/prompt", {"sessionId": SID, "prompt": ["hi"]}, INVALID, "prompt[0] is not a content block"),
    ("session/prompt", {"sessionId": SID, "prompt": [{"text": "hi"}]}, INVALID, "prompt[0] is not a content block"),
    ("session/prompt", {"sessionId": SID, "prompt": []}, INVALID, "'prompt' is empty"),
    ("session/set_mode", {"sessionId": SID, "modeId": 3}, INVALID, "'modeId' must be a string"),
    ("session/set_mode", {"sessionId": SID, "modeId": "yolo"}, INVALID, "unknown mode 'yolo'; available:"),
    ("session/set_config_option", {"sessionId": SID, "configId": "mode", "value": True}, INVALID, "string value"),
    ("session/set_config_option", {"sessionId": SID, "configId": "mode", "value": None}, INVALID, "string value"),
    ("authenticate", {"methodId": 1}, INVALID, "'methodId' must be a string"),
    # an unknown session
    ("session/load", {"sessionId": "sess_nope", "cwd": CWD, "mcpServers": []}, NOT_FOUND, "sess_nope"),
    ("session/resume", {"sessionId": "sess_nope", "cwd": CWD}, NOT_FOUND, "sess_nope"),
    ("session/fork", {"sessionId": "sess_nope", "cwd": CWD}, NOT_FOUND, "sess_nope"),
    ("session/close", {"sessionId": "sess_nope"}, NOT_FOUND, "sess_nope"),
    ("session/prompt", {"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "hi"}]}, NOT_FOUND, "nope"),
    ("session/set_mode", {"sessionId": "sess_nope", "modeId": "ask"}, NOT_FOUND, "sess_nope"),
    ("session/set_config_option", {"sessionId": "sess_nope", "configId": "mode", "value": "ask"}, NOT_FOUND, "nope"),
]


async def test_each_request_says_what_is_wrong_with_its_params(tmp_path: Path, check: Any) -> None:
    async with agent(tmp_path, check) as (editor, sid, cwd):
        for method, params, code, said in CASES:
            error = await error_of(editor, method, filled(params, sid, cwd))
            assert (error.code, said in error.message) == (code, True), (method, params, error.message)
            if code == INVALID:
                assert error.message.startswith("Invalid params: "), error.message
        # nothing of it reached the session: it works as before
        assert await editor.prompt(sid, "still here?") == {"stopReason": "end_turn"}
        assert editor.agent.sessions[sid].mode_id == "ask"


async def test_params_are_read_before_the_session_is_looked_up(tmp_path: Path, check: Any) -> None:
    """Params the schema does not allow are the client's mistake whether or not the session exists."""
    async with agent(tmp_path, check) as (editor, _, _):
        error = await error_of(editor, "session/prompt", {"sessionId": "sess_nope"})
        assert (error.code, error.message) == (INVALID, "Invalid params: missing required field 'prompt'")


async def test_a_cancel_with_no_session_id_is_ignored(tmp_path: Path, check: Any) -> None:
    """A notification has no answer to carry an error: a ``session/cancel`` it cannot use does nothing."""
    async with agent(tmp_path, check) as (editor, sid, _):
        for params in ({}, {"sessionId": 5}, {"sessionId": None}, {"sessionId": "sess_nope"}):
            await editor.notify("session/cancel", params)
        assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}


async def test_optional_fields_malformed_read_as_their_default(tmp_path: Path, check: Any) -> None:
    """``session/resume``'s ``mcpServers`` is optional: malformed, it is none (the schema's
    default-on-error); the session opens."""
    async with agent(tmp_path, check) as (editor, sid, cwd):
        result = await editor.request("session/resume", {"sessionId": sid, "cwd": cwd, "mcpServers": "nope"})
        assert result["modes"]["currentModeId"] == "ask"


def test_the_typed_params_are_frozen_and_hold_what_was_sent() -> None:
    params = NewSessionParams.parse({"cwd": "/p", "mcpServers": [{"name": "x"}], "additionalDirectories": ["/q"]})
    assert params == NewSessionParams("/p", ({"name": "x"},), ("/q",))
    with pytest.raises(AttributeError):
        params.cwd = "/elsewhere"  # type: ignore[misc]
    assert OpenSessionParams.parse({"sessionId": "s", "cwd": "/p"}) == OpenSessionParams("s", "/p")
    assert SessionParams.parse_notification({"sessionId": 1}) is None
    prompt = PromptParams.parse({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]})
    assert prompt.prompt == ({"type": "text", "text": "hi"},)
    option = SetConfigOptionParams.parse({"sessionId": "s", "configId": "mode", "value": "auto"})
    assert (option.config_id, option.value) == ("mode", "auto")


def test_no_module_of_the_session_reads_wire_params() -> None:
    """``session/`` takes the typed params; the readers of raw params (:mod:`refagent.acp.params`) are the
    server's and the protocol's."""
    readers = []
    for path in sorted((PACKAGE / "session").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (
                node.module == "refagent.acp.params"
                or (node.module == "refagent.acp" and any(alias.name == "params" for alias in node.names))
            ):
                readers.append(path.name)
    assert readers == []
