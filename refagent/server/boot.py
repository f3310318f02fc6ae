"""Start-up: from the editor's spawn to the event loop, in one place.

An editor waits on ``initialize`` before it shows anything, and importing anyio and asyncio and starting a
loop costs more than the answer. So :func:`serve_stdio` reads the first line with a blocking read, and
answers what it can before the loop exists (:func:`answer_early`): the requests whose route in
:data:`refagent.server.methods.REQUESTS` has an ``early`` answer (``initialize``, ``session/new``), the
line after an ``initialize`` waited for, any other only if it has already arrived. The first line it
cannot answer, or an input with nothing more in it yet after a session is opened, hands over to the loop:
the agent is made with what start-up did (:class:`~refagent.server.handshake.Started`) and reads on from
the same :class:`LineReader`, writing through the same :class:`FdWriter`. What answers a request is
decided by the input alone (which lines had arrived), never by a clock; both phases give the same answer,
and answers keep the requests' order.

The sandbox probe starts before the first line is read (:mod:`refagent.sandbox.confine.probe`): the first
session's modes describe what it finds. The garbage collector is off from here until the first session is
open (its response written and its after-work done), or :data:`START_SECONDS` have passed: start-up
allocates mostly what lives as long as the process (modules, classes, functions), and collecting it again
and again cost some 10 ms before that first response.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import TYPE_CHECKING

from refagent import logs
from refagent.acp import jsonrpc
from refagent.acp.errors import RequestError
from refagent.sandbox.confine import probe
from refagent.server.handshake import Started
from refagent.server.methods import REQUESTS
from refagent.server.stdio import FdWriter, LineReader, guard_stdio
from refagent.settings import Settings

if TYPE_CHECKING:
    import anyio.abc

    from refagent.server.agent import Agent

EARLY_ANSWERS = 8
"""The most requests start-up answers: their answers fit in a pipe however the client reads, so that a
client that writes a flood and reads nothing cannot block start-up's plain writes (the loop's writer can
be abandoned; these cannot). Editors send two, or four (Neovim's CodeCompanion doubles each)."""
START_SECONDS = 10.0
"""How long the garbage collector may stay off at start-up, if no session is opened."""
TERMINAL_HINT = (
    "refagent is serving the Agent Client Protocol on stdin/stdout, for an editor. "
    'To use it from this terminal: refagent chat, or refagent run "your task" (Ctrl-D leaves).\n'
)
"""What a person who runs ``refagent`` in a terminal reads (one line, on stderr); the agent then goes on."""


def serve_stdio(settings: Settings | None = None) -> int:
    """Serve ACP on this process's stdio until stdin closes or SIGTERM/SIGINT/SIGHUP arrives; the process
    then exits (this does not return to its caller)."""
    gc.disable()
    settings = settings or Settings()
    if os.isatty(0):  # a person typed `refagent` in a terminal: editors always start it with pipes
        sys.stderr.write(TERMINAL_HINT)
        sys.stderr.flush()
    fds = guard_stdio()
    probe.start()
    # Until the loop installs its own handlers: nothing has started that needs cleaning up.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _exit_now)
    reader, writer = LineReader(fds.read_fd), FdWriter(fds.write_fd)
    started = answer_early(reader, writer, settings)
    logs.ready()  # where logs go, before the loop's modules (which log) load
    # here: the loop's modules load after the early answers (anyio and asyncio: some 25 ms; the agent and
    # the session machinery: some 60 ms; logging: some 5 ms)
    import logging

    import anyio

    code = 0
    try:
        anyio.run(_serve, reader, writer, settings, started)
    except Exception:
        logging.getLogger("refagent").exception("the agent failed")
        code = 1
    logging.shutdown()
    # The stdin reader thread may still be blocked in read(2) (after a signal, stdin is still open);
    # everything that needed cleaning up has been by now, so leave without waiting for it.
    os._exit(code)


def answer_early(reader: LineReader, writer: FdWriter, settings: Settings) -> Started:
    """Answer, before the event loop, the requests read from ``reader`` that start-up can answer, until one
    it cannot (left in ``reader`` for the agent), the input has nothing more for now, or
    :data:`EARLY_ANSWERS` are written. What the agent takes over is returned.

    The first line is waited for, and so is the line after an ``initialize``: an editor always sends one
    (its ``session/new``, or another ``initialize``), and nothing the loop would do is needed before it.
    After any other answer only what has already arrived is read: a session opened needs the loop (its
    workspace, its announcements), and the requests sent with it are answered with it."""
    started = Started()
    answered = 0
    wait = True
    while answered < EARLY_ANSWERS and (line := reader.next_line(wait=wait)) is not None:
        if not line.strip():
            continue
        method = _answer(line, writer, settings, started)
        if method is None:
            reader.put_back(line)
            break
        answered += 1
        wait = method == "initialize"
    return started


def _answer(line: bytes, writer: FdWriter, settings: Settings, started: Started) -> str | None:
    """Answer ``line`` if it is a request start-up answers; the method it answered (None: not answered)."""
    message = jsonrpc.parse_line(line)
    if not isinstance(message, jsonrpc.Request):
        return None
    route = REQUESTS.get(message.method)
    if route is None or route.early is None:
        return None
    try:
        result = route.early(settings, started, message.params)
    except RequestError:  # the agent answers it, with the error
        return None
    except Exception:  # not expected: the agent answers it, and says what went wrong
        logs.logger("refagent").exception("%s could not be answered early", message.method)
        return None
    if result is None:
        return None
    writer.write_now(jsonrpc.encode(jsonrpc.result_response(message.id, result)))
    return message.method


async def _serve(reader: LineReader, writer: FdWriter, settings: Settings, started: Started) -> None:
    # here: as in serve_stdio (the agent is the loop's)
    import anyio

    from refagent.acp.connection import Connection
    from refagent.server.agent import Agent

    connection = Connection(reader.lines(), writer)
    async with Agent(connection, settings, started) as agent, anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        tg.start_soon(_collect_after_start, agent)
        await connection.serve(agent)
        tg.cancel_scope.cancel()


async def _collect_after_start(agent: Agent) -> None:
    """The garbage collector back on (:func:`serve_stdio` turned it off) once the first session is open."""
    import anyio  # here: as in serve_stdio (loaded by now: this runs on the loop)

    with anyio.move_on_after(START_SECONDS):
        await agent.first_session.wait()
    gc.enable()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    import anyio  # here: as in serve_stdio (loaded by now: this runs on the loop)

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            logs.logger("refagent").info("signal %s: shutting down", signum)
            scope.cancel()
            return


def _exit_now(signum: int, frame: object) -> None:
    os._exit(0)
