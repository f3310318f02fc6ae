"""Text as the tools read and show it: lines and line endings, ``cat -n`` numbering with long lines cut
(:data:`MAX_LINE_CHARS`), and the ACP tool-call content built from them (diffs, text, locations).

Contract: pure functions of strings, shared by the tool modules. Lines are split on ``\\n`` with a final
``\\r`` dropped; a file is CRLF only when every line ends so (mixed files are edited as they are).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from refagent.acp.text import visible
from refagent.acp.types import DiffContent, ToolCallContent, ToolCallLocation
from refagent.sandbox.disk import read as fs_read

MAX_LINE_CHARS = 2000
"""Longer lines are cut (minified code, data): one line must not flood the model's context."""


def diff(path: str, old: str | None, new: str) -> DiffContent:
    """ACP ``diff`` content: ``old`` None for a new file."""
    return {"type": "diff", "path": path, "oldText": old, "newText": new}


def text_content(value: str) -> ToolCallContent:
    return {"type": "content", "content": {"type": "text", "text": value}}


def location(path: str, line: int | None = None) -> ToolCallLocation:
    return {"path": path, "line": line} if line is not None else {"path": path}


def split_lines(text: str) -> list[str]:
    """Lines without their endings; a final newline does not start an empty line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def is_crlf(text: str) -> bool:
    """Every line ends with CRLF (mixed files are edited as they are)."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf == text.count("\n")


def with_endings(new: str, old: str | None) -> str:
    """``new`` with CRLF line endings if ``old`` used them throughout (models write ``\\n``)."""
    if old is not None and is_crlf(old) and not is_crlf(new):
        return new.replace("\r\n", "\n").replace("\n", "\r\n")
    return new


def cut_line(line: str) -> str:
    """``line``, or its start and a marker, in at most :data:`MAX_LINE_CHARS` characters (the local disk's
    ``read_lines`` cuts the same way)."""
    return line if len(line) <= MAX_LINE_CHARS else fs_read.cut_line(line, len(line), MAX_LINE_CHARS)


def numbered(lines: Sequence[str], first: int, *, cut: bool = True) -> str:
    """``cat -n`` style: the 1-based line number right-aligned in 6 columns, a tab, the line (cut to
    :data:`MAX_LINE_CHARS` unless ``cut`` is false: a page's lines come cut already)."""
    return "\n".join(f"{number:6}\t{cut_line(line) if cut else line}" for number, line in enumerate(lines, first))


def fenced(text: str, language: str = "") -> str:
    """A Markdown code block whose fence is longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def for_a_person(content: list[ToolCallContent]) -> list[ToolCallContent]:
    """A call's preview as the user is shown it (and asked about it): text with every character a
    terminal or a renderer would obey rather than show (ESC, a carriage return, the bidirectional
    overrides that reorder what is drawn) written as its escape (:func:`~refagent.acp.text.visible`), so a
    command, a path or a reason cannot read as something else; a diff as it is (the editor shows the
    file's own text), followed by a line that names the lines holding such characters, so that none hides
    in a change the user approves."""
    shown: list[ToolCallContent] = []
    for item in content:
        fields: dict[str, Any] = dict(item)
        inner = fields.get("content")
        if fields.get("type") == "content" and isinstance(inner, dict) and isinstance(inner.get("text"), str):
            item = text_content(visible(inner["text"], layout=True))
        shown.append(item)
        new = fields.get("newText")
        if fields.get("type") == "diff" and isinstance(new, str):
            lines = split_lines(new)
            hidden = [n for n, line in enumerate(lines, 1) if visible(line, layout=True) != line]
            if hidden:
                numbers = ", ".join(map(str, hidden[:10])) + (" ..." if len(hidden) > 10 else "")
                samples = "; ".join(visible(lines[n - 1], layout=True)[:200] for n in hidden[:3])
                shown.append(
                    text_content(
                        f"{visible(str(fields.get('path')))}: line {numbers} of the new text holds characters "
                        f"that a terminal obeys or that reorder the text as it is drawn, shown here as escapes: "
                        f"{samples}"
                    )
                )
    return shown
