"""What the v2 tests share: a v2 ``initialize``, the updates a fake editor received for a session, and
waiting for a session's state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from refagent.testing.memory import Editor

V2_INIT = {
    "protocolVersion": 2,
    "info": {"name": "v2-editor", "version": "0"},
    "capabilities": {"auth": {"terminal": {}}},
}


def updates(editor: Editor, session_id: str) -> list[dict[str, Any]]:
    """The session's updates the editor received, in order."""
    return [
        n["params"]["update"]
        for n in editor.client.notifications
        if n["method"] == "session/update" and n["params"]["sessionId"] == session_id
    ]


async def until(predicate: Callable[[], bool], seconds: float = 10) -> None:
    """Poll ``predicate`` (notifications arrive on the editor's own task; processes give no event)."""
    with anyio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def idle(editor: Editor, session_id: str, count: int = 1) -> dict[str, Any]:
    """Wait for the session's ``count``-th ``idle`` state update that ends foreground work (it carries a
    stop reason); return it."""

    def ended() -> list[dict[str, Any]]:
        return [
            u
            for u in updates(editor, session_id)
            if u.get("sessionUpdate") == "state_update" and u["state"] == "idle" and "stopReason" in u
        ]

    await until(lambda: len(ended()) >= count)
    return ended()[count - 1]
