"""Text fit to cross a boundary: valid Unicode (:func:`clean`), bounded in size (:func:`shorten`), and
harmless to a terminal (:func:`visible`).

**Valid.** A Python ``str`` can hold surrogate code points, which have no UTF-8 form: a JSON ``\\ud83d``
escape from a client (half an emoji) decodes to one, a file name whose bytes are not UTF-8 is listed as
``\\udcff`` (``surrogateescape``), and a model stream can split a pair across two chunks. Such a string
makes ``str.encode("utf-8")`` raise wherever it goes next (the model request, a record file) and a strict
client's JSON parser reject the line, so kept in a session it poisons every later prompt. What crosses a
boundary goes through :func:`clean` first: a surrogate pair held as two code points becomes the character
it encodes, and a lone surrogate becomes U+FFFD. :class:`StreamJoiner` does it for text that arrives in
pieces, so that a pair split across two pieces is joined rather than replaced twice.

**Bounded.** :func:`shorten` cuts the long strings of a JSON value, each with a marker that says how many
characters were left out; :func:`json_size` measures a value as :func:`refagent.acp.jsonrpc.encode` writes it.

**Harmless to a terminal.** What a model, a repository or an editor wrote can hold characters a terminal
obeys rather than shows: ESC starts a sequence that moves the cursor, clears the screen, sets the window
title or writes the clipboard (OSC 52); C1 ``\\x9b`` is a one-byte CSI; ``\\r``, backspace and DEL draw over
what is already there; the bidirectional overrides reorder what is drawn. Text for a person (a tool call's
title, a permission option, a plan entry, and everything a terminal client draws) goes through
:func:`visible` or :func:`one_line` first: each such character is written as the escape Python's
``repr()`` writes for it (``\\x1b``, ``\\r``, ``\\x9b``, ``\\u202e``), so that it is seen, not obeyed. A
backslash already in the text is left as it is (paths, regexes and code must stay readable): the
visible form is for a reader, and is not meant to be decoded back.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

T = TypeVar("T")

_SURROGATE = re.compile("[\ud800-\udfff]")
_HIGH = ("\ud800", "\udbff")
_CONTROLS = [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""What :func:`visible` shows as an escape: C0, DEL, C1, and the bidirectional embeddings, overrides and
isolates ("Trojan Source", CVE-2021-42574)."""
_ESCAPED = {code: repr(chr(code))[1:-1] for code in _CONTROLS}
_ESCAPED_KEEPING_LAYOUT = {code: shown for code, shown in _ESCAPED.items() if code not in (0x09, 0x0A)}
_BLANKS = re.compile(r"(?:[ \t\n]|\r\n)+")


def has_surrogates(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """``text`` with each surrogate pair (two code points) joined into its character and each lone
    surrogate replaced by U+FFFD; ``text`` itself when it has none (the usual case, one scan)."""
    if not has_surrogates(text):
        return text
    # UTF-16 holds surrogates as code units: written out as they are, read back strictly, a pair is one
    # character again and a lone half is what UTF-16 decoding replaces.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean(value: T) -> T:
    """A JSON value (dicts, lists, strings, scalars) with :func:`clean_text` applied to every string, keys
    included; ``value`` itself, not a copy, when nothing in it needed cleaning."""
    result: Any = value
    if isinstance(value, str):
        result = clean_text(value)
    elif isinstance(value, dict):
        items = [(clean(k), clean(v)) for k, v in value.items()]
        if any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            result = dict(items)
    elif isinstance(value, list):
        cleaned = [clean(item) for item in value]
        if any(new is not old for new, old in zip(cleaned, value, strict=True)):
            result = cleaned
    return result  # type: ignore[no-any-return]


class StreamJoiner:
    """Cleans text that arrives in pieces (a model's stream): a high surrogate that ends a piece waits
    for the next one, which may start with its other half. :meth:`flush` at the end of the stream."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """The clean text of ``piece`` that can be given out now ("" when all of it waits)."""
        text = self._held + piece if self._held else piece
        self._held = ""
        if text and _HIGH[0] <= text[-1] <= _HIGH[1]:
            text, self._held = text[:-1], text[-1]
        return clean_text(text)

    def flush(self) -> str:
        """What still waits, cleaned: U+FFFD for a high surrogate whose other half never came, else ""."""
        held, self._held = self._held, ""
        return clean_text(held)


def json_size(value: Any) -> int:
    """How many bytes ``value`` takes as compact ASCII JSON (as :func:`refagent.acp.jsonrpc.encode` writes it)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=True))


def text_length(value: Any) -> int:
    """The characters of all the strings in a JSON value (keys included): a lower bound of its
    :func:`json_size`, found without encoding it."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + text_length(v) for k, v in value.items() if isinstance(k, str))
    if isinstance(value, list):
        return sum(text_length(item) for item in value)
    return 0


def cut(text: str, keep: int, what: str = "characters") -> str:
    """``text`` if it has at most ``keep`` characters, else its first ``keep`` and a marker saying how many
    more there were (a surrogate pair is not cut in two)."""
    if len(text) <= keep:
        return text
    if keep > 0 and _HIGH[0] <= text[keep - 1] <= _HIGH[1]:
        keep -= 1
    return f"{text[:keep]}… [{len(text) - keep:,} more {what} not shown]"


def shorten(value: T, keep: int) -> T:
    """``value`` (JSON) with each string longer than ``keep`` characters :func:`cut` to ``keep``; ``value``
    itself when none is. Keys are left alone. The result can still be large (many strings, many values):
    a caller with a hard limit checks :func:`json_size` after."""
    result: Any = value
    if isinstance(value, str):
        result = cut(value, keep)
    elif isinstance(value, dict):
        items = {k: shorten(v, keep) for k, v in value.items()}
        if any(items[k] is not v for k, v in value.items()):
            result = items
    elif isinstance(value, list):
        shortened = [shorten(item, keep) for item in value]
        if any(new is not old for new, old in zip(shortened, value, strict=True)):
            result = shortened
    return result  # type: ignore[no-any-return]


def visible(text: str, *, layout: bool = False) -> str:
    """``text`` with every character a terminal would obey written as its escape (see the module
    docstring): ``"\\x1b[2J"`` for ESC ``[2J``, ``"\\r"`` for a carriage return. ``layout``: ``text`` is
    lines (a message, a diff, a command's output), whose line breaks and tabs stay what they are, and
    ``\\r\\n`` is a line break (how a terminal's output ends its lines); a lone ``\\r`` is still shown, so it
    cannot draw over a line."""
    if layout:
        if "\r\n" in text:
            text = text.replace("\r\n", "\n")
        return text.translate(_ESCAPED_KEEPING_LAYOUT)
    return text.translate(_ESCAPED)


def one_line(text: str) -> str:
    """``text`` as one line for a person: each run of spaces, tabs and line breaks one space, none at
    either end, and every other control character :func:`visible` (a lone ``\\r`` included)."""
    return visible(_BLANKS.sub(" ", text).strip(" "))


def visible_strings(value: T) -> T:
    """A JSON value with :func:`visible` (``layout``: line breaks and tabs kept) applied to each string in
    it, keys left alone: what a terminal client draws from a message it was sent."""
    result: Any = value
    if isinstance(value, str):
        result = visible(value, layout=True)
    elif isinstance(value, dict):
        result = {k: visible_strings(v) for k, v in value.items()}
    elif isinstance(value, list):
        result = [visible_strings(item) for item in value]
    return result  # type: ignore[no-any-return]
