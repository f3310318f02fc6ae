"""The stdio transport's pieces over real pipes: the one line reader (read before the event loop and on
it, from one buffer), the one writer, and the bound on a line's length."""

from __future__ import annotations

import os
import threading

import anyio
import pytest

from refagent.acp import LINE_TOO_LONG
from refagent.acp.jsonrpc import Invalid, parse_line
from refagent.server import stdio
from refagent.server.stdio import FdWriter, LineReader


def _write_all_and_close(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)


def _read_all_and_close(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def pipe_with(data: bytes, close: bool = True) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    if close:
        os.close(write_fd)
    return read_fd, write_fd


def test_next_line_takes_one_line_and_keeps_the_rest() -> None:
    read_fd, _ = pipe_with(b'{"a":1}\r\n{"b":2}\n{"c"')
    reader = LineReader(read_fd)
    assert reader.next_line(wait=True) == b'{"a":1}'
    assert reader.next_line(wait=False) == b'{"b":2}'  # read with the first
    assert reader.next_line(wait=True) == b'{"c"'  # EOF ends the last line
    assert reader.next_line(wait=True) is None
    assert reader.at_eof
    os.close(read_fd)


def test_without_waiting_only_what_has_arrived() -> None:
    read_fd, write_fd = pipe_with(b'{"a":1}\n{"b"', close=False)
    reader = LineReader(read_fd)
    assert reader.next_line(wait=False) == b'{"a":1}'
    assert reader.next_line(wait=False) is None  # half a line came: not a line yet
    os.write(write_fd, b":2}\n")
    assert reader.next_line(wait=False) == b'{"b":2}'
    assert reader.next_line(wait=False) is None
    assert not reader.at_eof
    os.close(write_fd)
    assert reader.next_line(wait=True) is None
    os.close(read_fd)


def test_a_long_first_line_arrives_whole() -> None:
    big = b'{"x":"' + b"y" * (3 << 20) + b'"}'
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=_write_all_and_close, args=(write_fd, big + b"\n"))
    writer.start()
    reader = LineReader(read_fd)
    assert reader.next_line(wait=True) == big
    writer.join()
    assert reader.next_line(wait=True) is None
    os.close(read_fd)


@pytest.mark.anyio
async def test_the_loop_reads_on_where_start_up_stopped() -> None:
    """What start-up read and did not take (a line put back, a line read with it, half a line) comes first
    on the loop, from the same buffer, then the rest of the input."""
    read_fd, write_fd = pipe_with(b"one\ntwo\nthr", close=False)
    reader = LineReader(read_fd)
    assert reader.next_line(wait=True) == b"one"
    assert reader.next_line(wait=False) == b"two"
    reader.put_back(b"two")
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, _write_all_and_close, write_fd, b"ee\nfour")
        lines = [line async for line in reader.lines()]
    os.close(read_fd)
    assert lines == [b"two", b"three", b"four"]


@pytest.mark.anyio
async def test_lines_splits_a_pipe_into_lines() -> None:
    long = b"y" * 300_000  # spans many reads, and the pipe's capacity
    data = b"first\r\n\n  \n" + long + b"\n" + b"a\nb\n" * 3 + b"last without a newline"
    read_fd, write_fd = os.pipe()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_all_and_close, write_fd, data)
            lines = [line async for line in LineReader(read_fd).lines()]
    finally:
        os.close(read_fd)
    assert lines == [b"first", b"", b"  ", long, *[b"a", b"b"] * 3, b"last without a newline"]


@pytest.mark.anyio
@pytest.mark.parametrize("early", [b"", b"x" * 5000], ids=["on-the-loop", "begun-at-start-up"])
async def test_a_line_past_the_bound_is_dropped_as_it_is_read(monkeypatch: pytest.MonkeyPatch, early: bytes) -> None:
    """A line longer than MAX_LINE_BYTES (made small here) is not kept: the reader gives LINE_TOO_LONG in
    its place, and the lines after it as they are (the agent answers an error and goes on). ``early``:
    what start-up read before the loop, past the bound already."""
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 4096)
    data = b"before\n" + b"z" * 300_000 + b"\nafter\n" + b"w" * 4096 + b"\n" + b"v" * 4097 + b"\nend\n" + b"u" * 5000
    read_fd, write_fd = os.pipe()
    reader = LineReader(read_fd)
    if early:
        os.write(write_fd, early)
        assert reader.next_line(wait=False) is None  # no line yet; its start is past the bound
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_all_and_close, write_fd, data)
            lines = [line async for line in reader.lines()]
    finally:
        os.close(read_fd)
    # With ``early``, it and "before" are one line, past the bound.
    assert lines == [
        LINE_TOO_LONG if early else b"before",
        LINE_TOO_LONG,
        b"after",
        b"w" * 4096,  # at the bound: kept
        LINE_TOO_LONG,
        b"end",
        LINE_TOO_LONG,  # the last line, without a newline, past the bound
    ]
    [invalid] = [parse_line(LINE_TOO_LONG)]
    assert isinstance(invalid, Invalid)
    assert invalid.error.code == -32600
    assert invalid.error.message == "Invalid Request: a message longer than 256 MiB"


@pytest.mark.anyio
async def test_fd_writer_writes_everything_to_a_slow_reader() -> None:
    data = bytes(range(256)) * 8192  # 2 MiB: many times the pipe's capacity
    read_fd, write_fd = os.pipe()
    received: list[bytes] = []

    async def read() -> None:
        received.append(await anyio.to_thread.run_sync(_read_all_and_close, read_fd))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        writer = FdWriter(write_fd)
        writer.write_now(data[:1000])  # as start-up writes, before the loop
        await writer(data[1000:])  # as the connection writes, on it
        os.close(write_fd)
    assert received == [data]
