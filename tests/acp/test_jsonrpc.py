"""JSON-RPC framing (refagent.acp.jsonrpc): classifying lines and encoding single-line messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refagent.acp import jsonrpc
from refagent.acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    RequestError,
)
from refagent.acp.jsonrpc import Invalid, Notification, Request, Response, encode, parse_line
from refagent.acp.text import clean_text


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# -- classification -------------------------------------------------------------------------------


def test_request() -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": "/x"}}))
    assert msg == Request(7, "session/new", {"cwd": "/x"})


@pytest.mark.parametrize("msg_id", [0, -1, 2**63 - 1, -(2**63), "", "abc", "7", None])
def test_request_ids_echoed_exactly(msg_id: Any) -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "id": msg_id, "method": "m"}))
    assert isinstance(msg, Request)
    assert msg.id == msg_id
    assert type(msg.id) is type(msg_id)


def test_missing_or_null_params_read_as_empty_object() -> None:
    assert parse_line(b'{"jsonrpc":"2.0","id":1,"method":"m"}') == Request(1, "m", {})
    assert parse_line(b'{"jsonrpc":"2.0","id":1,"method":"m","params":null}') == Request(1, "m", {})
    assert parse_line(b'{"jsonrpc":"2.0","method":"n"}') == Notification("n", {})


def test_notification() -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}))
    assert msg == Notification("session/cancel", {"sessionId": "s"})


def test_str_input_is_accepted_too() -> None:
    assert parse_line('{"jsonrpc":"2.0","method":"n"}') == Notification("n", {})


def test_result_response() -> None:
    assert parse_line(b'{"jsonrpc":"2.0","id":3,"result":{"a":1}}') == Response(3, {"a": 1})
    # a null result is a (successful) response too, e.g. Toad's answer to fs/write_text_file
    msg = parse_line(b'{"jsonrpc":"2.0","id":"x","result":null}')
    assert msg == Response("x", None)


def test_error_response() -> None:
    msg = parse_line(b'{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"nope","data":{"p":1}}}')
    assert isinstance(msg, Response)
    assert msg.id == 3
    assert isinstance(msg.error, RequestError)
    assert (msg.error.code, msg.error.message, msg.error.data) == (-32002, "nope", {"p": 1})


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ({"code": True, "message": "m"}, -32603, "m"),  # a bool is not an error code
        ({"code": "x", "message": 5}, -32603, "error without a message"),
        ("boom", -32603, "malformed error object: 'boom'"),
        ({}, -32603, "error without a message"),
    ],
)
def test_malformed_error_objects_are_tolerated(error: Any, code: int, message: str) -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "id": 1, "error": error}))
    assert isinstance(msg, Response)
    assert msg.error is not None
    assert (msg.error.code, msg.error.message) == (code, message)
    assert type(msg.error.code) is int


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"not json",
        b'{"jsonrpc":"2.0","id":1,"method":"m"',
        b"\xff\xfe{}",  # not UTF-8
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":NaN}}',  # Python-only JSON
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":-Infinity}}',
        '{"jsonrpc":"2.0","id":1,"method":"initialize"}'.encode("utf-16-le"),  # json.loads would guess it
        b"[" * 100_000,  # too deep to parse: still an answer, not a crash
        b'"\xed\xa0\x80"',  # a UTF-8-encoded surrogate is not UTF-8
    ],
)
def test_not_json_is_a_parse_error_under_null_id(raw: bytes) -> None:
    msg = parse_line(raw)
    assert isinstance(msg, Invalid)
    assert msg.error.code == PARSE_ERROR
    assert msg.id is None
    assert msg.answer
    assert len(msg.error.message) < 300  # concise, even for huge input


@pytest.mark.parametrize("value", [[], [{"jsonrpc": "2.0", "id": 1, "method": "m"}], 1, "s", None, True, 1.5])
def test_non_objects_and_batches_are_invalid_requests_under_null_id(value: Any) -> None:
    msg = parse_line(line(value))
    assert isinstance(msg, Invalid)
    assert msg.error.code == INVALID_REQUEST
    assert msg.id is None
    assert msg.answer


def test_batch_is_named_in_the_message() -> None:
    msg = parse_line(b'[{"jsonrpc":"2.0","method":"n"}]')
    assert isinstance(msg, Invalid)
    assert "batch" in msg.error.message


def test_a_v2_batch_is_its_messages_each_classified() -> None:
    batch = jsonrpc.parse_batch(
        line([{"jsonrpc": "2.0", "id": "a", "method": "m"}, {"jsonrpc": "2.0", "method": "n"}, 7])
    )
    assert isinstance(batch, list)
    request, notification, invalid = batch
    assert isinstance(request, Request)
    assert request.id == "a"
    assert isinstance(notification, Notification)
    assert isinstance(invalid, Invalid)
    assert (invalid.id, invalid.error.code, invalid.answer) == (None, INVALID_REQUEST, True)
    empty = jsonrpc.parse_batch(b"[]")
    assert isinstance(empty, Invalid)
    assert (empty.id, empty.error.code) == (None, INVALID_REQUEST)
    broken = jsonrpc.parse_batch(b'[{"jsonrpc": "2.0", "id": 1, "method": ')
    assert isinstance(broken, Invalid)
    assert broken.error.code == PARSE_ERROR
    (alone,) = jsonrpc.parse_batch(line({"jsonrpc": "2.0", "method": "n"}))  # not an array: one message
    assert isinstance(alone, Notification)
    full = jsonrpc.parse_batch(line([{"jsonrpc": "2.0", "method": "n"}] * jsonrpc.MAX_BATCH))
    assert isinstance(full, list)
    assert len(full) == jsonrpc.MAX_BATCH
    flood = jsonrpc.parse_batch(line([{"jsonrpc": "2.0", "id": 1, "method": "m"}] * (jsonrpc.MAX_BATCH + 1)))
    assert isinstance(flood, Invalid)  # one error for the lot: nothing in it runs
    assert (flood.id, flood.error.code) == (None, INVALID_REQUEST)
    assert "more than 1000" in flood.error.message


def test_a_batch_of_answers_is_one_line() -> None:
    answers = [encode(jsonrpc.result_response(1, {})), encode(jsonrpc.result_response("b", {"x": "\u00e9"}))]
    data = jsonrpc.join_batch(answers)
    assert data.count(b"\n") == 1
    assert data.endswith(b"\n")
    assert json.loads(data) == [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": "b", "result": {"x": "\u00e9"}},
    ]


@pytest.mark.parametrize("version", ["1.0", 2.0, 2, None, "2.0 "])
def test_bad_jsonrpc_version_is_answered_under_its_id(version: Any) -> None:
    msg = parse_line(line({"jsonrpc": version, "id": 4, "method": "m"}))
    assert isinstance(msg, Invalid)
    assert msg.error.code == INVALID_REQUEST
    assert msg.id == 4
    assert msg.answer


def test_missing_jsonrpc_member() -> None:
    msg = parse_line(b'{"id":4,"method":"m"}')
    assert isinstance(msg, Invalid)
    assert (msg.error.code, msg.id, msg.answer) == (INVALID_REQUEST, 4, True)


@pytest.mark.parametrize("msg_id", [True, False, 1.0, 1.5, {"a": 1}, [1], 2**63, -(2**63) - 1])
def test_bad_id_types_are_invalid_requests_under_null_id(msg_id: Any) -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "id": msg_id, "method": "m"}))
    assert isinstance(msg, Invalid)
    assert msg.error.code == INVALID_REQUEST
    assert msg.id is None
    assert msg.answer


@pytest.mark.parametrize("params", [[], [1, 2], "x", 3, True])
def test_non_object_params_are_invalid_params(params: Any) -> None:
    msg = parse_line(line({"jsonrpc": "2.0", "id": "r1", "method": "session/new", "params": params}))
    assert isinstance(msg, Invalid)
    assert msg.error.code == INVALID_PARAMS
    assert msg.id == "r1"
    assert msg.answer
    assert "session/new" in msg.error.message


@pytest.mark.parametrize(
    "obj",
    [
        {"jsonrpc": "2.0", "method": "n", "params": [1]},  # non-object params
        {"jsonrpc": "1.0", "method": "n"},  # wrong version
        {"method": "n"},  # no version
        {"jsonrpc": "2.0", "method": 5},  # method not a string
        {"jsonrpc": "2.0", "method": None, "params": {}},
    ],
)
def test_broken_notifications_are_never_answered(obj: dict[str, Any]) -> None:
    msg = parse_line(line(obj))
    assert isinstance(msg, Invalid)
    assert msg.answer is False


def test_method_must_be_a_string() -> None:
    msg = parse_line(b'{"jsonrpc":"2.0","id":2,"method":["m"]}')
    assert isinstance(msg, Invalid)
    assert (msg.error.code, msg.id, msg.answer) == (INVALID_REQUEST, 2, True)


@pytest.mark.parametrize("obj", [{"jsonrpc": "2.0"}, {"jsonrpc": "2.0", "id": 9}, {"jsonrpc": "2.0", "result": {}}])
def test_neither_request_nor_response(obj: dict[str, Any]) -> None:
    msg = parse_line(line(obj))
    assert isinstance(msg, Invalid)
    assert msg.error.code == INVALID_REQUEST
    assert msg.id == obj.get("id")


def test_parse_never_raises_on_odd_input() -> None:
    for raw in [b"", b"   ", b"\x00", b"\n", b'{"jsonrpc":"2.0","id":1e400,"method":"m"}', b"9" * 5000]:
        assert isinstance(parse_line(raw), Invalid)


# -- encoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "two\nlines\r\nand\u2028separators\u2029",
        "héllo wörld ✓ 日本語 🎉",
        "lone \ud800 high and \udfff low surrogates",
        "\x00\x1f\x7f control",
        "",
    ],
)
def test_encode_is_one_compact_ascii_line(text: str) -> None:
    data = encode(jsonrpc.notification("session/update", {"text": text, "nested": {"list": [text, 1, None]}}))
    assert data.endswith(b"\n")
    assert data.count(b"\n") == 1
    assert b"\r" not in data
    assert data.isascii()
    assert b": " not in data
    assert b", " not in data
    assert json.loads(data)["params"]["text"] == clean_text(text)  # lone surrogates: U+FFFD


def test_encode_sends_lone_surrogates_as_replacement_and_keeps_pairs() -> None:
    # Two halves held as two code points (a pair split across chunks, joined) are one character.
    message = jsonrpc.request("id\ud83d", "m", {"a": "x\ud83dy", "b": ["\udcff"], "c": "\ud83d\ude00 🎉"})
    decoded = json.loads(encode(message))
    assert decoded["params"] == {"a": "x\ufffdy", "b": ["\ufffd"], "c": "😀 🎉"}
    assert decoded["id"] == "id\ud83d"  # echoed as it came: the peer matches responses by it
    plain = jsonrpc.notification("m", {"emoji": "🎉"})
    assert encode(plain) == json.dumps(plain, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize("escape", ["\\ud83d", "\\uD83D", "\\udcff", "\\ude00"])
def test_parse_replaces_lone_surrogate_escapes(escape: str) -> None:
    raw = '{"jsonrpc":"2.0","id":"i%s","method":"session/prompt","params":{"t":"a%sb","l":["%s"]}}' % ((escape,) * 3)
    msg = parse_line(raw.encode())
    assert msg == Request("i" + json.loads(f'"{escape}"'), "session/prompt", {"t": "a\ufffdb", "l": ["\ufffd"]})


def test_parse_keeps_escaped_pairs_and_backslashes() -> None:
    raw = rb'{"jsonrpc":"2.0","method":"m","params":{"t":"\ud83d\ude00","u":"\\ud83d"}}'
    assert parse_line(raw) == Notification("m", {"t": "😀", "u": "\\ud83d"})


def test_encoded_line_parses_back() -> None:
    data = encode(jsonrpc.request(5, "fs/read_text_file", {"path": "/a\nb", "line": 1}))
    assert parse_line(data.rstrip(b"\n")) == Request(5, "fs/read_text_file", {"path": "/a\nb", "line": 1})


def test_response_builders() -> None:
    assert jsonrpc.result_response(1, None) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert jsonrpc.result_response("a", {"x": 1}) == {"jsonrpc": "2.0", "id": "a", "result": {"x": 1}}
    error = jsonrpc.error_response(None, RequestError("bad", {"why": 1}, code=-32600))
    assert error == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "bad", "data": {"why": 1}}}
    assert "data" not in jsonrpc.error_response(1, RequestError("x"))["error"]
