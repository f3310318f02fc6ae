"""Background commands at the seam (:meth:`Terminals.start`, :class:`Job`), on both paths a command takes:
a local process and an editor's terminal. A job runs confined as a foreground command does, outlives the
call that started it, gives its output in pieces, and ends: by itself, out of time, stopped, or with the
task group that watches it. The editor's terminal is released in every case (the ``box`` fixture checks)."""

from __future__ import annotations

import anyio
import pytest

from refagent.sandbox.confine.process import KeptOutput
from refagent.sandbox.editor.terminals import _after
from tests.support.sandboxed import CONFINED, Sandboxed, box, outside

__all__ = ["box", "outside"]  # fixtures, found by name

pytestmark = CONFINED


async def test_a_job_gives_its_output_in_pieces_and_ends_by_itself(box: Sandboxed) -> None:
    ready = box.workspace / "go"
    script = f"echo one; while [ ! -e {ready} ]; do sleep 0.02; done; echo two; echo x > written; exit 4"
    async with anyio.create_task_group() as tasks:
        job = await box.terminals.start(script, str(box.workspace), tasks)
        with anyio.fail_after(10):
            while "one" not in (first := await job.new_output()):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert job.result is None
        ready.touch()
        result = await job.wait()
    assert result.exit_code == 4
    assert "two" in await job.new_output()
    assert await job.new_output() == ""
    assert "one" in first
    assert "two" not in first
    assert (box.workspace / "written").read_text() == "x\n"  # confined to the workspace, which it may write


async def test_a_job_is_confined_as_a_foreground_command_is(box: Sandboxed) -> None:
    async with anyio.create_task_group() as tasks:
        job = await box.terminals.start(f"echo x > {box.outside}/escaped", str(box.workspace), tasks)
        result = await job.wait()
    assert result.exit_code != 0
    assert not (box.outside / "escaped").exists()


async def test_stop_kills_the_job_and_what_it_started(box: Sandboxed) -> None:
    async with anyio.create_task_group() as tasks:
        job = await box.terminals.start("sleep 30 & sleep 30; echo never", str(box.workspace), tasks)
        with anyio.fail_after(10):
            await job.stop()
        assert job.result is not None
        assert "never" not in job.result.output
        assert job.result.exit_code != 0
        await job.stop()  # again: nothing to do


async def test_the_time_limit_kills_a_job(box: Sandboxed) -> None:
    async with anyio.create_task_group() as tasks:
        job = await box.terminals.start("sleep 30", str(box.workspace), tasks, time_limit=0.3)
        with anyio.fail_after(10):
            result = await job.wait()
    assert result.timed_out


async def test_cancelling_the_watching_tasks_kills_the_job(box: Sandboxed) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            job = await box.terminals.start("echo started; sleep 30", str(box.workspace), tasks)
            tasks.cancel_scope.cancel()
    assert job.result is not None
    assert job.result.exit_code != 0


def test_output_since_a_position_marks_what_was_not_kept() -> None:
    output = KeptOutput(100)  # keeps the first 50 bytes and the last 50
    output.feed(b"a" * 40)
    text, position = output.since(0, final=False)
    assert (text, position) == ("a" * 40, 40)
    output.feed(b"b" * 200 + b"c" * 10)
    text, position = output.since(position, final=False)
    assert text == "b" * 10 + "\n[... 150 bytes not kept ...]\n" + "b" * 40 + "c" * 10
    assert position == 250
    assert output.since(position, final=False) == ("", 250)


def test_output_since_holds_back_a_character_cut_in_two() -> None:
    output = KeptOutput(1000)
    euro = "€".encode()
    output.feed(b"price: " + euro[:2])
    text, position = output.since(0, final=False)
    assert (text, position) == ("price: ", 7)
    output.feed(euro[2:] + b"!")
    assert output.since(position, final=False) == ("€!", 11)


@pytest.mark.parametrize(
    ("seen", "now", "new"),
    [
        ("", "abc", "abc"),
        ("abc", "abcdef", "def"),
        ("".join(map(str, range(200))), "".join(map(str, range(100, 200))) + "more", "more"),  # start dropped
        ("gone", "all new", "[... earlier output not kept by the editor ...]\nall new"),
    ],
)
def test_what_an_editor_terminal_has_beyond_what_was_read(seen: str, now: str, new: str) -> None:
    assert _after(seen, now) == new
