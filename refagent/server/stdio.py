"""The stdio transport: newline-delimited JSON-RPC on the process's stdin and stdout.

:func:`guard_stdio` runs first thing: it moves the protocol's two streams to private file descriptors
and points fds 0 and 1 at ``/dev/null`` and stderr. After that nothing else in the process, not a stray
``print()``, not a library, not a child process that inherits fds, can write to the protocol stream or
read from it.

Reading and writing use blocking ``os.read``/``os.write`` in worker threads: that works for pipes, files
and ttys alike, handles lines of any length, and never blocks the event loop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

from refagent.acp import LINE_TOO_LONG, MAX_LINE_BYTES

_CHUNK = 1 << 16


class ProtocolFds:
    """The protocol's two file descriptors. (A plain class: it is made on the way to the ``initialize``
    answer, and a frozen dataclass takes half a millisecond to create.)"""

    __slots__ = ("read_fd", "write_fd")

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd


def guard_stdio() -> ProtocolFds:
    """Take fds 0 and 1 for the protocol alone (see the module docstring)."""
    read_fd = os.dup(0)  # dup'ed fds are not inherited by children (PEP 446)
    write_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    sys.stdout = sys.stderr
    return ProtocolFds(read_fd, write_fd)


async def read_lines(fd: int, initial: bytes = b"") -> AsyncIterator[bytes]:
    """Yield the lines of ``fd`` without their line ending, until EOF (or a read error, treated as EOF).

    ``initial``: bytes already read from ``fd`` (by :func:`refagent.server.handshake.read_first_line`), which
    come first. A line longer than :data:`~refagent.acp.MAX_LINE_BYTES` is dropped as it is read
    and :data:`~refagent.acp.LINE_TOO_LONG` yielded in its place (the agent answers it with an
    error, and goes on)."""
    import anyio.to_thread  # here, not at the top: the first answer is written before anyio is loaded

    buffer = bytearray()
    discarding = False  # the line being read is longer than MAX_LINE_BYTES: its rest is dropped as it comes
    chunk = initial
    while True:
        if not chunk:
            try:
                chunk = await anyio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True)
            except OSError:
                chunk = b""
            if not chunk:
                if discarding:
                    yield LINE_TOO_LONG
                elif buffer.strip():
                    yield bytes(buffer)
                return
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:  # each byte is looked at once: linear in the input
            if discarding:
                yield LINE_TOO_LONG
                discarding = False
            elif buffer:
                buffer += chunk[start:end]
                yield bytes(buffer).rstrip(b"\r") if len(buffer) <= MAX_LINE_BYTES else LINE_TOO_LONG
                buffer.clear()
            else:
                yield chunk[start:end].rstrip(b"\r") if end - start <= MAX_LINE_BYTES else LINE_TOO_LONG
            start = end + 1
        if not discarding:
            buffer += chunk[start:]
            if len(buffer) > MAX_LINE_BYTES:
                buffer.clear()
                discarding = True
        chunk = b""


class FdWriter:
    """Writes all of each buffer to ``fd`` from a worker thread (a slow reader must not stall the loop).

    A cancelled write abandons its thread: at shutdown (EOF, SIGTERM) the process must not wait on a
    client that stopped reading and let the pipe fill up.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def __call__(self, data: bytes) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self._write_all, data, abandon_on_cancel=True)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
