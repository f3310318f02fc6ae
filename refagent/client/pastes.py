"""Long pastes in the chat's input: a paste of more than :data:`COLLAPSE_LINES` lines (or
:data:`COLLAPSE_CHARS` characters) shows as ``[Pasted text #1 +400 lines]`` in the line being written, and is
sent whole: :meth:`Pastes.expand` puts each placeholder's text back when the line is sent. The chat draws a
long user message collapsed too (:func:`collapsed`), in a replay as in the thread.
"""

from __future__ import annotations

import re

COLLAPSE_LINES = 10
COLLAPSE_CHARS = 2_000
SHOWN_LINES = 3
"""What a collapsed message shows of itself before ``[+N lines]``."""
_PLACEHOLDER = re.compile(r"\[Pasted text #(\d+) \+\d+ lines\]")


class Pastes:
    """The long pastes of one chat, by number (kept for the chat's life: a line recalled from the history
    within it is sent whole too)."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}

    def add(self, text: str) -> str:
        """What a paste of ``text`` puts in the line: itself (line endings made ``\\n``), or a placeholder."""
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines <= COLLAPSE_LINES and len(text) <= COLLAPSE_CHARS:
            return text
        number = len(self._texts) + 1
        self._texts[number] = text
        return f"[Pasted text #{number} +{lines} lines]"

    def expand(self, line: str) -> Typed:
        """``line`` with each placeholder of this chat's pastes replaced by the text pasted (remembering
        ``line``, what was typed: :class:`Typed`)."""

        def whole(match: re.Match[str]) -> str:
            return self._texts.get(int(match.group(1)), match.group(0))

        return Typed(_PLACEHOLDER.sub(whole, line), line)


class Typed(str):
    """A line to send, with :attr:`typed`: the part of it the user typed and saw (the pastes it holds
    collapsed). Mentions count there only: a ``@path`` deep in a pasted log is text."""

    typed: str

    def __new__(cls, text: str, typed: str) -> Typed:
        line = super().__new__(cls, text)
        line.typed = typed
        return line


def typed(line: str) -> str:
    """What the user typed of ``line``: :attr:`Typed.typed`, or the whole line (read as plain lines)."""
    return line.typed if isinstance(line, Typed) else line


def collapsed(text: str) -> str:
    """A user message as the chat draws it: whole, or its first :data:`SHOWN_LINES` lines and
    ``[+N lines]`` when it is longer than :data:`COLLAPSE_LINES` lines."""
    lines = text.split("\n")
    if len(lines) <= COLLAPSE_LINES:
        return text
    return "\n".join([*lines[:SHOWN_LINES], f"[+{len(lines) - SHOWN_LINES} lines]"])
