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

One module of some 550 lines, not split: the script's format, the chunks it becomes and the handler
that serves them change together, and a test author reads them as one thing.

This module uses only the standard library: importing it does not import ``openai``. It is longer than
most (~550 lines) because the server, the shapes of its chunks and the JSON script format are one fake:
split up, each part would only make sense next to the others.
"""

from __future__ import annotations

import argparse
import functools
import json
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

ReasoningField = Literal["reasoning_content", "reasoning"]
UsageMode = Literal["requested", "with_finish", "never"]
CREATED = 1_700_000_000
"""A fixed ``created`` timestamp: responses are byte-for-byte reproducible."""


@dataclass(frozen=True, slots=True)
class Fault:
    """Something going wrong with one request. Build with :meth:`status` or :meth:`cut`."""

    status_code: int = 0
    retry_after: float | str | None = None
    message: str = ""
    cut_after: int | None = None
    """Close the connection after this many SSE chunks, without finishing the response."""

    @classmethod
    def status(cls, code: int, *, retry_after: float | str | None = None, message: str = "") -> Fault:
        """Answer with HTTP ``code`` and an OpenAI-style error body; ``retry_after`` sets the header."""
        return cls(status_code=code, retry_after=retry_after, message=message or _default_message(code))

    @classmethod
    def cut(cls, after: int = 0) -> Fault:
        """Start a 200 streaming response, send ``after`` chunks, then drop the connection."""
        return cls(cut_after=after)


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str | Mapping[str, Any] = ""
    """The raw argument string (it need not be JSON), or an object that is sent as JSON."""
    id: str | None = None
    """Defaults to ``call_<request>_<index>``."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One scripted response. Strings are streamed word by word; sequences of strings chunk by chunk."""

    text: str | Sequence[str] = ""
    reasoning: str | Sequence[str] = ""
    reasoning_field: ReasoningField = "reasoning_content"
    refusal: str | Sequence[str] = ""
    tool_calls: Sequence[ToolCall] = ()
    argument_chunks: int = 3
    """How many chunks each tool call's arguments are split into."""
    repeat_name: bool = False
    """Repeat the tool call's name, id and type in every chunk (as some providers do)."""
    finish_reason: str | None = ""
    """``""``: ``tool_calls`` if there are tool calls, else ``stop``; ``None``: send no finish reason."""
    usage: tuple[int, int] | None = None
    """``(prompt_tokens, completion_tokens)``; default: a count derived from the request and the chunks."""
    usage_mode: UsageMode = "requested"
    """``requested``: a last chunk with empty choices, only when ``stream_options.include_usage`` was asked
    (OpenAI's behaviour); ``with_finish``: on the finish chunk, always; ``never``."""
    raw_chunks: Sequence[Mapping[str, Any] | str] | None = None
    """Send exactly these chunks instead: objects as JSON, strings as they are (``[]``: just ``[DONE]``)."""
    chunk_delay: float = 0.0
    """Seconds between chunks after the first two (slow streaming, for cancel tests)."""
    fault: Fault | None = None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The decoded JSON body (``None`` for a GET)."""


class ScriptedOpenAIServer:
    """Serves ``turns`` in order, one per chat completion request, then ``fallback`` for every later one.

    Without a fallback, a request past the end of the script gets a 400 saying so (not retried by clients,
    so a test fails fast). ``api_key``: if set, requests must carry ``Authorization: Bearer <api_key>`` or
    get a 401. ``reject_stream_options``: answer 400 to requests that send ``stream_options`` (without
    consuming a turn), like servers that predate it.
    """

    def __init__(
        self,
        turns: Sequence[Turn] = (),
        *,
        fallback: Turn | None = None,
        api_key: str | None = None,
        reject_stream_options: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._turns = list(turns)
        self._fallback = fallback
        self.api_key = api_key
        self.reject_stream_options = reject_stream_options
        self._requests: list[RecordedRequest] = []
        self._served = 0
        self._lock = threading.Lock()
        self._disconnected = threading.Event()
        self._stopping = threading.Event()
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

    # -- used by the handler ----------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_turn(self) -> tuple[int, Turn | None]:
        with self._lock:
            self._served += 1
            if self._turns:
                return self._served, self._turns.pop(0)
            return self._served, self._fallback


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
            self._json(404, _error_body(f"no route for GET {self.path}", "not_found", 404))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.scripted._record(RecordedRequest("POST", self.path, self._headers(), body))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, _error_body(f"no route for POST {self.path}", "not_found", 404))
            return
        if not isinstance(body, dict):
            self._json(400, _error_body("the body is not a JSON object", "invalid_request_error", 400))
            return
        key = self.scripted.api_key
        if key is not None and self.headers.get("Authorization") != f"Bearer {key}":
            self._json(401, _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
            return
        if self.scripted.reject_stream_options and "stream_options" in body:
            message = "Unrecognized request argument supplied: stream_options"
            self._json(400, _error_body(message, "invalid_request_error", 400))
            return
        number, turn = self.scripted._next_turn()
        if turn is None:
            message = f"the scripted server ran out of turns (request {number})"
            self._json(400, _error_body(message, "invalid_request_error", 400))
            return
        if turn.fault is not None and turn.fault.status_code:
            self._status_fault(turn.fault)
        elif body.get("stream"):
            self._stream(turn, body, number)
        else:
            self._json(200, _completion(turn, body, number))

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

    def _status_fault(self, fault: Fault) -> None:
        headers = {} if fault.retry_after is None else {"Retry-After": _header_value(fault.retry_after)}
        kind = {401: "invalid_request_error", 429: "rate_limit_error"}.get(fault.status_code, "server_error")
        code: str | int = "invalid_api_key" if fault.status_code == 401 else fault.status_code
        self._json(fault.status_code, _error_body(fault.message, kind, code), headers)

    def _stream(self, turn: Turn, body: Mapping[str, Any], number: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [b"data: " + _data(c).encode() + b"\n\n" for c in _chunks(turn, body, number)]
        events.append(b"data: [DONE]\n\n")
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


def _default_message(code: int) -> str:
    return {
        401: "Incorrect API key provided.",
        403: "You are not allowed to use this model.",
        429: "Rate limit reached. Please try again later.",
        500: "The server had an error while processing your request.",
        502: "Bad gateway.",
        503: "The engine is currently overloaded. Please try again later.",
    }.get(code, f"Scripted error {code}.")


def _error_body(message: str, kind: str, code: str | int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _pieces(value: str | Sequence[str]) -> list[str]:
    if isinstance(value, str):
        words = value.split(" ")
        return [p for p in (w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)) if p]
    return list(value)


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return [""]
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _finish_reason(turn: Turn) -> str | None:
    if turn.finish_reason == "":
        return "tool_calls" if turn.tool_calls else "stop"
    return turn.finish_reason


def _usage(turn: Turn, body: Mapping[str, Any], completion: int) -> dict[str, int]:
    if turn.usage is not None:
        prompt, completion = turn.usage
    else:
        prompt = len(json.dumps(body.get("messages", []))) // 4
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _data(chunk: Mapping[str, Any] | str) -> str:
    return chunk if isinstance(chunk, str) else json.dumps(chunk)


def _chunks(turn: Turn, body: Mapping[str, Any], number: int) -> Iterator[Mapping[str, Any] | str]:
    """The ``chat.completion.chunk`` objects of a streamed ``turn``, shaped like OpenAI's."""
    base = {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion.chunk", "created": CREATED}
    base["model"] = body.get("model", "")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    if turn.raw_chunks is not None:
        yield from turn.raw_chunks
        return
    count = 0
    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.reasoning):
        count += 1
        yield chunk({turn.reasoning_field: piece})
    for piece in _pieces(turn.text):
        count += 1
        yield chunk({"content": piece})
    for piece in _pieces(turn.refusal):
        count += 1
        yield chunk({"refusal": piece})
    for index, call in enumerate(turn.tool_calls):
        call_id = call.id or f"call_{number}_{index}"
        for i, piece in enumerate(_split(_arguments(call), turn.argument_chunks)):
            count += 1
            entry: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if i == 0 or turn.repeat_name:
                entry.update(id=call_id, type="function")
                entry["function"] = {"name": call.name, "arguments": piece}
            yield chunk({"tool_calls": [entry]})
    usage = _usage(turn, body, count)
    finish = chunk({}, _finish_reason(turn))
    if turn.usage_mode == "with_finish":
        finish["usage"] = usage
    yield finish
    options = body.get("stream_options")
    if turn.usage_mode == "requested" and isinstance(options, dict) and options.get("include_usage"):
        yield {**base, "choices": [], "usage": usage}


