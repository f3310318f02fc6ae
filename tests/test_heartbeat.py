"""A block quiet for a while says so (refagent.heartbeat)."""

from __future__ import annotations

import anyio
import pytest

from refagent.heartbeat import heartbeat

pytestmark = pytest.mark.anyio


async def test_beats_after_the_quiet_and_again_until_touched() -> None:
    beats: list[float] = []

    async def beat(seconds: float) -> None:
        beats.append(seconds)

    async with heartbeat(beat, after=0.05, every=0.05) as heart:
        await anyio.sleep(0.18)  # beats at about 0.05, 0.10, 0.15
        assert len(beats) == 3
        assert beats == sorted(beats)
        heart.touch()
        assert heart.beats == 0
        await anyio.sleep(0.03)  # quiet again, but not yet for long enough
    assert len(beats) == 3


async def test_the_blocks_own_failure_comes_out_as_it_was_raised() -> None:
    async def beat(seconds: float) -> None:
        pass

    with pytest.raises(KeyError):
        async with heartbeat(beat, after=1, every=1):
            raise KeyError("the block's")


async def test_a_failing_beat_stops_the_beats_not_the_block() -> None:
    calls = 0

    async def beat(seconds: float) -> None:
        nonlocal calls
        calls += 1
        raise OSError("the editor is gone")

    async with heartbeat(beat, after=0.02, every=0.02):
        await anyio.sleep(0.1)
    assert calls == 1
