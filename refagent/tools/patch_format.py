"""The unified diff format of ``apply_patch``: parsing it (:func:`parse_patch`, with :mod:`unidiff`), the
paths a file's part names (:func:`file_paths`), and applying a file's hunks to its text in memory
(:func:`apply_hunks`).

Contract: pure functions; nothing here reads or writes a file. A patch that cannot be parsed, and a hunk
that does not apply, are a :class:`~refagent.errors.ToolError` written for the model (for a hunk: the
expected lines next to the actual ones).

``git diff`` output (``a/`` and ``b/`` prefixes, ``/dev/null`` for new and deleted files, renames) is
accepted. Every hunk must apply exactly: its context and removed lines must equal the file's lines. Like
``patch``, a hunk is looked for near its stated line when the file has shifted (the closest position
wins), but there is no fuzz. Lines are compared without their endings, so a CRLF file takes a patch
written with ``\\n``; added lines get the file's line ending. ``\\ No newline at end of file`` markers
are honoured.
"""

from __future__ import annotations

from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk, PatchedFile, PatchSet

from refagent.errors import ToolError
from refagent.tools.text import is_crlf, numbered

DEV_NULL = "/dev/null"

Line = tuple[str, str]
"""A line's text and its ending (``\\n``, ``\\r\\n`` or ``""`` for a last line without one)."""


def parse_patch(text: str) -> PatchSet:
    """The patch's file parts; ToolError for another format, a patch that does not parse, or no files."""
    if text.lstrip().startswith("*** Begin Patch"):
        raise ToolError(
            "apply_patch takes a unified diff (`--- a/file`, `+++ b/file`, `@@ -l,n +l,n @@` hunks), "
            "not the `*** Begin Patch` format."
        )
    if not text.endswith("\n"):
        text += "\n"  # a model's last line often lacks it; unidiff needs it
    try:
        patch = PatchSet(text)
    except UnidiffParseError as exc:
        raise ToolError(
            f"The patch could not be parsed: {exc}. Send a unified diff; the line counts in each "
            "`@@ -start,count +start,count @@` header must match the hunk's lines."
        ) from None
    if not patch:
        raise ToolError("The patch has no file changes (expected `--- a/file`, `+++ b/file` and `@@` hunks).")
    return patch


def header_paths(text: str) -> list[str]:
    """Target paths from ``+++`` headers, for a title before parsing."""
    paths = []
    for line in text.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            if name == DEV_NULL:
                continue
            paths.append(name[2:] if name.startswith("b/") else name)
    return paths


def file_paths(patched: PatchedFile) -> tuple[str | None, str | None]:
    """Source and target paths without git's ``a/`` ``b/`` prefixes (None for ``/dev/null``)."""
    source, target = patched.source_file, patched.target_file
    git_style = patched.patch_info is not None and any(
        str(line).startswith("diff --git ") for line in patched.patch_info
    )
    source_git = source.startswith("a/") or source == DEV_NULL
    target_git = target.startswith("b/") or target == DEV_NULL
    strip = git_style or (source_git and target_git and not (source == DEV_NULL and target == DEV_NULL))

    def clean(name: str, prefix: str) -> str | None:
        if name == DEV_NULL:
            return None
        return name[2:] if strip and name.startswith(prefix) else name

    return clean(source, "a/"), clean(target, "b/")


def apply_hunks(display: str, patched: PatchedFile, text: str) -> tuple[str, int]:
    """``text`` with every hunk applied, and the first changed line; ToolError if a hunk does not fit."""
    lines = _lines(text)
    eol = "\r\n" if is_crlf(text) else "\n"
    first_line = 1
    floor = 0  # hunks apply in order and never overlap: the next one starts after the previous one
    drift = 0  # how far the file has moved from the hunks' stated lines (inserted lines, shifted code)
    for number, hunk in enumerate(patched, 1):
        expected = [_text(line.value) for line in hunk if line.line_type in (" ", "-")]
        # "-5,0" means "after line 5": an empty source range names the line before it.
        nominal = hunk.source_start - 1 if expected else hunk.source_start
        at = _locate(lines, expected, nominal + drift, floor)
        if at is None:
            raise ToolError(_rejection(display, number, hunk, lines, expected, nominal + drift))
        replacement = _replacement(hunk, lines[at : at + len(expected)], eol)
        lines[at : at + len(expected)] = replacement
        if number == 1:
            first_line = at + 1
        drift = at - nominal + len(replacement) - len(expected)
        floor = at + len(replacement)
    return "".join(text + end for text, end in lines), first_line


def _lines(text: str) -> list[Line]:
    parts = text.split("\n")
    lines: list[Line] = [(p[:-1], "\r\n") if p.endswith("\r") else (p, "\n") for p in parts[:-1]]
    if parts[-1]:
        lines.append((parts[-1], ""))
    return lines


def _text(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def _locate(lines: list[Line], expected: list[str], stated: int, floor: int) -> int | None:
    """Where ``expected`` matches ``lines`` at or after ``floor``: at ``stated`` if it does, else the
    closest position (the earlier one on a tie, like ``patch``)."""
    size = len(expected)
    last = len(lines) - size
    if last < floor:
        return None
    if not expected:  # a pure insertion has nothing to match: trust the stated line
        return min(max(stated, floor), len(lines))
    stated = min(max(stated, floor), last)
    for distance in range(max(stated - floor, last - stated) + 1):
        for at in (stated - distance, stated + distance) if distance else (stated,):
            if floor <= at <= last and all(lines[at + i][0] == expected[i] for i in range(size)):
                return at
    return None


def _replacement(hunk: Hunk, old: list[Line], eol: str) -> list[Line]:
    """The hunk's target lines; context lines keep the file's endings, added lines get ``eol``."""
    result: list[Line] = []
    old_index = 0
    previous = " "
    for line in hunk:
        kind = line.line_type
        if kind == " ":
            result.append(old[old_index])
            old_index += 1
        elif kind == "-":
            old_index += 1
        elif kind == "+":
            result.append((_text(line.value), eol))
        elif kind == "\\" and previous in (" ", "+") and result:
            # "\ No newline at end of file" after a context or added line: the new text ends there.
            result[-1] = (result[-1][0], "")
        previous = kind
    return result


def _rejection(display: str, number: int, hunk: Hunk, lines: list[Line], expected: list[str], stated: int) -> str:
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    start = min(max(0, stated), max(0, len(lines) - 1))
    actual = [text for text, _ in lines[start : start + max(1, len(expected))]]
    shown_expected = "\n".join(expected) if expected else "(nothing)"
    shown_actual = numbered(actual, start + 1) if actual else "(the file has no lines there)"
    return (
        f"Hunk {number} ({header}) of {display} does not apply: its context and removed lines are not in "
        f"the file. Nothing was changed.\nExpected (the hunk's context and removed lines):\n{shown_expected}\n"
        f"Actual (the file from line {start + 1}, line numbers added):\n{shown_actual}\n"
        "Read the file again and make the patch from its current text, or use edit_file."
    )
