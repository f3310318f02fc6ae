"""A session's plans alone (:class:`refagent.tools.plans.Plans`): the ids a model may give, the bound on plans
at once, what a removal of a plan never shown says, and what a board restored from disk keeps."""

from __future__ import annotations

from typing import Any

import pytest

from refagent.errors import ToolError
from refagent.persistence.records import replay_line
from refagent.persistence.replays import plans_for
from refagent.tools.plans import MAX_PLANS, Plans, valid_plan_id

pytestmark = pytest.mark.anyio

STEP = [{"content": "Do it", "status": "pending", "priority": "high"}]
DONE = [{"content": "Do it", "status": "completed", "priority": "high"}]


def board(by_id: bool) -> tuple[Plans, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(update: dict[str, Any]) -> None:
        sent.append(update)

    return Plans(send, by_id=by_id), sent


def test_a_plan_id_is_a_short_plain_name() -> None:
    assert valid_plan_id("docs-2.x_final") == "docs-2.x_final"
    for bad in ("", "-leading", "has space", "a" * 65, "x\x1b[2J", 7, None):
        with pytest.raises(ToolError, match="plan_id"):
            valid_plan_id(bad)


async def test_one_plan_too_many_is_refused_and_a_removal_makes_room() -> None:
    plans, _ = board(by_id=True)
    for n in range(MAX_PLANS):
        plans.check(f"p{n}", STEP)
        await plans.show(f"p{n}", STEP)
    plans.check("p0", DONE)  # an update of one of them is fine
    with pytest.raises(ToolError, match=f"At most {MAX_PLANS} plans"):
        plans.check("one-more", STEP)
    await plans.show("p0", [])
    plans.check("one-more", STEP)


async def test_removing_a_plan_never_shown_says_nothing_by_id_and_the_rest_whole() -> None:
    plans, sent = board(by_id=True)
    await plans.show("ghost", [])
    assert sent == []
    whole, sent_whole = board(by_id=False)
    await whole.show("other", STEP)
    await whole.show("ghost", [])
    assert sent_whole == [{"sessionUpdate": "plan", "entries": STEP}] * 2


async def test_a_restored_board_skips_what_it_would_not_send() -> None:
    plans, sent = board(by_id=True)
    plans.restore(
        [
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "ok", "entries": DONE}},
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "bad id", "entries": STEP}},
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "odd", "entries": [{"x": 1}]}},
            {"sessionUpdate": "plan_update", "plan": "not a plan"},
            {"sessionUpdate": "plan_removed", "planId": "never-there"},
        ]
    )
    assert plans.plans == {"ok": DONE}
    await plans.retire_done()
    assert sent == [{"sessionUpdate": "plan_removed", "planId": "ok"}]


def test_a_plan_a_v1_plan_cannot_show_leaves_the_whole_list() -> None:
    lines = [
        replay_line("s", {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "a", "entries": STEP}}),
        replay_line("s", {"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "a", "content": "x"}}),
    ]
    shown = plans_for(b"".join(lines), by_id=False)
    assert shown.splitlines() == [
        replay_line("s", {"sessionUpdate": "plan", "entries": STEP}).rstrip(b"\n"),
        replay_line("s", {"sessionUpdate": "plan", "entries": []}).rstrip(b"\n"),
    ]
