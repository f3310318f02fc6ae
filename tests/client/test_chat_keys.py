"""The keys typed during a turn (:mod:`refagent.client.chat_keys`): a lone Esc interrupts, the rest is a draft.

:class:`TurnKeys` reads a real pseudo-terminal here, as it reads the chat's."""

from __future__ import annotations

import os

import anyio
import pytest

from refagent.client.chat_input import quiet_tty
from refagent.client.chat_keys import TurnKeys

pytestmark = pytest.mark.anyio


def test_the_draft_takes_text_and_the_editing_keys_and_drops_key_sequences() -> None:
    keys = TurnKeys(-1, on_escape=_never)
    assert keys.feed("fix teh")
    assert keys.feed("\x7f\x7fhe")
    assert keys.draft == "fix the"
    assert not keys.feed("\x1b[A\x1bOB\x1b[1;5C")  # arrows, Ctrl-arrow: nothing typed
    keys.feed(" bug\x17")  # Ctrl-W: the last word
    assert keys.draft == "fix the "
    keys.feed("\x15é\t")  # Ctrl-U: all of it
    assert keys.take() == ("é\t", False)
    assert keys.draft == ""


def test_enter_alone_queues_the_draft_and_a_pasted_line_break_does_not() -> None:
    keys = TurnKeys(-1, on_escape=_never)
    assert not keys.feed("\r")  # nothing to queue
    keys.feed("one\ntwo")  # a paste
    keys.feed("\x1b\r")  # Alt-Enter
    assert (keys.draft, keys.queued) == ("one\ntwo\n", False)
    keys.feed("three")
    assert keys.feed("\r")
    assert (keys.draft, keys.queued) == ("one\ntwo\nthree", True)
    keys.feed("\x15")  # Ctrl-U: dropped, and no longer queued
    assert (keys.draft, keys.queued) == ("", False)


async def test_a_lone_esc_interrupts_and_a_paused_reader_leaves_the_terminal_alone() -> None:
    master, slave = os.openpty()
    escaped = anyio.Event()

    async def on_escape() -> None:
        escaped.set()

    keys = TurnKeys(slave, on_escape)
    try:
        with quiet_tty(slave), anyio.fail_after(5):  # as the chat's terminal is during a turn
            async with anyio.create_task_group() as tg:
                tg.start_soon(keys.run)
                os.write(master, b"hi\x1b[C")  # an arrow key is not Esc
                await anyio.sleep(0.2)
                assert not escaped.is_set()
                assert keys.draft == "hi"
                await keys.pause()  # a question reads the terminal now: not this reader
                os.write(master, b"y")
                await anyio.sleep(0.1)
                assert keys.draft == "hi"
                assert os.read(slave, 10) == b"y"  # left for the question
                keys.resume()
                os.write(master, b"\x1b")
                await escaped.wait()
                tg.cancel_scope.cancel()
    finally:
        os.close(master)
        os.close(slave)


async def _never() -> None:
    raise AssertionError("no Esc was typed")
