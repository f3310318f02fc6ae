"""The Compactor on its own: a compaction shown as ``compaction_update`` updates to a client that advertised
``session.compaction`` (and recorded whole, once, for a later load), as a message to one that did not."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from refagent.errors import ModelError
from refagent.llm.scripted import Fail, Hang, ScriptedModel, text
from refagent.persistence.conversation import Conversation
from refagent.persistence.recorder import replay
from refagent.session.compaction import (
    AFTER_FAILURE,
    RETRY_AFTER,
    SUMMARY_PREFIX,
    AutoCompaction,
    Compactor,
    estimate_tokens,
)
from refagent.session.speaker import speaker
from tests.support.acp_schema import validate_agent_message

pytestmark = pytest.mark.anyio

LONG = [
    message
    for turn in ("one", "two", "three", "four")
    for message in (
        {"role": "user", "content": f"question {turn}"},
        {"role": "assistant", "content": f"answer {turn}"},
    )
]


def compactor(*responses: Any, capable: bool) -> tuple[Compactor, list[dict[str, Any]], Conversation]:
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
        validate_agent_message(message, None)
        sent.append(update)

    history = Conversation(list(LONG))
    return Compactor(ScriptedModel(list(responses)), history, send, lambda: 1000, updates=capable), sent, history


async def test_a_compaction_is_shown_as_updates_to_a_client_that_takes_them() -> None:
    compact, sent, history = compactor(text("the gist", chunk=3), capable=True)
    await compact.compact("", speaker(compact.send_update), automatic=False)
    kinds = [(u["sessionUpdate"], u.get("status")) for u in sent]
    assert kinds[0] == ("compaction_update", "in_progress")
    assert {k for k, _ in kinds[1:-2]} == {"compaction_summary_chunk"}
    assert kinds[-2:] == [("compaction_update", "completed"), ("usage_update", None)]
    assert "".join(u["content"]["text"] for u in sent if u["sessionUpdate"] == "compaction_summary_chunk") == "the gist"
    done = sent[-2]
    assert done["compactionId"] == sent[0]["compactionId"]
    assert done["summary"] == [{"type": "text", "text": "the gist"}]
    assert history[0] == {"role": "user", "content": SUMMARY_PREFIX + "the gist"}
    assert not any(u["sessionUpdate"] == "agent_message_chunk" for u in sent)  # no message besides


async def test_a_failed_summary_is_a_failed_compaction_and_changes_nothing() -> None:
    compact, sent, history = compactor([Fail(ModelError("endpoint down"))], capable=True)
    await compact.compact("", speaker(compact.send_update), automatic=True)
    assert [u.get("status") for u in sent] == ["in_progress", "failed"]
    assert "endpoint down" in sent[-1]["error"]
    assert list(history) == LONG


async def test_an_empty_summary_is_a_failed_compaction() -> None:
    compact, sent, history = compactor(text(""), capable=True)
    await compact.compact("", speaker(compact.send_update), automatic=False)
    assert [u.get("status") for u in sent] == ["in_progress", "failed"]
    assert list(history) == LONG


async def test_a_cancelled_compaction_says_so_and_changes_nothing() -> None:
    compact, sent, history = compactor([Hang()], capable=True)
    with anyio.move_on_after(0.2):
        await compact.compact("", speaker(compact.send_update), automatic=False)
    assert [u.get("status") for u in sent] == ["in_progress", "cancelled"]
    assert list(history) == LONG


async def test_without_the_capability_it_is_a_message_as_before() -> None:
    compact, sent, _ = compactor(text("the gist"), capable=False)
    await compact.compact("", speaker(compact.send_update), automatic=False)
    assert {u["sessionUpdate"] for u in sent} == {"agent_message_chunk", "usage_update"}
    said = "".join(u["content"]["text"] for u in sent if u["sessionUpdate"] == "agent_message_chunk")
    assert "the gist" in said
    assert "Compacted: about" in said


@pytest.mark.parametrize("capable", [True, False], ids=["updates", "message"])
@pytest.mark.parametrize("failure", ["model-error", "empty-summary"])
async def test_a_failed_automatic_compaction_is_not_tried_before_every_request(capable: bool, failure: str) -> None:
    """Automatic compaction that changed nothing is said once, with when it is tried again; the next
    requests at about that size go without it (the model is not asked to summarise at every step); once
    the conversation has grown by RETRY_AFTER of the window it is tried again, and a success clears it."""
    failed: Any = [Fail(ModelError("endpoint down"))] if failure == "model-error" else text("")
    model = ScriptedModel([failed, text("the gist")])
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    history = Conversation(list(LONG))
    size = estimate_tokens(list(LONG))
    window = int(size / 0.85)  # LONG fills 85% of it: over the line (80%)
    auto = AutoCompaction()  # the session's, shared by each turn's compactor
    for _ in range(3):  # three requests, each with a compactor of its own as a turn's
        compact = Compactor(model, history, send, lambda: window, updates=capable, auto=auto)
        await compact.compact_if_full(list(history), [])
    assert len(model.requests) == 1  # asked once
    assert auto.failed_at == size
    said = [u.get("error") or u["content"]["text"] for u in sent if u.get("status") == "failed" or "content" in u]
    assert sum(AFTER_FAILURE in text for text in said) == 1  # told once, with when it is tried again
    assert list(history) == LONG
    grown = [*LONG, {"role": "user", "content": "x" * int(window * RETRY_AFTER * 4 + 8)}]
    history.replace(grown)
    compact = Compactor(model, history, send, lambda: window * 2, updates=capable, auto=auto)
    await compact.compact_if_full(list(history), [])
    assert len(model.requests) == 1  # grown, but no longer full of the larger window: not tried
    compact = Compactor(model, history, send, lambda: window, updates=capable, auto=auto)
    await compact.compact_if_full(list(history), [])
    assert len(model.requests) == 2  # grown past the failure and full: tried again, and it worked
    assert auto.failed_at is None
    assert history[0] == {"role": "user", "content": SUMMARY_PREFIX + "the gist"}


async def test_compact_asked_for_says_no_more_than_before() -> None:
    """/compact's failure reads as it did: the retry rule is the automatic compaction's."""
    compact, sent, _ = compactor([Fail(ModelError("endpoint down"))], capable=True)
    await compact.compact("", speaker(compact.send_update), automatic=False)
    assert sent[-1]["error"] == "The model could not summarise: endpoint down"


def test_a_compaction_replays_once_in_its_final_state() -> None:
    done = {"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "completed", "summary": []}
    shown = replay([{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}, done])
    assert shown[-1] == done