def _completion(turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` for ``turn``."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(_pieces(turn.text)) or None}
    if turn.reasoning:
        message[turn.reasoning_field] = "".join(_pieces(turn.reasoning))
    if turn.refusal:
        message["refusal"] = "".join(_pieces(turn.refusal))
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{number}_{i}",
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for i, call in enumerate(turn.tool_calls)
        ]
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(turn)}],
        "usage": _usage(turn, body, len(_pieces(turn.text))),
    }


def _as_dict(request: RecordedRequest) -> dict[str, Any]:
    return {"method": request.method, "path": request.path, "headers": request.headers, "body": request.body}


# -- scripts as JSON (for the command line) -----------------------------------------------------

_TURN_FIELDS = frozenset(Turn.__dataclass_fields__) - {"fault", "tool_calls", "usage"}


def turn_from_json(data: Mapping[str, Any]) -> Turn:
    """A :class:`Turn` from its JSON form (see the module docstring)."""
    unknown = set(data) - _TURN_FIELDS - {"fault", "tool_calls", "usage"}
    if unknown:
        raise ValueError(f"unknown turn fields: {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in _TURN_FIELDS}
    if "usage" in data and data["usage"] is not None:
        kwargs["usage"] = tuple(data["usage"])
    kwargs["tool_calls"] = [ToolCall(**c) for c in data.get("tool_calls", [])]
    fault = data.get("fault")
    if fault is not None:
        if "cut_after" in fault:
            kwargs["fault"] = Fault.cut(int(fault["cut_after"]))
        else:
            kwargs["fault"] = Fault.status(
                int(fault["status"]), retry_after=fault.get("retry_after"), message=fault.get("message", "")
            )
    return Turn(**kwargs)


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
