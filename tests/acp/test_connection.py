"""The JSON-RPC connection (refagent.acp.connection) over anyio memory streams, with no processes.

The test plays the peer with raw lines: it writes bytes into the connection's input and reads back what
the connection wrote, one decoded message at a time.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from refagent.acp.connection import Connection, Reply
from refagent.acp.errors import (
    AuthRequired,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    MethodNotFound,
    RequestError,
    ResourceNotFound,
)

pytestmark = pytest.mark.anyio

TIMEOUT = 5  # a safety net only: every wait below ends as soon as its message arrives

Method = Callable[[dict[str, Any]], Awaitable[Any]]


class Peer:
    """The other end of the connection: raw lines in, decoded messages out."""

    def __init__(self) -> None:
        self._in_send, self._in_receive = anyio.create_memory_object_stream[bytes](math.inf)
        self._out_send, self._out_receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self.writes: list[bytes] = []

    async def lines(self) -> AsyncIterator[bytes]:
        async with self._in_receive:
            async for line in self._in_receive:
                yield line

    async def write(self, data: bytes) -> None:
        self.writes.append(data)
        assert data.endswith(b"\n")
        for line in data.split(b"\n")[:-1]:
            await self._out_send.send(json.loads(line))

    async def send_raw(self, line: bytes) -> None:
        await self._in_send.send(line)

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(message).encode())

    async def request(self, msg_id: Any, method: str, params: dict[str, Any] | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}})

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params or {}})

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            return await self._out_receive.receive()

    def pending(self) -> list[dict[str, Any]]:
        """What has been written but not received yet."""
        found = []
        while True:
            try:
                found.append(self._out_receive.receive_nowait())
            except anyio.WouldBlock:
                return found

    def close(self) -> None:
        """EOF on the connection's input."""
        self._in_send.close()


class Handler:
    """Dispatches to the coroutines in ``methods``; records notifications."""

    def __init__(self, **methods: Method) -> None:
        self.methods = {name.replace("__", "/"): method for name, method in methods.items()}
        self.notifications: list[tuple[str, dict[str, Any]]] = []
        self.notified = anyio.Event()

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method not in self.methods:
            raise MethodNotFound(f"Method not found: {method}")
        return await self.methods[method](params)

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append((method, params))
        self.notified.set()
        if method not in self.methods:
            raise MethodNotFound(f"Method not found: {method}")
        await self.methods[method](params)


class Served:
    def __init__(self, connection: Connection, peer: Peer) -> None:
        self.connection = connection
        self.peer = peer
        self.stopped = anyio.Event()

    async def wait_stopped(self) -> None:
        with anyio.fail_after(TIMEOUT):
            await self.stopped.wait()


@asynccontextmanager
async def serving(handler: Handler, peer: Peer | None = None) -> AsyncIterator[Served]:
    peer = peer or Peer()
    connection = Connection(peer.lines(), peer.write)
    served = Served(connection, peer)

    async def run() -> None:
        try:
            await connection.serve(handler)
        finally:
            served.stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        yield served
        tg.cancel_scope.cancel()


async def echo(params: dict[str, Any]) -> Any:
    return {"echo": params}


# -- dispatch ---------------------------------------------------------------------------------------


async def test_request_dispatched_and_answered_under_its_id() -> None:
    async with serving(Handler(echo=echo)) as s:
        await s.peer.request("abc", "echo", {"x": [1, "y"]})
        assert await s.peer.receive() == {"jsonrpc": "2.0", "id": "abc", "result": {"echo": {"x": [1, "y"]}}}
        await s.peer.request(0, "echo")
        assert await s.peer.receive() == {"jsonrpc": "2.0", "id": 0, "result": {"echo": {}}}


async def test_none_result_is_sent_as_empty_object() -> None:
    async def nothing(params: dict[str, Any]) -> None:
        return None

    async with serving(Handler(nothing=nothing)) as s:
        await s.peer.request(1, "nothing")
        assert (await s.peer.receive())["result"] == {}


