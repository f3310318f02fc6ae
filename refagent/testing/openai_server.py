"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests, benchmarks and demos.

It answers ``POST /v1/chat/completions`` (streaming SSE or plain JSON) from a list of scripted
:class:`Turn`\\ s, one per request, and records every request for assertions::

    with ScriptedOpenAIServer([Turn(fault=Fault.status(429, retry_after=0)), Turn(text="hi")]) as server:
        ...  # point a client at server.base_url
        assert server.requests[1].body["model"] == "gpt-test"

A turn can stream text, reasoning (as ``reasoning_content`` or ``reasoning``), a refusal, and tool calls
whose arguments are split over several chunks (optionally repeating the name and id in every chunk, as
some providers do); it ends with a finish reason and, as OpenAI does when asked with ``stream_options``,
a last chunk with empty ``choices`` and the usage. Faults: an HTTP error status (with or without
``Retry-After``), a connection closed mid-stream, a delay between chunks (for cancel tests; the server
notices at once when the client hangs up, see :meth:`ScriptedOpenAIServer.wait_for_disconnect`).

It is a stdlib ``ThreadingHTTPServer`` in a background thread, so sync tests, async tests (any event
loop) and separately spawned processes can all use it. From a shell::

    python -m refagent.testing.openai_server --script turns.json --port 0   # prints its base URL

where ``turns.json`` is a list of turns, or ``{"turns": [...], "fallback": {...}}``; each turn is an
object with :class:`Turn`'s field names (``fault`` as ``{"status": 429, "retry_after": 1}`` or
``{"cut_after": 2}``, tool calls as ``{"name": ..., "arguments": ...}``). ``GET /_scripted/requests``
returns the recorded requests as JSON, for tests that spawned the server.

The script (:class:`Turn` and its faults) is :mod:`refagent.testing.script`'s; how each API streams it is
a wire's (:mod:`refagent.testing.wires`): a ``POST`` goes to the wire whose path its own ends with, so one
server answers Chat Completions (``/chat/completions``) and the other APIs refagent speaks from one script.
OpenAI's Responses API (``/responses``, :mod:`refagent.testing.responses_wire`) is one of them: its events,
the reasoning items' encrypted content it issues and checks, and cached tokens by OpenAI's prefix rule.
Anthropic's Messages API (``/v1/messages``: its events, its ``x-api-key``, signed thinking, its
prompt-cache breakpoints in the usage) is :mod:`refagent.testing.anthropic_wire`'s; point a client at the
server's root, ``base_url`` without ``/v1``, and :meth:`ScriptedOpenAIServer.wire` gives its state.

This module uses only the standard library: importing it does not import ``openai``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from refagent.testing.anthropic_wire import AnthropicWire
from refagent.testing.responses_wire import ResponsesWire
from refagent.testing.script import Fault, RecordedRequest, ToolCall, Turn, turn_from_json
from refagent.testing.wires import ChatWire, Rejection, Wire

__all__ = [
    "Fault",
    "RecordedRequest",
    "ScriptedOpenAIServer",
    "ToolCall",
    "Turn",
    "server_from_json",
    "server_wires",
    "turn_from_json",
]


