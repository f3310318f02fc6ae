"""Request bodies built from each message's JSON, encoded once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refagent.llm.wire_json import EncodedMessages, body


def test_only_new_messages_are_encoded_and_an_equal_copy_is_not_trusted() -> None:
    converted: list[str] = []

    def convert(message: dict[str, Any]) -> dict[str, Any]:
        converted.append(message["content"])
        return {"role": message["role"], "text": message["content"]}

    first, second = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    encoded = EncodedMessages(convert)
    assert encoded.encode([first]) == ['{"role":"user","text":"a"}']
    assert encoded.encode([first, second]) == ['{"role":"user","text":"a"}', '{"role":"assistant","text":"b"}']
    assert converted == ["a", "b"]  # the first message once
    encoded.encode([dict(first), second])  # an equal copy (a replaced message), and what follows, again
    assert converted == ["a", "b", "a", "b"]
    third = {"role": "user", "content": "c"}
    encoded.encode([second, third])  # the conversation changed from its start (compacted)
    assert converted == ["a", "b", "a", "b", "b", "c"]


def test_a_body_is_the_json_of_its_fields_and_lists() -> None:
    data = body({"model": "m", "stream": True}, {"messages": ['{"a":1}', '"é"'], "tools": []})
    assert json.loads(data) == {"model": "m", "stream": True, "messages": [{"a": 1}, "é"], "tools": []}
    assert "é".encode() in data  # not escaped


def test_a_lone_surrogate_fails_when_the_body_is_encoded() -> None:
    texts = EncodedMessages(lambda m: m).encode([{"content": "\ud83d"}])
    with pytest.raises(UnicodeEncodeError):
        body({}, {"messages": texts})
