"""What the editor answers to ``session/request_permission`` is untrusted too: only an explicit
``cancelled`` cancels the turn, only a known option allows, and anything else refuses the one call.

The answer is read by the agent-side client (:meth:`refagent.acp.client.SessionClient.request_permission`)
and judged by :meth:`refagent.tools.permissions.Permissions.ask`: both run here, over a peer that answers
as the editor would."""

from __future__ import annotations

from typing import Any

import pytest

from refagent.acp.errors import RequestError
from refagent.tools.base import Plan, ToolResult
from refagent.tools.permissions import AskPermission, Permissions
from tests.support.clients import session_client
from tests.support.tool_fakes import DirectPeer

pytestmark = pytest.mark.anyio


async def _nothing() -> ToolResult:
    return ToolResult("")


PLAN = Plan(title="Write a", execute=_nothing, mutating=True, permission_key="edit", permission_label="edits")


def answering(result: Any) -> AskPermission:
    """The client's ``request_permission`` over an editor that answers ``result``."""

    async def editor(method: str, params: dict[str, Any]) -> Any:
        assert method == "session/request_permission"
        return result

    return session_client(DirectPeer(editor)).request_permission


@pytest.mark.parametrize(
    "result",
    [
        None,
        {},
        [],
        "allow",
        {"outcome": "allow"},
        {"outcome": {"outcome": "selected"}},
        {"outcome": {"outcome": "selected", "optionId": ["allow"]}},
        {"outcome": {"outcome": "selected", "optionId": "yes" * 1000}},
        {"outcome": {"outcome": "maybe", "optionId": "allow"}},
    ],
)
async def test_a_malformed_answer_refuses_the_call_and_the_turn_goes_on(result: Any) -> None:
    permissions = Permissions()
    verdict = await permissions.ask(answering(result), {}, PLAN)
    assert not verdict.allowed
    assert not verdict.cancelled
    assert len(verdict.reason) < 300
    assert permissions.allowed == permissions.rejected == set()


async def test_only_an_explicit_cancel_cancels() -> None:
    verdict = await Permissions().ask(answering({"outcome": {"outcome": "cancelled"}}), {}, PLAN)
    assert verdict.cancelled


async def test_an_error_answer_refuses_the_call() -> None:
    async def failing(method: str, params: dict[str, Any]) -> Any:
        raise RequestError("the editor broke", code=-32603)

    verdict = await Permissions().ask(session_client(DirectPeer(failing)).request_permission, {}, PLAN)
    assert not verdict.allowed
    assert not verdict.cancelled
    assert "the editor broke" in verdict.reason


async def test_known_options_still_work() -> None:
    permissions = Permissions()
    allowed = await permissions.ask(
        answering({"outcome": {"outcome": "selected", "optionId": "allow-always"}}), {}, PLAN
    )
    assert allowed.allowed
    assert permissions.allowed == {"edit"}
