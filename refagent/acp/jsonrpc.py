"""JSON-RPC 2.0 framing for ACP, without I/O (the h11 split: this module only turns bytes into messages
and messages into bytes).

ACP's stdio transport carries one JSON object per line (``\\n``-delimited, no embedded newlines; no
batches in v1, while v2 allows an array of them on one line). :func:`parse_line` classifies a line as a
:class:`Request`, :class:`Notification` or :class:`Response`, or as :class:`Invalid` with the error to
answer and the id to answer it under (:func:`parse_batch`: each message of a v2 batch). :func:`encode`
writes the compact single-line form (:func:`join_batch`: a batch of them).

Both directions carry Unicode text only: a lone surrogate escape (``"\\ud83d"``, half an emoji) is valid
JSON syntax, but no UTF-8 encoder, and no strict parser (serde_json, in Zed), takes the string it stands
for. So a message read is cleaned of them, and so is a message written (U+FFFD each, :mod:`refagent.acp.text`):
one bad string from the editor, a file name or a model cannot reach the rest of the agent, nor the editor.
Ids are echoed exactly as they came (a peer matches responses by them).
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from refagent.acp import LINE_TOO_LONG, MAX_LINE_BYTES
from refagent.acp.errors import InvalidParams, InvalidRequest, ParseError, RequestError
from refagent.acp.text import clean

RequestId: TypeAlias = int | str | None
"""``RequestId`` in the schema: an int64, a string, or null. Echo the peer's exactly."""

_INT64 = range(-(2**63), 2**63)


