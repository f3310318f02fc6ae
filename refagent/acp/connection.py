"""One JSON-RPC connection, both directions at once.

ACP is symmetric: while the client's ``session/prompt`` is pending, the agent sends its own requests
(``session/request_permission``, ``fs/*``, ``terminal/*``) and waits for their answers on the same input.
So the read loop never waits on a handler: every incoming request runs in its own task, and responses to
our requests are matched to their waiters by id as they arrive.

Ordering: everything sent goes through one ordered outbox drained by a single writer task, so a handler
that sends notifications and then returns has its notifications written before its response (ACP: all
updates of a turn precede the ``session/prompt`` response). A handler that must send something *after* its
response (updates about a new session) returns :class:`Reply` with an ``after`` callback: it runs once the
writer has written the response (so its work, however heavy, cannot delay those bytes), and whatever it
sends is written after the response. It does not run if the response is never written (the client went
away, or the input ended first). Other requests are served meanwhile, and what they send may come between
the response and what ``after`` sends: a handler that must not overtake ``after`` waits for it itself.

Batches (ACP v2, once negotiated: :attr:`Connection.batches`): a line that is an array of messages runs
them side by side, and their answers go out together as one array once all are ready (nothing for a batch
of notifications); an empty array is one invalid request. ACP v1 has no batches: there, an array is an
invalid request.

The connection knows nothing of stdio or of ACP's methods: it reads lines from any async iterable of bytes
and writes bytes through any async ``write`` callable (see :mod:`refagent.server.stdio` and
:mod:`refagent.testing.memory`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from refagent.acp import jsonrpc
from refagent.acp.errors import (
    ConnectionClosed,
    InternalError,
    MethodNotFound,
    RequestCancelled,
    RequestError,
)

log = logging.getLogger(__name__)

CANCEL_REQUEST = "$/cancel_request"
_WITHDRAWN = 256
"""How many withdrawn request ids the connection remembers, for the late answers it expects."""
_BATCH_BYTES = 1 << 20  # the writer joins queued messages up to this size into one write
_FLUSH_SECONDS = 0.25  # at EOF, how long what was already queued may take to be written


class Handler(Protocol):
    """What a connection dispatches to. Raise :class:`RequestError` to answer with an error."""

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any: ...

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None: ...


class Peer(Protocol):
    """The other side of a connection as a handler sees it (a :class:`Connection` is one): what it may
    send while it serves. The one definition: the agent, its sessions and the editor-backed tools use it."""

    async def request(self, method: str, params: dict[str, Any]) -> Any: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def send_lines(self, data: bytes) -> None: ...


class Reply:
    """A result plus work to do once its response has been written (what ``after`` sends follows it).
    (A plain class, as the connection's others: a frozen dataclass takes half a millisecond to create, on
    the way to the first ``session/new`` response.)"""

    __slots__ = ("after", "result")

    def __init__(self, result: Any, after: Callable[[], Awaitable[None]]) -> None:
        self.result = result
        self.after = after


class _Outgoing:
    """Bytes in the outbox, and the event the writer sets once they are written (None: nobody waits)."""

    __slots__ = ("data", "written")

    def __init__(self, data: bytes, written: anyio.Event | None = None) -> None:
        self.data = data
        self.written = written


class _Pending:
    """A request we sent, waiting for its response."""

    __slots__ = ("error", "event", "result")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.result: Any = None
        self.error: RequestError | None = None


class Connection:
    """Run with :meth:`serve`; send with :meth:`request` and :meth:`notify` from any task meanwhile."""

    def __init__(
        self,
        lines: AsyncIterable[bytes],
        write: Callable[[bytes], Awaitable[None]],
        *,
        outbox_size: int = 1024,
    ) -> None:
        self._lines = lines
        self._write = write
        send, receive = anyio.create_memory_object_stream[_Outgoing](outbox_size)
        self._outbox: MemoryObjectSendStream[_Outgoing] = send
        self._outbox_receive: MemoryObjectReceiveStream[_Outgoing] = receive
        self._next_id = 0
        self._pending: dict[jsonrpc.RequestId, _Pending] = {}
        self._withdrawn: dict[jsonrpc.RequestId, None] = {}
        """Our requests withdrawn with ``$/cancel_request`` (the latest :data:`_WITHDRAWN`): the peer still
        answers them, as ACP requires, and that answer is expected, not news."""
        self._running: dict[jsonrpc.RequestId, anyio.CancelScope] = {}
        self.batches = False
        """Whether a line that is an array is a batch (ACP v2, once negotiated); else it is an invalid
        request, as ACP v1 has no batches."""
        self._closed = False
        self._written = anyio.Event()  # the writer has drained and closed the outbox

    # -- sending ------------------------------------------------------------------------------

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification. Silently dropped once the connection is closed."""
        await self._send(jsonrpc.notification(method, params))

    async def send_lines(self, data: bytes) -> None:
        """Send messages already encoded, as they are: ``data`` is whole lines, each one message as
        :func:`jsonrpc.encode` writes it (the caller guarantees it: a replay file the agent wrote itself).
        Raises ValueError, unsent, if ``data`` is not ASCII or does not end a line."""
        if data and (not data.endswith(b"\n") or not data.isascii() or b"\r" in data):
            raise ValueError("not whole lines of encoded messages")
        if data:
            await self._send_encoded(data)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and wait for its result.

        Raises the peer's error as :class:`RequestError`, or :class:`ConnectionClosed` if the peer goes
        away first. If the caller is cancelled while waiting, the peer is told with ``$/cancel_request``.
        """
        if self._closed:
            raise ConnectionClosed(f"cannot send {method}: the client has disconnected")
        msg_id = self._next_id
        self._next_id += 1
        pending = self._pending[msg_id] = _Pending()
        try:
            await self._send(jsonrpc.request(msg_id, method, params))
            await pending.event.wait()
        except anyio.get_cancelled_exc_class():
            if not pending.event.is_set() and not self._closed:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await self.notify(CANCEL_REQUEST, {"requestId": msg_id})
                self._withdrawn[msg_id] = None
                if len(self._withdrawn) > _WITHDRAWN:
                    del self._withdrawn[next(iter(self._withdrawn))]
            raise
        finally:
            self._pending.pop(msg_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def flush(self) -> None:
        """Wait until everything sent before this call has been written (or the client found gone); at
        once if the connection is closed."""
        written = anyio.Event()
        if await self._send_encoded(b"", written):
            await written.wait()

    async def _send(self, message: dict[str, Any]) -> None:
        await self._send_encoded(jsonrpc.encode(message))

    async def _send_encoded(self, data: bytes, written: anyio.Event | None = None) -> bool:
        """Queue ``data``; whether it was (not once the connection is closed). ``written`` is set when the
        writer has written it, or found the client gone."""
        if self._closed:
            return False
        try:
            await self._outbox.send(_Outgoing(data, written))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    # -- running ------------------------------------------------------------------------------

    async def serve(self, handler: Handler) -> None:
        """Read and dispatch to ``handler`` until the input ends; then cancel what still runs and return.

        EOF is shutdown (ACP stdio transport): running handlers are cancelled, and their cleanup (killing
        processes, releasing terminals) runs in their ``finally`` blocks before this returns. Messages
        queued before EOF (answers that were ready) are still written, for up to a quarter second; nothing
        is sent after EOF. Cancelling ``serve`` itself stops at once, without that flush.
        """
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_loop)
            try:
                async with anyio.create_task_group() as handlers:
                    async for line in self._lines:
                        if line.strip():
                            await self._dispatch(handler, line, handlers)
                    self._close()
                    handlers.cancel_scope.cancel()
                self._outbox.close()
                with anyio.move_on_after(_FLUSH_SECONDS):
                    await self._written.wait()
            finally:
                self._close()
                tg.cancel_scope.cancel()

    def _close(self) -> None:
        self._closed = True
        for pending in self._pending.values():
            pending.error = ConnectionClosed("the client disconnected before answering")
            pending.event.set()

    async def _write_loop(self) -> None:
        try:
            await self._drain_outbox()
        finally:
            self._written.set()

    async def _drain_outbox(self) -> None:
        async with self._outbox_receive:
            async for first in self._outbox_receive:
                batch = [first]
                size = len(first.data)
                while size < _BATCH_BYTES:
                    try:
                        item = self._outbox_receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):  # EndOfStream: closed at EOF, now empty
                        break
                    batch.append(item)
                    size += len(item.data)
                data = b"".join(item.data for item in batch)
                try:
                    if data:  # a flush marker alone has nothing to write
                        await self._write(data)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    # The peer is gone; reading will hit EOF too. Keep draining so senders never block.
                    log.warning("cannot write to the client: %s", exc)
                    self._closed = True
                for item in batch:
                    if item.written is not None:
                        item.written.set()

    async def _dispatch(self, handler: Handler, line: bytes, tg: TaskGroup) -> None:
        if self.batches and line.lstrip()[:1] == b"[":
            batch = jsonrpc.parse_batch(line)
            if isinstance(batch, list):
                tg.start_soon(self._run_batch, handler, batch)
                return
            message: jsonrpc.Message = batch
        else:
            message = jsonrpc.parse_line(line)
        if isinstance(message, jsonrpc.Request):
            tg.start_soon(self._run_request, handler, message, self._scope_of(message))
        elif isinstance(message, jsonrpc.Notification):
            self._notified(handler, message, tg)
        elif isinstance(message, jsonrpc.Response):
            self._answered(message)
        else:
            log.warning("invalid message: %s", message.error.message)
            if message.answer:
                await self._send(jsonrpc.error_response(message.id, message.error))

    def _scope_of(self, request: jsonrpc.Request) -> anyio.CancelScope:
        """A new scope for ``request``, by which ``$/cancel_request`` finds it."""
        scope = anyio.CancelScope()
        if request.id in self._running:
            log.warning("request id %r reused while the first is still running", request.id)
        self._running[request.id] = scope
        return scope

    def _notified(self, handler: Handler, notification: jsonrpc.Notification, tg: TaskGroup) -> None:
        if notification.method == CANCEL_REQUEST:
            self._cancel_incoming(notification.params.get("requestId"))
        else:
            tg.start_soon(self._run_notification, handler, notification)

    def _answered(self, response: jsonrpc.Response) -> None:
        pending = self._pending.get(response.id)
        if pending is None or pending.event.is_set():
            if self._withdrawn.pop(response.id, "unknown") is None:  # hashable: ids are str, int or None
                log.debug("late answer to withdrawn request %r ignored", response.id)
            else:
                log.warning("response to an unknown request id %r ignored", response.id)
            return
        pending.result, pending.error = response.result, response.error
        pending.event.set()

    async def _run_batch(self, handler: Handler, messages: list[jsonrpc.Message]) -> None:
        """A v2 batch: its requests and notifications run side by side; once every request is answered,
        the answers go out together, as one array (none at all for a batch without requests), each
        invalid entry answered there under a null id; then each answer's after-work, in order."""
        answers: dict[int, tuple[bytes, Callable[[], Awaitable[None]] | None]] = {}

        async def answer(index: int, request: jsonrpc.Request, scope: anyio.CancelScope) -> None:
            answers[index] = await self._answer(handler, request, scope)

        async with anyio.create_task_group() as tg:
            for index, message in enumerate(messages):
                if isinstance(message, jsonrpc.Request):
                    tg.start_soon(answer, index, message, self._scope_of(message))
                elif isinstance(message, jsonrpc.Notification):
                    self._notified(handler, message, tg)
                elif isinstance(message, jsonrpc.Response):
                    self._answered(message)
                elif message.answer:
                    log.warning("invalid message in a batch: %s", message.error.message)
                    answers[index] = (jsonrpc.encode(jsonrpc.error_response(message.id, message.error)), None)
        if not answers:
            return
        ordered = [answers[index] for index in sorted(answers)]
        data = jsonrpc.join_batch([encoded for encoded, _ in ordered])
        await self._send_then(data, [after for _, after in ordered if after is not None])

    def _cancel_incoming(self, request_id: object) -> None:
        if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
            return  # not a RequestId (and True would find request 1)
        scope = self._running.get(request_id)
        if scope is not None:
            scope.cancel()

    async def _run_request(self, handler: Handler, request: jsonrpc.Request, scope: anyio.CancelScope) -> None:
        data, after = await self._answer(handler, request, scope)
        await self._send_then(data, [after] if after is not None else [])

    async def _answer(
        self, handler: Handler, request: jsonrpc.Request, scope: anyio.CancelScope
    ) -> tuple[bytes, Callable[[], Awaitable[None]] | None]:
        """The encoded response to ``request``, and the work to do once it is written (None: none)."""
        response: dict[str, Any]
        after: Callable[[], Awaitable[None]] | None = None
        try:
            with scope:
                result = await handler.handle_request(request.method, request.params)
                if isinstance(result, Reply):
                    result, after = result.result, result.after
                response = jsonrpc.result_response(request.id, result)
            if scope.cancelled_caught:
                response = jsonrpc.error_response(request.id, RequestCancelled("Request cancelled"))
        except RequestError as exc:
            response = jsonrpc.error_response(request.id, exc)
        except Exception:
            log.exception("internal error while handling %s", request.method)
            error = InternalError(f"Internal error while handling {request.method}; see the agent's log")
            response = jsonrpc.error_response(request.id, error)
        finally:
            if self._running.get(request.id) is scope:
                del self._running[request.id]
        try:
            data = jsonrpc.encode(response)
        except (TypeError, ValueError):  # a result that is not JSON must not take the connection down
            log.exception("the result of %s is not JSON", request.method)
            error = InternalError(f"Internal error while handling {request.method}; see the agent's log")
            data, after = jsonrpc.encode(jsonrpc.error_response(request.id, error)), None
        return data, after

    async def _send_then(self, data: bytes, afters: list[Callable[[], Awaitable[None]]]) -> None:
        """Send ``data`` (responses); once it is written, run ``afters`` in order."""
        if not afters:
            await self._send_encoded(data)
            return
        written = anyio.Event()
        if not await self._send_encoded(data, written):
            return
        await written.wait()  # the response is out: the after-work cannot hold it back
        for after in afters:
            if self._closed:
                return  # the client is gone (the write failed, or the input ended): nothing more reaches it
            try:
                await after()
            except Exception:
                log.exception("error after answering a request")

    async def _run_notification(self, handler: Handler, notification: jsonrpc.Notification) -> None:
        try:
            await handler.handle_notification(notification.method, notification.params)
        except MethodNotFound:
            pass  # unknown notifications are ignored (ACP: "SHOULD be ignored")
        except RequestError as exc:
            log.warning("notification %s failed: %s", notification.method, exc.message)
        except Exception:
            log.exception("internal error while handling notification %s", notification.method)
