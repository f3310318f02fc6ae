"""Request bodies whose cost does not grow with the conversation: each message is encoded to JSON once.

A session's conversation only grows at its end: the messages already sent are sent again, unchanged, in
every later request of the tool loop. :class:`EncodedMessages` keeps the last request's messages and each
one's JSON text, so that the next request's body is the texts joined, and only the messages after the
first that is not the same object at the same place are encoded. The conversation never changes a message
in place once appended (it replaces messages: compaction, ``/undo``, ``/rewind``), which is what makes
identity a safe test. It holds one request's messages.

:func:`body` joins the pieces into the JSON object of a request. Encoding is ``ensure_ascii=False``: a
lone surrogate left in a message raises :class:`UnicodeEncodeError` when the body is encoded to bytes,
which the adapters answer by sending the request cleaned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["EncodedMessages", "body", "dumps"]


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept (as the ``openai`` package encodes bodies)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class EncodedMessages:
    """Each message's JSON after ``convert`` (an adapter's form of a message; one converter per instance),
    kept from one request to the next. A converter that makes several items of one message (the Responses
    API's reasoning, text and calls) returns them as a list, with ``spread``: the message's text is then
    its items' JSON, comma-separated, to go into the request's array among the others' (empty for none)."""

    def __init__(self, convert: Callable[[dict[str, Any]], Any], *, spread: bool = False) -> None:
        self._convert = convert
        self._spread = spread
        self._messages: list[dict[str, Any]] = []
        self._texts: list[str] = []

    def encode(self, messages: Iterable[dict[str, Any]]) -> list[str]:
        """The JSON of each of ``messages``, in order: those the last call had at the same place (the same
        objects) reused, the others encoded. A conversation that grew at its end costs a pass comparing
        identities and the new messages' encoding; one changed earlier (compacted) is encoded from there."""
        messages = list(messages)
        old = self._messages
        same, limit = 0, min(len(old), len(messages))
        while same < limit and old[same] is messages[same]:
            same += 1
        self._texts = [*self._texts[:same], *(self._encode(m) for m in messages[same:])]
        self._messages = messages
        return self._texts

    def _encode(self, message: dict[str, Any]) -> str:
        value = self._convert(message)
        return dumps(value)[1:-1] if self._spread and isinstance(value, list) else dumps(value)


def body(fields: Mapping[str, Any], lists: Mapping[str, list[str]]) -> bytes:
    """A request body: the JSON object of ``fields`` and, for each of ``lists``, an array of the given
    JSON texts (empty ones left out), encoded to UTF-8 (raises :class:`UnicodeEncodeError` for a lone
    surrogate)."""
    parts = [f"{dumps(key)}:{dumps(value)}" for key, value in fields.items()]
    parts += [f"{dumps(key)}:[{','.join(text for text in texts if text)}]" for key, texts in lists.items()]
    return ("{" + ",".join(parts) + "}").encode("utf-8")
