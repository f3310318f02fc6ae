"""A turn the model failed: ``end_turn``, a message chunk and a response that both carry the failure in
``_meta.refagent.failure`` (kind ``model``, ``auth`` or ``config``), logged at info only; retry notes in plain
text. Through :func:`run_prompt` alone, and through the in-memory editor (every message schema-checked),
including the replay of a saved session and the agent's start on a broken configuration."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from refagent.cli import build_parser, load_settings
from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.protocol import Retrying
from refagent.llm.scripted import Fail, ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session.failure import failure_meta
from refagent.session.turn import Turn, run_prompt
from refagent.settings import Settings
from refagent.testing.memory import connect

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_model_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_settings`` reads the environment: none of the runner's model settings leak in."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REFAGENT_MODEL", "REFAGENT_PROFILE", "REFAGENT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("REFAGENT_MAX_REQUESTS", raising=False)


async def fail_with(error: Exception) -> tuple[str, list[dict[str, Any]], Turn]:
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    turn = Turn(model=ScriptedModel([[Fail(error)]]), history=[], send_update=send)
    stop = await run_prompt(turn, {"role": "user", "content": "go"})
    return stop, sent, turn


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ModelError("Cannot connect to http://127.0.0.1:9/v1: connection refused."), "model"),
        (ModelAuthError("http://x/v1/chat/completions rejected the key from OPENAI_API_KEY (401: no)."), "auth"),
        (ModelConfigError("The model profile 'p' names no model, and http://x/v1/models lists none."), "config"),
    ],
)
async def test_a_failed_turn_ends_end_turn_with_the_failure_marked(
    error: Exception, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="refagent")
    stop, sent, turn = await fail_with(error)
    assert stop == "end_turn"
    [chunk] = sent
    assert chunk["sessionUpdate"] == "agent_message_chunk"
    assert chunk["content"] == {"type": "text", "text": str(error)}  # the message itself, no prefix
    assert chunk["_meta"] == {"refagent": {"failure": {"kind": kind, "message": str(error)}}}
    assert turn.failure is not None
    assert turn.failure.meta() == failure_meta(kind, str(error))  # type: ignore[arg-type]
    # Told once: in the session. The agent's stderr is refagent run's too, so no warning there.
    assert [r.levelno for r in caplog.records if r.name.startswith("refagent")] == [logging.INFO]


async def test_a_refusal_is_no_failure() -> None:
    from refagent.errors import ModelRefused

    stop, sent, turn = await fail_with(ModelRefused("policy"))
    assert stop == "refusal"
    assert "_meta" not in sent[0]
    assert turn.failure is None


async def test_retry_notes_are_plain_text() -> None:
    retry = Retrying(attempt=2, delay=1.25, reason="http://x/v1/chat/completions answered 503: busy", max_attempts=4)
    for notices in (False, True):
        sent: list[dict[str, Any]] = []

        async def send(update: dict[str, Any], into: list[dict[str, Any]] = sent) -> None:
            into.append(update)

        turn = Turn(model=ScriptedModel([[retry, *text("ok")]]), history=[], send_update=send, notices=notices)
        assert await run_prompt(turn, {"role": "user", "content": "go"}) == "end_turn"
        note = "http://x/v1/chat/completions answered 503: busy; retrying in 1.2 s (attempt 2 of 4)."
        if notices:
            [notice] = [u for u in sent if u["sessionUpdate"] == "notice"]
            assert notice["description"] == note
        else:
            [thought] = [u for u in sent if u["sessionUpdate"] == "agent_thought_chunk"]
            assert thought["content"]["text"] == note + "\n"  # no _italics_: terminals show underscores


# -- through the agent ------------------------------------------------------------------------------


def failing(error: Exception, sessions: Path | None = None) -> Settings:
    model = ScriptedModel(fallback=lambda request: [Fail(error)])
    return Settings(
        make_model=lambda profile: model, store=(lambda: SessionStore(sessions)) if sessions is not None else None
    )


async def test_the_response_and_the_chunk_carry_the_failure_and_a_load_shows_it_again(
    tmp_path: Path, check: Any
) -> None:
    message = "http://x/v1/chat/completions rejected the key from OPENAI_API_KEY (401: Incorrect API key provided.)."
    sessions = tmp_path / "sessions"
    project = tmp_path / "project"
    project.mkdir()
    async with connect(failing(ModelAuthError(message), sessions), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        response = await editor.prompt(sid, "hi")
        [chunk] = [u for u in editor.updates(sid) if u["sessionUpdate"] == "agent_message_chunk"]
    meta = {"refagent": {"failure": {"kind": "auth", "message": message}}}
    assert response == {"stopReason": "end_turn", "_meta": meta}
    assert chunk["_meta"] == meta
    assert chunk["content"]["text"] == message
    async with connect(failing(ModelAuthError(message), sessions), check=check) as editor:
        await editor.initialize()
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        replayed = [u for u in editor.updates(sid) if u["sessionUpdate"] == "agent_message_chunk"]
    assert [u["_meta"] for u in replayed] == [meta]  # recorded with its mark: a client loading it knows


async def test_a_turn_that_ends_well_has_no_meta(tmp_path: Path, check: Any) -> None:
    model = ScriptedModel(fallback=lambda request: text("fine"))
    async with connect(Settings(make_model=lambda profile: model, store=None), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "hi") == {"stopReason": "end_turn"}
        assert all("_meta" not in u for u in editor.updates(sid))


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--profile", "nope"], {}, "unknown model profile 'nope'"),
        (["--max-requests", "0"], {}, "max_requests must be at least 1, not 0"),
        ([], {"REFAGENT_MAX_REQUESTS": "0"}, "max_requests must be at least 1, not 0"),
    ],
)
async def test_a_configuration_that_cannot_work_fails_each_turn_as_config(
    tmp_path: Path,
    check: Any,
    args: list[str],
    env: dict[str, str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.INFO, logger="refagent")
    settings = load_settings(build_parser().parse_args(args))
    settings.store = None
    assert settings.broken is not None
    assert said in settings.broken
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        response = await editor.prompt(sid, "hi")
        answer = editor.text(sid)
    assert response["stopReason"] == "end_turn"
    failure = response["_meta"]["refagent"]["failure"]
    assert failure == {"kind": "config", "message": answer}
    assert answer.startswith("The configuration is broken: ")
    assert said in answer
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # told in the session, not logged
