"""A prompt queued behind another waits for it, and is built only when its turn starts: a model switch
queued before it (``/model``, or ``session/set_config_option`` while a turn runs) holds for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ModelEvent, ModelRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import connect

pytestmark = pytest.mark.anyio


class GatedModel(ScriptedModel):
    """Answers "ok", but the first request waits for :attr:`gate` (a turn still running)."""

    def __init__(self) -> None:
        super().__init__(fallback=lambda request: text("ok"))
        self.gate = anyio.Event()
        self.started = anyio.Event()

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        first = not self.requests
        events = super().stream(request)
        return self._gated(events) if first else events

    async def _gated(self, events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
        self.started.set()
        await self.gate.wait()
        async for event in events:
            yield event


async def waiting(lock: anyio.Lock, count: int) -> None:
    """Until ``count`` prompts wait on the session's turn lock (a lock sets no event when one queues)."""
    while lock.statistics().tasks_waiting < count:
        await anyio.lowlevel.checkpoint()


def last_user_text(request: ModelRequest) -> str:
    return str(request.messages[-1]["content"])


@pytest.mark.parametrize("switch", ["command", "config-option"])
async def test_a_prompt_queued_behind_a_model_switch_runs_on_the_new_model(
    tmp_path: Path, switch: str, check: Any
) -> None:
    small, big = GatedModel(), ScriptedModel(fallback=lambda request: text("ok"))
    models = {"small": small, "big": big}
    profiles = [
        ModelProfile(id="small", name="Small", needs_key=False),
        ModelProfile(id="big", name="Big", needs_key=False),
    ]
    settings = Settings(profiles=profiles, make_model=lambda profile: models[profile.id], store=None)
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        lock = editor.agent.sessions[sid].turn_lock
        stops: list[str] = []

        async def prompt(words: str) -> None:
            stops.append((await editor.prompt(sid, words))["stopReason"])

        async with anyio.create_task_group() as group:
            group.start_soon(prompt, "first")
            await small.started.wait()  # the first turn runs, on the small model
            if switch == "command":
                group.start_soon(prompt, "/model big")
                await waiting(lock, 1)  # queued behind the first turn
            group.start_soon(prompt, "second")
            await waiting(lock, 2 if switch == "command" else 1)
            if switch == "config-option":
                await editor.request(
                    "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "big"}
                )
            small.gate.set()
    assert stops == (["end_turn"] * (3 if switch == "command" else 2))
    assert [last_user_text(r) for r in small.requests] == ["first"]
    assert [last_user_text(r) for r in big.requests] == ["second"]