class ScriptedOpenAIServer:
    """Serves ``turns`` in order, one per chat completion request, then ``fallback`` for every later one.

    ``routes``: scripts of their own for the requests whose first user message contains a key (the first
    key that matches): such a request takes the next turn of that key's list, so that conversations that
    run at once (subagents) each follow their own script, whatever order their requests come in.

    Without a fallback, a request past the end of the script gets a 400 saying so (not retried by clients,
    so a test fails fast). ``api_key``: if set, requests must carry ``Authorization: Bearer <api_key>`` or
    get a 401. ``reject_stream_options``: answer 400 to requests that send ``stream_options`` (without
    consuming a turn), like servers that predate it. ``reject_message_fields``: answer 400 to requests with
    a message that carries one of these fields (without consuming a turn), like a strict server that does
    not know another's extensions.
    """

    def __init__(
        self,
        turns: Sequence[Turn] = (),
        *,
        routes: Mapping[str, Sequence[Turn]] | None = None,
        fallback: Turn | None = None,
        api_key: str | None = None,
        reject_stream_options: bool = False,
        reject_message_fields: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._turns = list(turns)
        self._routes = {key: list(script) for key, script in (routes or {}).items()}
        self._fallback = fallback
        self.api_key = api_key
        self.reject_stream_options = reject_stream_options
        self.reject_message_fields = tuple(reject_message_fields)
        self._requests: list[RecordedRequest] = []
        self._served = 0
        self._lock = threading.Lock()
        self._disconnected = threading.Event()
        self._stopping = threading.Event()
        self._wires = {wire.path: wire for wire in server_wires()}
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.scripted = self
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        # A short poll interval: stop() (and so every test's teardown) waits for the loop to notice.
        serve = functools.partial(self._httpd.serve_forever, poll_interval=0.01)
        self._thread = threading.Thread(target=serve, name="scripted-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # slow streams check it between chunks
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give an OpenAI client: ``http://127.0.0.1:<port>/v1``."""
        host = self._httpd.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (chat completions and others), in order."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def add(self, *turns: Turn) -> None:
        """Append turns to the script."""
        with self._lock:
            self._turns.extend(turns)

    def wait_for_disconnect(self, timeout: float) -> bool:
        """Wait until a client hung up in the middle of a streaming response; ``False`` on timeout."""
        return self._disconnected.wait(timeout)

    @property
    def disconnected(self) -> bool:
        return self._disconnected.is_set()

    def wire(self, path: str) -> Wire:
        """The wire that answers a ``POST`` whose path ends with ``path`` (for what it keeps)."""
        return self._wires[path]

    # -- used by the handler ----------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _answered(self, request: RecordedRequest) -> None:
        answered = dataclasses.replace(request, answered=time.monotonic())
        with self._lock:  # by identity, from the end: comparing bodies would cost the server more each request
            at = next(i for i in range(len(self._requests) - 1, -1, -1) if self._requests[i] is request)
            self._requests[at] = answered

    def _next_turn(self, body: Mapping[str, Any]) -> tuple[int, Turn | None]:
        with self._lock:
            self._served += 1
            if self._routes:
                first = first_user_text(body)
                route = next((script for key, script in self._routes.items() if key in first), None)
                if route is not None:
                    return self._served, route.pop(0) if route else self._fallback
            if self._turns:
                return self._served, self._turns.pop(0)
            return self._served, self._fallback


def first_user_text(body: Mapping[str, Any]) -> str:
    """The text of a request's first user message, in any API's form (Chat Completions' and Anthropic's
    ``messages``, the Responses API's ``input``): a string, or its parts' ``text`` joined."""
    messages = body.get("messages", body.get("input"))
    if not isinstance(messages, list):
        return ""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return ""
    return ""


def server_wires() -> list[Wire]:
    """A new wire of each API, for one server (here, above them all: each wire's module imports
    :mod:`refagent.testing.wires`)."""
    return [ChatWire(), ResponsesWire(), AnthropicWire()]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    scripted: ScriptedOpenAIServer


class _ClientGone(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked transfer, like real endpoints
    # Without TCP_NODELAY a small write after another waits for the client's delayed ACK: +40 ms a request.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: stderr belongs to the test runner

    @property
    def scripted(self) -> ScriptedOpenAIServer:
        return self.server.scripted

    def do_GET(self) -> None:
        self.scripted._record(RecordedRequest("GET", self.path, self._headers(), None))
        if self.path.rstrip("/").endswith("/_scripted/requests"):
            self._json(200, [_as_dict(r) for r in self.scripted.requests])
        elif self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "scripted-model", "object": "model", "created": 0}]})
        else:
            self._json(404, {"error": {"message": f"no route for GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        received = time.monotonic()  # before the server's own work: parsing the body is not the client's time
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest("POST", self.path, self._headers(), body, received=received)
        self.scripted._record(request)
        path = self.path.split("?", 1)[0].rstrip("/")
        wire = next((w for suffix, w in self.scripted._wires.items() if path.endswith(suffix)), None)
        if wire is None:
            self._json(404, {"error": {"message": f"no route for POST {self.path}", "type": "not_found"}})
            return
        try:
            self._answer(wire, body)
        except Rejection as exc:
            self._json(exc.status, wire.error(exc.status, exc.message, exc.kind))
        self.scripted._answered(request)

    def _answer(self, wire: Wire, body: Any) -> None:
        if not isinstance(body, dict):
            raise Rejection(400, "the body is not a JSON object")
        key = self.scripted.api_key
        if key is not None and not wire.authorized(self._headers(), key):
            raise Rejection(401, "Incorrect API key provided.", "authentication_error")
        if self.scripted.reject_stream_options and "stream_options" in body:
            raise Rejection(400, "Unrecognized request argument supplied: stream_options")
        for index, message in enumerate(body.get("messages") or ()):
            unknown = [f for f in self.scripted.reject_message_fields if isinstance(message, dict) and f in message]
            if unknown:
                raise Rejection(
                    400, f"Additional properties are not allowed ('{unknown[0]}' was unexpected) - 'messages.{index}'"
                )
        wire.check(body)
        number, turn = self.scripted._next_turn(body)
        if turn is None:
            raise Rejection(400, f"the scripted server ran out of turns (request {number})")
        if turn.fault is not None and turn.fault.status_code:
            self._status_fault(wire, turn.fault)
        elif body.get("stream"):
            self._stream(turn, wire.events(turn, body, number))
        else:
            self._json(200, wire.complete(turn, body, number))

    # -- responses --------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _status_fault(self, wire: Wire, fault: Fault) -> None:
        headers = {} if fault.retry_after is None else {"Retry-After": _header_value(fault.retry_after)}
        kind = {401: "authentication_error", 429: "rate_limit_error"}.get(fault.status_code, "server_error")
        self._json(fault.status_code, wire.error(fault.status_code, fault.message, kind), headers)

    def _stream(self, turn: Turn, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        cut = turn.fault.cut_after if turn.fault is not None else None
        if cut is not None:
            events = events[:cut]
        try:
            if turn.chunk_delay > 0:
                for i, event in enumerate(events):
                    if i > 1:  # the role chunk and the first content chunk come together, as from real servers
                        self._pause(turn.chunk_delay)
                    self.wfile.write(_http_chunk(event))
                    self.wfile.flush()
            else:
                # One write for the whole body: the server stays out of the way of the client being measured.
                self.wfile.write(b"".join(_http_chunk(e) for e in events))
            if cut is not None:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)  # no terminating chunk: an incomplete body
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
        except (_ClientGone, BrokenPipeError, ConnectionResetError):
            self.scripted._disconnected.set()
            self.close_connection = True

    def _pause(self, seconds: float) -> None:
        """Sleep between chunks, but notice at once if the client hangs up (or the server stops)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.scripted._stopping.is_set():
                raise _ClientGone
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                raise _ClientGone


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _header_value(value: float | str) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _as_dict(request: RecordedRequest) -> dict[str, Any]:
    return {"method": request.method, "path": request.path, "headers": request.headers, "body": request.body}


# -- scripts as JSON (for the command line) -----------------------------------------------------


def server_from_json(script: Any, **options: Any) -> ScriptedOpenAIServer:
    """A server from a JSON script: a list of turns, or ``{"turns": [...], "fallback": {...}}``."""
    if isinstance(script, list):
        script = {"turns": script}
    fallback = script.get("fallback")
    return ScriptedOpenAIServer(
        [turn_from_json(t) for t in script.get("turns", [])],
        fallback=turn_from_json(fallback) if fallback is not None else None,
        reject_stream_options=bool(script.get("reject_stream_options", False)),
        **options,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refagent.testing.openai_server",
        description="Serve a scripted OpenAI-compatible chat completions endpoint; prints its base URL.",
    )
    parser.add_argument("--script", help="a JSON file of turns (default: answer 'Hello!' to every request)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (the default) picks a free port")
    parser.add_argument("--api-key", help="require this bearer key")
    args = parser.parse_args(argv)
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            script: Any = json.load(f)
    else:
        script = {"fallback": {"text": "Hello!"}}
    server = server_from_json(script, host=args.host, port=args.port, api_key=args.api_key)
    print(server.base_url, flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._stopping.set()
        server._httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