async def test_many_concurrent_requests_answered_out_of_order() -> None:
    count = 100
    gates = [anyio.Event() for _ in range(count)]
    started = 0
    all_started = anyio.Event()

    async def wait(params: dict[str, Any]) -> Any:
        nonlocal started
        started += 1
        if started == count:
            all_started.set()
        await gates[params["n"]].wait()
        return {"n": params["n"]}

    async with serving(Handler(wait=wait)) as s:
        for n in range(count):
            await s.peer.request(f"r{n}", "wait", {"n": n})
        with anyio.fail_after(TIMEOUT):
            await all_started.wait()  # the read loop never waited on a handler
        assert s.peer.pending() == []
        for n in reversed(range(count)):
            gates[n].set()
            response = await s.peer.receive()  # the last request is answered first
            assert response == {"jsonrpc": "2.0", "id": f"r{n}", "result": {"n": n}}
        assert s.peer.pending() == []


async def test_own_requests_correlated_when_answers_arrive_out_of_order() -> None:
    async with serving(Handler()) as s:
        results: dict[str, Any] = {}

        async def ask(name: str) -> None:
            try:
                results[name] = await s.connection.request("fs/read_text_file", {"path": f"/{name}"})
            except RequestError as exc:
                results[name] = exc

        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c"):
                tg.start_soon(ask, name)
            requests = [await s.peer.receive() for _ in range(3)]
            assert len({r["id"] for r in requests}) == 3
            for r in requests:
                assert r["jsonrpc"] == "2.0"
                assert r["method"] == "fs/read_text_file"
            by_path = {r["params"]["path"]: r["id"] for r in requests}
            # answer c, then an error for b, then a
            await s.peer.send({"jsonrpc": "2.0", "id": by_path["/c"], "result": {"content": "C"}})
            await s.peer.send(
                {"jsonrpc": "2.0", "id": by_path["/b"], "error": {"code": -32002, "message": "no b", "data": [1]}}
            )
            await s.peer.send({"jsonrpc": "2.0", "id": by_path["/a"], "result": {"content": "A"}})
        assert results["a"] == {"content": "A"}
        assert results["c"] == {"content": "C"}
        error = results["b"]
        assert isinstance(error, RequestError)
        assert (error.code, error.message, error.data) == (-32002, "no b", [1])


async def test_responses_to_unknown_ids_are_ignored() -> None:
    async with serving(Handler(echo=echo)) as s:
        await s.peer.send({"jsonrpc": "2.0", "id": 12345, "result": {}})
        await s.peer.send({"jsonrpc": "2.0", "id": "nobody", "error": {"code": 1, "message": "x"}})
        await s.peer.request(1, "echo")
        assert (await s.peer.receive())["id"] == 1  # nothing was sent in answer to those responses


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidParams("Invalid params: missing 'cwd'"), -32602),
        (ResourceNotFound("Session not found: s"), -32002),
        (AuthRequired("log in first"), -32000),
        (MethodNotFound("Method not found: x"), -32601),
        (InternalError("broken"), -32603),
        (RequestError("custom", {"detail": 1}, code=-31001), -31001),
    ],
)
async def test_request_errors_answered_with_their_codes(error: RequestError, code: int) -> None:
    async def fail(params: dict[str, Any]) -> Any:
        raise error

    async with serving(Handler(fail=fail)) as s:
        await s.peer.request(5, "fail")
        response = await s.peer.receive()
    assert response["id"] == 5
    assert "result" not in response
    assert response["error"]["code"] == code
    assert response["error"]["message"] == error.message
    assert response["error"].get("data") == error.data


async def test_unknown_method_is_method_not_found() -> None:
    async with serving(Handler()) as s:
        await s.peer.request(1, "_vendor/thing")
        assert (await s.peer.receive())["error"]["code"] == -32601


async def test_unexpected_exception_is_internal_error_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def crash(params: dict[str, Any]) -> Any:
        raise ValueError("secret detail /home/user/token")

    async with serving(Handler(crash=crash, echo=echo)) as s:
        await s.peer.request(1, "crash")
        response = await s.peer.receive()
        await s.peer.request(2, "echo")  # the connection lives on
        assert (await s.peer.receive())["id"] == 2
    assert response["id"] == 1
    assert response["error"]["code"] == -32603
    message = response["error"]["message"]
    assert "crash" in message
    for leak in ("Traceback", "secret", "ValueError", 'File "', "line "):
        assert leak not in message
    assert "data" not in response["error"]
    assert "Traceback" in caplog.text  # the details went to the log instead


