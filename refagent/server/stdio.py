"""The stdio transport: newline-delimited JSON-RPC on the process's stdin and stdout.

:func:`guard_stdio` runs first thing: it moves the protocol's two streams to private file descriptors
and points fds 0 and 1 at ``/dev/null`` and stderr. After that nothing else in the process, not a stray
``print()``, not a library, not a child process that inherits fds, can write to the protocol stream or
read from it.

One :class:`LineReader` and one :class:`FdWriter` serve the whole life of the process: start-up reads
and writes through them before the event loop exists (:mod:`refagent.server.boot`), and the connection
goes on with the same two objects on the loop. Both use blocking ``os.read``/``os.write`` (in worker
threads once the loop runs): that works for pipes, files and ttys alike, handles lines of any length, and
never blocks the event loop.
"""

from __future__ import annotations

import os
import select
import sys
from collections import deque
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


class LineReader:
    """The lines of ``fd``, without their line ending, until EOF (a read error counts as EOF): read one by
    one before the event loop (:meth:`next_line`), then on it (:meth:`lines`), from one buffer.

    A line longer than :data:`~refagent.acp.MAX_LINE_BYTES` is dropped as it is read and
    :data:`~refagent.acp.LINE_TOO_LONG` comes in its place (the agent answers it with an error, and goes
    on). Each byte is looked at once: reading is linear in the input, however it is split.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._ready: deque[bytes] = deque()
        """Complete lines read and not yet taken."""
        self._partial = bytearray()
        self._discarding = False
        """The line being read is longer than MAX_LINE_BYTES: its rest is dropped as it comes."""
        self.at_eof = False

    def next_line(self, *, wait: bool) -> bytes | None:
        """The next line: one read already, else one read from ``fd`` now, blocking for it if ``wait``
        (else only what has arrived). None at EOF, or when ``wait`` is False and no whole line has come."""
        while not self._ready and not self.at_eof:
            if not wait and not select.select([self.fd], [], [], 0)[0]:
                return None
            self._take(self._read())
        return self._ready.popleft() if self._ready else None

    def put_back(self, line: bytes) -> None:
        """Make ``line`` (taken with :meth:`next_line`) the next line again: start-up leaves it to the loop."""
        self._ready.appendleft(line)

    async def lines(self) -> AsyncIterator[bytes]:
        """Every line not taken yet, until EOF, reading on the event loop from a worker thread."""
        import anyio.to_thread  # here: start-up reads with next_line and answers before anyio loads (some 25 ms)

        while True:
            while self._ready:
                yield self._ready.popleft()
            if self.at_eof:
                return
            self._take(await anyio.to_thread.run_sync(self._read, abandon_on_cancel=True))

    def _read(self) -> bytes:
        while True:
            try:
                return os.read(self.fd, _CHUNK)
            except InterruptedError:
                continue
            except OSError:
                return b""

    def _take(self, chunk: bytes) -> None:
        """Split ``chunk`` (b"": EOF) into the lines it ends, keeping the start of the next."""
        if not chunk:
            self.at_eof = True
            if self._discarding:
                self._ready.append(LINE_TOO_LONG)
            elif self._partial.strip():
                self._ready.append(bytes(self._partial).rstrip(b"\r"))
            self._partial.clear()
            return
        start = 0
        partial = self._partial
        while (end := chunk.find(b"\n", start)) != -1:
            if self._discarding:
                self._ready.append(LINE_TOO_LONG)
                self._discarding = False
            elif partial:
                partial += chunk[start:end]
                self._ready.append(bytes(partial).rstrip(b"\r") if len(partial) <= MAX_LINE_BYTES else LINE_TOO_LONG)
                partial.clear()
            else:
                self._ready.append(chunk[start:end].rstrip(b"\r") if end - start <= MAX_LINE_BYTES else LINE_TOO_LONG)
            start = end + 1
        if not self._discarding:
            partial += chunk[start:]
            if len(partial) > MAX_LINE_BYTES:
                partial.clear()
                self._discarding = True


class FdWriter:
    """Writes all of each buffer to ``fd``: at once before the event loop (:meth:`write_now`), from a
    worker thread on it (calling it: a slow reader must not stall the loop).

    A cancelled write abandons its thread: at shutdown (EOF, SIGTERM) the process must not wait on a
    client that stopped reading and let the pipe fill up.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def __call__(self, data: bytes) -> None:
        import anyio.to_thread  # here: as in LineReader.lines

        await anyio.to_thread.run_sync(self.write_now, data, abandon_on_cancel=True)

    def write_now(self, data: bytes) -> None:
        """Write all of ``data``, blocking until it is."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
