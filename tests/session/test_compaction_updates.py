"""Compaction as ``compaction_update`` updates, through the in-memory editor with a store: ``/compact`` and
automatic compaction for a client that advertises ``clientCapabilities.session.compaction`` (``in_progress``,
the summary's chunks, then ``completed`` with the summary, ``failed`` with the error, or ``cancelled``),
recorded once in its final state and replayed at its place by ``session/load``; the same session loaded by a
client without the capability, which gets each compaction as an agent message; and a client without the
capability, for which ``/compact`` is the old messages.

A second ``connect`` on the same store is an agent restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.errors import ModelError
from refagent.llm.profiles import ModelProfile
from refagent.llm.scripted import Fail, Hang, Response, ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session.compaction import SUMMARY_PREFIX
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect

pytestmark = pytest.mark.anyio

COMPACTION: dict[str, Any] = {"session": {"compaction": {}}}
SUMMARY = "The user asked three questions; all were answered."
QUESTIONS = ("question one", "question two", "question three")
LIMIT = 5  # seconds: a safety net for waits, never a pause


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@asynccontextmanager
async def agent(
    sessions_dir: Path, model: ScriptedModel, check: Any, capabilities: dict[str, Any] | None, **extra: Any
) -> AsyncIterator[Editor]:
    settings = Settings(make_model=lambda profile: model, store=lambda: SessionStore(sessions_dir), **extra)
    async with connect(settings, check=check) as editor:
        await editor.initialize(capabilities)
        yield editor


def answers(*summary: Response) -> ScriptedModel:
    """Answers to the three questions, then the summariser's ``summary`` response(s), then ``ok``s."""
    return ScriptedModel(
        [text("answer one"), text("answer two"), text("answer three"), *summary],
        fallback=lambda request: text("ok"),
    )


async def three_turns_then(editor: Editor, project: Path, command: str) -> tuple[str, list[dict[str, Any]]]:
    """A session with three questions answered, then ``command``; its id and the updates ``command`` sent."""
    sid = await editor.new_session(str(project))
    for question in QUESTIONS:
        assert await editor.prompt(sid, question) == {"stopReason": "end_turn"}
    mark = len(editor.updates(sid))
    assert await editor.prompt(sid, command) == {"stopReason": "end_turn"}
    return sid, editor.updates(sid)[mark:]


def kinds(updates: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(u["sessionUpdate"], u.get("status")) for u in updates]