async def test_result_that_is_not_json_is_internal_error() -> None:
    async def bad(params: dict[str, Any]) -> Any:
        return {"value": object()}

    async with serving(Handler(bad=bad, echo=echo)) as s:
        await s.peer.request(1, "bad")
        assert (await s.peer.receive())["error"]["code"] == -32603
        await s.peer.request(2, "echo")
        assert (await s.peer.receive())["id"] == 2


async def test_invalid_lines_answered_and_connection_lives_on() -> None:
    async with serving(Handler(echo=echo)) as s:
        await s.peer.send_raw(b"{not json")
        response = await s.peer.receive()
        assert (response["id"], response["error"]["code"]) == (None, -32700)
        await s.peer.send_raw(b"[1, 2]")
        response = await s.peer.receive()
        assert (response["id"], response["error"]["code"]) == (None, -32600)
        await s.peer.send({"jsonrpc": "2.0", "id": 3, "method": "echo", "params": [1]})
        response = await s.peer.receive()
        assert (response["id"], response["error"]["code"]) == (3, -32602)
        await s.peer.send({"jsonrpc": "2.0", "method": "echo", "params": [1]})  # broken notification
        await s.peer.send_raw(b"   ")  # blank lines are skipped
        await s.peer.request(4, "echo")
        assert (await s.peer.receive())["id"] == 4
        assert s.peer.pending() == []


async def test_parse_error_answer_shape() -> None:
    async with serving(Handler()) as s:
        await s.peer.send_raw(b"{not json")
        response = await s.peer.receive()
    assert response["jsonrpc"] == "2.0"
    assert response["id"] is None
    assert response["error"]["code"] == -32700
    assert isinstance(response["error"]["message"], str)


# -- notifications ----------------------------------------------------------------------------------


async def test_unknown_notifications_ignored_known_ones_dispatched() -> None:
    seen = anyio.Event()

    async def cancel(params: dict[str, Any]) -> None:
        seen.set()

    handler = Handler(echo=echo, session__cancel=cancel)
    async with serving(handler) as s:
        await s.peer.notify("_vendor/unknown", {"x": 1})
        await s.peer.notify("$/progress")
        await s.peer.notify("session/cancel", {"sessionId": "s"})
        with anyio.fail_after(TIMEOUT):
            await seen.wait()
        await s.peer.request(1, "echo")
        assert (await s.peer.receive())["id"] == 1  # nothing was answered before it
        assert s.peer.pending() == []
    assert [m for m, _ in handler.notifications] == ["_vendor/unknown", "$/progress", "session/cancel"]