class _Message:
    """What :func:`parse_line` returns: immutable, compared, hashed and shown field by field, as a frozen
    dataclass is. Plain classes, because they are made on the way to the first answer an editor waits for
    (``initialize``): the four frozen dataclasses took some 2 ms to create, these a tenth of that."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, fields[name])

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Message)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")


class Request(_Message):
    __slots__ = ("id", "method", "params")
    id: RequestId
    method: str
    params: dict[str, Any]

    def __init__(self, id: RequestId, method: str, params: dict[str, Any]) -> None:
        super().__init__(id=id, method=method, params=params)


class Notification(_Message):
    __slots__ = ("method", "params")
    method: str
    params: dict[str, Any]

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        super().__init__(method=method, params=params)


class Response(_Message):
    __slots__ = ("error", "id", "result")
    id: RequestId
    result: Any
    error: RequestError | None

    def __init__(self, id: RequestId, result: Any = None, error: RequestError | None = None) -> None:
        super().__init__(id=id, result=result, error=error)


class Invalid(_Message):
    """A line that cannot be dispatched. ``answer`` is false for a broken notification (no id to answer)."""

    __slots__ = ("answer", "error", "id")
    id: RequestId
    error: RequestError
    answer: bool

    def __init__(self, id: RequestId, error: RequestError, answer: bool = True) -> None:
        super().__init__(id=id, error=error, answer=answer)


Message: TypeAlias = Request | Notification | Response | Invalid


def _valid_id(value: object) -> bool:
    if isinstance(value, bool):  # bool is an int subclass; JSON true is not an id
        return False
    if isinstance(value, int):
        return value in _INT64
    return value is None or isinstance(value, str)


def parse_line(line: bytes | str) -> Message:
    """Classify one line of input. Never raises."""
    decoded = _decode(line)
    return decoded if isinstance(decoded, Invalid) else parse_message(decoded)


MAX_BATCH = 1000
"""The most messages one batch may hold: a longer one is one invalid request, and nothing in it runs."""


def parse_batch(line: bytes | str) -> list[Message] | Invalid:
    """Classify one line of input that may be a batch (ACP v2: a JSON array of messages, each classified as
    :func:`parse_message` does; an entry that is not a message is an :class:`Invalid` under a null id). A
    line that is not an array is one message, in a list of one; an empty array, or one of more than
    :data:`MAX_BATCH` entries, is invalid. Never raises."""
    decoded = _decode(line)
    if isinstance(decoded, Invalid):
        return decoded
    if not isinstance(decoded, list):
        return [parse_message(decoded)]
    if not decoded:
        return Invalid(None, InvalidRequest("Invalid Request: an empty batch"))
    if len(decoded) > MAX_BATCH:  # each would be a task of its own: a line could hold millions
        return Invalid(None, InvalidRequest(f"Invalid Request: a batch of more than {MAX_BATCH} messages"))
    return [parse_message(item) for item in decoded]


def _decode(line: bytes | str) -> object:
    """The JSON value of ``line``, or the :class:`Invalid` to answer it with."""
    if line == LINE_TOO_LONG:
        return Invalid(None, InvalidRequest(f"Invalid Request: a message longer than {MAX_LINE_BYTES >> 20} MiB"))
    try:
        # Decode explicitly: json.loads(bytes) would also guess UTF-16/32, and ACP messages are UTF-8.
        text = line.decode("utf-8") if isinstance(line, bytes) else line
        obj = json.loads(text, parse_constant=_reject_constant)
        # Strict UTF-8 holds no surrogates, so only an escape can make one: "\\ud" or "\\uD" finds them all
        # (and some that are not: a pair, an escaped backslash), in one fast scan.
        if "\\ud" in text or "\\uD" in text or not isinstance(line, bytes):
            obj = _cleaned(obj)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Invalid(None, ParseError(f"Parse error: {_short(exc)}"))
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN and Infinity; JSON does not


def parse_message(obj: object) -> Message:
    """Classify a decoded JSON value. Never raises."""
    if not isinstance(obj, dict):
        kind = "a batch (array)" if isinstance(obj, list) else type(obj).__name__
        return Invalid(None, InvalidRequest(f"Invalid request: expected a JSON-RPC object, got {kind}"))
    has_id = "id" in obj
    msg_id = obj.get("id")
    if has_id and not _valid_id(msg_id):
        return Invalid(None, InvalidRequest("Invalid request: 'id' must be an integer, a string or null"))
    if obj.get("jsonrpc") != "2.0":
        return Invalid(msg_id, InvalidRequest('Invalid request: "jsonrpc" must be "2.0"'), answer=has_id)

    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str):
            return Invalid(msg_id, InvalidRequest("Invalid request: 'method' must be a string"), answer=has_id)
        params = obj.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            error = InvalidParams(f"Invalid params: {method} takes an object as 'params'")
            return Invalid(msg_id, error, answer=has_id)
        if has_id:
            return Request(msg_id, method, params)
        return Notification(method, params)

    if has_id and ("result" in obj or "error" in obj):
        if "error" in obj and obj["error"] is not None:
            return Response(msg_id, error=RequestError.from_wire(obj["error"]))
        return Response(msg_id, result=obj.get("result"))
    return Invalid(msg_id, InvalidRequest("Invalid request: neither a request, a notification nor a response"))


def join_batch(encoded: list[bytes]) -> bytes:
    """Messages :func:`encode` wrote, as one batch (ACP v2): their array, on one line."""
    return b"[" + b",".join(line[:-1] for line in encoded) + b"]\n"


def encode(message: dict[str, Any]) -> bytes:
    """One compact JSON line, newline-terminated. ``ensure_ascii`` keeps it 7-bit clean and newline-free;
    lone surrogates are sent as U+FFFD (see the module docstring)."""
    data = json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if b"\\ud" in data:  # a character beyond the BMP (written as a pair), or a lone surrogate: look closer
        cleaned = _cleaned(message)
        if cleaned is not message:
            data = json.dumps(cleaned, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return data + b"\n"


def _cleaned(obj: Any) -> Any:
    """``obj`` cleaned of lone surrogates (itself if it had none), its ``id`` kept as it was."""
    cleaned = clean(obj)
    if cleaned is not obj and isinstance(obj, dict) and "id" in obj:
        cleaned["id"] = obj["id"]
    return cleaned


def notification_frame(method: str, params: dict[str, Any], key: str) -> tuple[bytes, bytes]:
    """``head`` and ``tail`` such that ``head + value + tail`` is what :func:`encode` writes for the
    notification whose params are ``params`` plus ``key``: the value, given as its encoded JSON.

    For values already encoded (records the agent wrote itself): the caller guarantees that ``value`` is
    one valid JSON value, ASCII only (hence 7-bit clean and without line breaks, as :func:`encode`'s).
    """
    if key in params:
        raise ValueError(f"{key!r} is already in the params")
    encoded = encode(notification(method, params))
    assert encoded.endswith(b"}}\n")
    head = encoded[:-3] + (b"," if params else b"") + json.dumps(key, ensure_ascii=True).encode("ascii") + b":"
    return head, b"}}\n"


def request(msg_id: RequestId, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result_response(msg_id: RequestId, result: Any) -> dict[str, Any]:
    # ACP results are objects; never send ``null`` for an empty result.
    return {"jsonrpc": "2.0", "id": msg_id, "result": {} if result is None else result}


def error_response(msg_id: RequestId, error: RequestError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": error.to_wire()}


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."