async def load(editor: Editor, sid: str, cwd: Path) -> list[dict[str, Any]]:
    """``session/load``: the updates it replayed before its response."""
    mark = len(editor.updates(sid))
    await editor.request("session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []})
    return editor.updates(sid)[mark:]


def thread(replayed: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The replayed messages as (kind, text); a compaction as (kind, status)."""
    return [
        (u["sessionUpdate"], u["status"] if u["sessionUpdate"] == "compaction_update" else u["content"]["text"])
        for u in replayed
    ]


EARLIER = [
    ("user_message_chunk", "question one"),
    ("agent_message_chunk", "answer one"),
    ("user_message_chunk", "question two"),
    ("agent_message_chunk", "answer two"),
    ("user_message_chunk", "question three"),
    ("agent_message_chunk", "answer three"),
]


# -- /compact, for a client that shows compactions ---------------------------------------------------


async def test_compact_is_shown_as_compaction_updates_and_replayed_once(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = answers(text(SUMMARY, chunk=9))
    async with agent(sessions_dir, model, check, COMPACTION) as editor:
        sid, shown = await three_turns_then(editor, project, "/compact")
        assert await editor.prompt(sid, "question four") == {"stopReason": "end_turn"}
    assert kinds(shown)[0] == ("compaction_update", "in_progress")
    assert {k for k, _ in kinds(shown)[1:-2]} == {"compaction_summary_chunk"}
    assert len(shown) > 4  # the summary streamed in pieces
    assert kinds(shown)[-2:] == [("compaction_update", "completed"), ("usage_update", None)]
    assert not any(u["sessionUpdate"] == "agent_message_chunk" for u in shown)  # no message besides
    compaction_id = shown[0]["compactionId"]
    assert {u["compactionId"] for u in shown[:-1]} == {compaction_id}
    chunks = "".join(u["content"]["text"] for u in shown if u["sessionUpdate"] == "compaction_summary_chunk")
    assert chunks == SUMMARY
    done = shown[-2]
    assert done["summary"] == [{"type": "text", "text": SUMMARY}]
    assert "error" not in done
    # the model goes on from the summary and the two recent turns
    messages = model.requests[-1].messages[1:]
    assert messages[0] == {"role": "user", "content": SUMMARY_PREFIX + SUMMARY}
    assert [m["content"] for m in messages[1:]] == [
        "question two",
        "answer two",
        "question three",
        "answer three",
        "question four",
    ]

    # recorded once, whole, in its final state: no in_progress, no chunks
    replay_file = (sessions_dir / f"{sid}.replay").read_bytes()
    assert replay_file.count(b'"sessionUpdate":"compaction_update"') == 1
    assert b"compaction_summary_chunk" not in replay_file

    async with agent(sessions_dir, answers(), check, COMPACTION) as editor:  # a restart
        replayed = await load(editor, sid, project)
    assert thread(replayed) == [
        *EARLIER,
        ("user_message_chunk", "/compact"),
        ("compaction_update", "completed"),
        ("user_message_chunk", "question four"),
        ("agent_message_chunk", "ok"),
    ]
    assert replayed[7] == done  # its id and its summary as they were shown

    async with agent(sessions_dir, answers(), check, {}) as editor:  # a client that shows no compactions
        replayed = await load(editor, sid, project)
        assert not any(u["sessionUpdate"].startswith("compaction") for u in editor.updates(sid))
    assert thread(replayed) == [
        *EARLIER,
        ("user_message_chunk", "/compact"),
        ("agent_message_chunk", f"Compacted the older conversation into a summary:\n\n{SUMMARY}\n"),
        ("user_message_chunk", "question four"),
        ("agent_message_chunk", "ok"),
    ]
    assert replayed[7]["messageId"] == compaction_id


async def test_a_failed_compaction_says_why_live_and_when_loaded(project: Path, sessions_dir: Path, check: Any) -> None:
    model = answers([Fail(ModelError("the summariser is down"))])
    async with agent(sessions_dir, model, check, COMPACTION) as editor:
        sid, shown = await three_turns_then(editor, project, "/compact")
        assert await editor.prompt(sid, "question four") == {"stopReason": "end_turn"}
    assert kinds(shown) == [("compaction_update", "in_progress"), ("compaction_update", "failed")]
    assert shown[1]["error"] == "The model could not summarise: the summariser is down"
    assert "summary" not in shown[1]
    users = [m["content"] for m in model.requests[-1].messages if m["role"] == "user"]
    assert users == [*QUESTIONS, "question four"]  # nothing was compacted

    async with agent(sessions_dir, answers(), check, COMPACTION) as editor:
        replayed = await load(editor, sid, project)
    assert replayed[7] == shown[1]
    async with agent(sessions_dir, answers(), check, {}) as editor:
        replayed = await load(editor, sid, project)
    assert thread(replayed)[7] == (
        "agent_message_chunk",
        "Compaction failed: The model could not summarise: the summariser is down\n",
    )


async def test_an_empty_summary_is_a_failed_compaction(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, answers([]), check, COMPACTION) as editor:
        _, shown = await three_turns_then(editor, project, "/compact")
    assert kinds(shown) == [("compaction_update", "in_progress"), ("compaction_update", "failed")]
    assert "empty summary" in shown[1]["error"]


async def test_a_cancelled_compaction_says_so_live_and_when_loaded(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = answers([Hang()])
    async with agent(sessions_dir, model, check, COMPACTION) as editor:
        sid = await editor.new_session(str(project))
        for question in QUESTIONS:
            await editor.prompt(sid, question)
        mark = len(editor.updates(sid))
        stops: list[dict[str, Any]] = []

        async def compact() -> None:
            stops.append(await editor.prompt(sid, "/compact"))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(compact)
                await editor.transcript.wait_for_update("compaction_update")
                await editor.cancel(sid)
        shown = editor.updates(sid)[mark:]
        assert await editor.prompt(sid, "question four") == {"stopReason": "end_turn"}
    assert stops == [{"stopReason": "cancelled"}]
    assert kinds(shown) == [("compaction_update", "in_progress"), ("compaction_update", "cancelled")]
    users = [m["content"] for m in model.requests[-1].messages if m["role"] == "user"]
    assert users == [*QUESTIONS, "question four"]

    async with agent(sessions_dir, answers(), check, COMPACTION) as editor:
        replayed = await load(editor, sid, project)
    assert replayed[7] == shown[1]
    async with agent(sessions_dir, answers(), check, {}) as editor:
        replayed = await load(editor, sid, project)
    assert thread(replayed)[7] == ("agent_message_chunk", "Compaction cancelled: nothing was changed.\n")


async def test_a_short_conversation_has_nothing_to_compact(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, answers(), check, COMPACTION) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "/compact") == {"stopReason": "end_turn"}
        assert "Nothing to compact yet" in editor.text(sid)
        assert not any(u["sessionUpdate"].startswith("compaction") for u in editor.updates(sid))


# -- automatic compaction -----------------------------------------------------------------------------


async def test_automatic_compaction_is_shown_as_updates_before_the_answer(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    big = "x" * 20_000  # about 5,000 tokens a prompt
    profile = ModelProfile(id="tiny", name="Tiny window", context_window=22_000, needs_key=False)
    model = ScriptedModel([text("one"), text("two"), text("three"), text("Four big prompts."), text("four")])
    extra: dict[str, Any] = {"profiles": [profile], "tools": lambda: []}
    async with agent(sessions_dir, model, check, COMPACTION, **extra) as editor:
        sid = await editor.new_session(str(project))
        for n in range(3):
            await editor.prompt(sid, f"prompt {n} {big}")
        assert not any(u["sessionUpdate"].startswith("compaction") for u in editor.updates(sid))
        mark = len(editor.updates(sid))
        assert await editor.prompt(sid, f"prompt 3 {big}") == {"stopReason": "end_turn"}
        shown = editor.updates(sid)[mark:]
    visible = [(k, s) for k, s in kinds(shown) if k not in ("usage_update", "compaction_summary_chunk")]
    assert visible == [
        ("compaction_update", "in_progress"),
        ("compaction_update", "completed"),
        ("agent_message_chunk", None),
    ]
    assert not any("context window" in u.get("content", {}).get("text", "") for u in shown)
    assert model.requests[-1].messages[1]["content"] == SUMMARY_PREFIX + "Four big prompts."

    async with agent(sessions_dir, ScriptedModel(), check, COMPACTION, **extra) as editor:
        replayed = await load(editor, sid, project)
    assert [(k, s) for k, s in kinds(replayed)][-3:] == [
        ("user_message_chunk", None),
        ("compaction_update", "completed"),
        ("agent_message_chunk", None),
    ]
    async with agent(sessions_dir, ScriptedModel(), check, {}, **extra) as editor:
        replayed = await load(editor, sid, project)
    assert replayed[-2]["content"]["text"] == "Compacted the older conversation into a summary:\n\nFour big prompts.\n"


# -- a client that does not show compactions ------------------------------------------------------------


async def test_without_the_capability_compact_is_the_old_messages(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    async with agent(sessions_dir, answers(text(SUMMARY)), check, {}) as editor:
        sid, shown = await three_turns_then(editor, project, "/compact")
    assert {k for k, _ in kinds(shown)} == {"agent_message_chunk", "usage_update"}
    said = "".join(u["content"]["text"] for u in shown if u["sessionUpdate"] == "agent_message_chunk")
    assert said.startswith("compacting 2 older messages into a summary:\n\n")
    assert SUMMARY in said
    assert "Compacted: about" in said
    assert b"compaction_update" not in (sessions_dir / f"{sid}.replay").read_bytes()

    for capabilities in (COMPACTION, {}):  # replayed as it was shown, to either client
        async with agent(sessions_dir, answers(), check, capabilities) as editor:
            replayed = await load(editor, sid, project)
        assert thread(replayed) == [*EARLIER, ("user_message_chunk", "/compact"), ("agent_message_chunk", said)]


async def test_a_compaction_capability_that_is_not_an_object_is_not_one(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    async with agent(sessions_dir, answers(text(SUMMARY)), check, {"session": {"compaction": True}}) as editor:
        _, shown = await three_turns_then(editor, project, "/compact")
    assert not any(u["sessionUpdate"].startswith("compaction") for u in shown)
    assert SUMMARY in "".join(u["content"].get("text", "") for u in shown if "content" in u)