async def test_failing_notification_handler_sends_nothing() -> None:
    async def fail(params: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    async def fail_rpc(params: dict[str, Any]) -> None:
        raise InvalidParams("bad")

    async with serving(Handler(echo=echo, crash=fail, bad=fail_rpc)) as s:
        await s.peer.notify("crash")
        await s.peer.notify("bad")
        await s.peer.request(1, "echo")
        assert (await s.peer.receive())["id"] == 1
        assert s.peer.pending() == []


# -- cancellation -----------------------------------------------------------------------------------


async def test_cancel_request_cancels_a_long_handler_which_answers_32800() -> None:
    started = anyio.Event()
    cleaned_up = anyio.Event()

    async def long(params: dict[str, Any]) -> Any:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned_up.set()

    async with serving(Handler(long=long, echo=echo)) as s:
        await s.peer.request(1, "long")
        await s.peer.request("x", "long")
        with anyio.fail_after(TIMEOUT):
            await started.wait()
        await s.peer.notify("$/cancel_request", {"requestId": True})  # not an id; must not hit request 1
        await s.peer.notify("$/cancel_request", {"requestId": 1.0})
        await s.peer.notify("$/cancel_request", {"requestId": 99})  # unknown: ignored
        await s.peer.notify("$/cancel_request", {})
        await s.peer.notify("$/cancel_request", {"requestId": "x"})
        response = await s.peer.receive()  # only "x" was cancelled
        assert (response["id"], response["error"]["code"]) == ("x", -32800)
        assert cleaned_up.is_set()
        await s.peer.notify("$/cancel_request", {"requestId": 1})
        response = await s.peer.receive()
        assert response["id"] == 1
        assert response["error"]["code"] == -32800
        assert "result" not in response
        await s.peer.request(2, "echo")
        assert (await s.peer.receive())["id"] == 2
        assert s.peer.pending() == []


async def test_cancel_request_after_the_answer_is_harmless() -> None:
    async with serving(Handler(echo=echo)) as s:
        await s.peer.request(1, "echo")
        assert "result" in await s.peer.receive()
        await s.peer.notify("$/cancel_request", {"requestId": 1})
        await s.peer.request(2, "echo")
        assert "result" in await s.peer.receive()
        assert s.peer.pending() == []


async def test_cancelled_caller_of_an_outgoing_request_sends_cancel_request(caplog: pytest.LogCaptureFixture) -> None:
    async with serving(Handler()) as s:
        outcome: list[str] = []

        async def ask(scope: anyio.CancelScope) -> None:
            with scope:
                await s.connection.request("session/request_permission", {"sessionId": "s"})
                outcome.append("answered")
            outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, scope)
            request = await s.peer.receive()
            assert request["method"] == "session/request_permission"
            scope.cancel()
            cancel = await s.peer.receive()
        assert cancel == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request["id"]}}
        assert outcome == ["cancelled"]
        # a late answer to the cancelled request is ignored, quietly: ACP requires the peer to send it
        caplog.set_level(logging.DEBUG, logger="refagent.acp.connection")
        await s.peer.send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32800, "message": "x"}})
        await s.peer.send({"jsonrpc": "2.0", "id": 9999, "result": {}})  # one never sent: that is news
        await s.connection.notify("ping", {})
        assert (await s.peer.receive())["method"] == "ping"  # both answers have been read by now
        assert s.peer.pending() == []
    levels = {r.getMessage().split(" ignored")[0]: r.levelno for r in caplog.records if "ignored" in r.getMessage()}
    assert levels == {
        f"late answer to withdrawn request {request['id']!r}": logging.DEBUG,
        "response to an unknown request id 9999": logging.WARNING,
    }


# -- ordering ---------------------------------------------------------------------------------------


async def test_notifications_before_return_precede_the_response_and_after_follows_it() -> None:
    connection: list[Connection] = []

    async def new(params: dict[str, Any]) -> Any:
        await connection[0].notify("session/update", {"n": "before"})

        async def after() -> None:
            await connection[0].notify("session/update", {"n": "after 1"})
            await connection[0].notify("session/update", {"n": "after 2"})

        return Reply({"sessionId": "s1"}, after=after)

    async with serving(Handler(session__new=new)) as s:
        connection.append(s.connection)
        await s.peer.request(1, "session/new")
        received = [await s.peer.receive() for _ in range(4)]
    assert received[0]["params"] == {"n": "before"}
    assert received[1] == {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}
    assert [m["params"]["n"] for m in received[2:]] == ["after 1", "after 2"]


async def test_after_runs_once_the_response_is_written() -> None:
    """The after-work waits for the writer, not only for the outbox: however long it holds the process, the
    response is already out."""
    gate = anyio.Event()
    peer = Peer()
    plain_write = peer.write
    ran: list[int] = []

    async def slow_write(data: bytes) -> None:
        await gate.wait()  # the client reads stdout slowly
        await plain_write(data)

    async def new(params: dict[str, Any]) -> Any:
        async def after() -> None:
            ran.append(len(peer.writes))

        return Reply({"sessionId": "s1"}, after=after)

    peer.write = slow_write  # type: ignore[method-assign]
    async with serving(Handler(session__new=new), peer) as s:
        await s.peer.request(1, "session/new")
        await anyio.wait_all_tasks_blocked()  # the response is queued; the writer waits at the gate
        assert ran == []
        gate.set()
        assert (await s.peer.receive())["id"] == 1
        await anyio.wait_all_tasks_blocked()
    assert ran == [1]  # after the response's write, and only after it


async def test_no_after_when_the_response_cannot_be_written() -> None:
    peer = Peer()
    ran: list[bool] = []

    async def broken_write(data: bytes) -> None:
        raise BrokenPipeError("the client is gone")

    async def new(params: dict[str, Any]) -> Any:
        async def after() -> None:
            ran.append(True)

        return Reply({"sessionId": "s1"}, after=after)

    peer.write = broken_write  # type: ignore[method-assign]
    async with serving(Handler(session__new=new), peer) as s:
        await s.peer.request(1, "session/new")
        await anyio.wait_all_tasks_blocked()
    assert ran == []


async def test_failing_after_callback_does_not_break_the_connection() -> None:
    async def new(params: dict[str, Any]) -> Any:
        async def after() -> None:
            raise RuntimeError("boom")

        return Reply({"ok": True}, after=after)

    async with serving(Handler(new=new, echo=echo)) as s:
        await s.peer.request(1, "new")
        assert (await s.peer.receive())["result"] == {"ok": True}
        await s.peer.request(2, "echo")
        assert (await s.peer.receive())["id"] == 2


# -- EOF --------------------------------------------------------------------------------------------


async def test_eof_cancels_handlers_and_fails_pending_outgoing_requests() -> None:
    running = anyio.Event()
    asked = anyio.Event()
    cleaned_up = anyio.Event()
    outcome: list[BaseException] = []
    connection: list[Connection] = []

    async def long(params: dict[str, Any]) -> Any:
        running.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned_up.set()

    async def ask_editor() -> None:
        try:
            await connection[0].request("fs/read_text_file", {"path": "/x"})
        except ConnectionClosed as exc:
            outcome.append(exc)
        finally:
            asked.set()

    async with serving(Handler(long=long)) as s:
        connection.append(s.connection)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_editor)
            assert (await s.peer.receive())["method"] == "fs/read_text_file"
            await s.peer.request(1, "long")
            with anyio.fail_after(TIMEOUT):
                await running.wait()
            s.peer.close()
            await s.wait_stopped()  # serve returned by itself
            assert cleaned_up.is_set()
            with anyio.fail_after(TIMEOUT):
                await asked.wait()
        assert len(outcome) == 1
        assert isinstance(outcome[0], ConnectionClosed)
        assert isinstance(outcome[0], RequestError)
        # and later requests fail at once instead of waiting forever
        with pytest.raises(ConnectionClosed):
            await s.connection.request("fs/read_text_file", {"path": "/y"})
        await s.connection.notify("session/update", {})  # dropped silently
        assert s.peer.pending() == []


async def test_answers_queued_before_eof_are_still_written() -> None:
    gate = anyio.Event()
    peer = Peer()
    plain_write = peer.write

    async def slow_write(data: bytes) -> None:
        await gate.wait()  # the client reads stdout slowly
        await plain_write(data)

    async def answer(params: dict[str, Any]) -> Any:
        return {"n": params["n"]}

    peer.write = slow_write  # type: ignore[method-assign]
    async with serving(Handler(answer=answer), peer) as s:
        for n in range(3):
            await s.peer.request(n, "answer", {"n": n})
        await anyio.wait_all_tasks_blocked()  # the three answers are queued, the writer waits at the gate
        s.peer.close()  # EOF while the three answers wait behind the stuck writer
        gate.set()
        await s.wait_stopped()
        assert [(await s.peer.receive())["result"]["n"] for _ in range(3)] == [0, 1, 2]


async def test_serve_returns_at_eof_with_nothing_running() -> None:
    async with serving(Handler()) as s:
        s.peer.close()
        await s.wait_stopped()


# -- size -------------------------------------------------------------------------------------------


async def test_10_mb_messages_round_trip_both_ways() -> None:
    big = "x" * (10 * 1024 * 1024) + "\n\u00e9\ud800"
    clean = big[:-1] + "\ufffd"  # a lone surrogate crosses the wire as U+FFFD, both ways

    async def echo_text(params: dict[str, Any]) -> Any:
        return {"text": params["text"], "length": len(params["text"])}

    async with serving(Handler(echo_text=echo_text)) as s:
        await s.peer.request(1, "echo_text", {"text": big})
        response = await s.peer.receive()
        assert response["result"]["length"] == len(big)
        assert response["result"]["text"] == clean
        assert all(w.count(b"\n") == 1 for w in s.peer.writes)  # one line, despite the newline inside

        results: list[Any] = []

        async def ask() -> None:
            results.append(await s.connection.request("fs/write_text_file", {"path": "/big", "content": big}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            request = await s.peer.receive()
            assert request["params"]["content"] == clean
            await s.peer.send({"jsonrpc": "2.0", "id": request["id"], "result": {"content": big}})
        assert results == [{"content": clean}]
