"""The pure-Python engine: :func:`python_grep` and :func:`python_files`, the same inputs and results as
:mod:`~refagent.sandbox.search.ripgrep`'s, for when ``rg`` is missing, rejects the pattern, or must not
walk the tree.

It walks with :mod:`~refagent.sandbox.search.walk` and matches with Python's ``re``, translating the
Rust-only syntax models use most (:func:`python_regex`). ``re`` backtracks, holding the GIL: a pattern
such as ``(a+)+$`` takes exponential time. An untrusted pattern therefore runs through
:func:`python_grep_in_process`: the engine in an isolated child process (:func:`grep_for_child`),
within :data:`PYTHON_GREP_MEMORY` of address space, killed after :data:`PYTHON_GREP_SECONDS` or when
the caller is cancelled; at the deadline the model is told (:class:`~refagent.errors.ToolError`) to
simplify the pattern.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from refagent.child import ChildFailed, Overran, run_in_child
from refagent.errors import ToolError
from refagent.sandbox.seams import Hits, Query
from refagent.sandbox.search.limits import HARD_LIMIT, MAX_GREP_LINE_CHARS
from refagent.sandbox.search.walk import one_file, read_file, walk, walk_entries

log = logging.getLogger(__name__)

PYTHON_GREP_SECONDS = 10.0
"""The Python engine's time limit. With ripgrep at hand, that engine runs only the patterns ripgrep
rejects (look-around, back-references); Python searches a typical repository in well under a second,
so past this a pattern is backtracking catastrophically (or the tree is too big for this engine), and
the model is better told so than kept waiting."""
PYTHON_GREP_MEMORY = 2 << 30
"""The Python engine's address-space limit (it reads each file whole): a huge file is skipped there."""


_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _decode(data: bytes) -> str | None:
    """The text ripgrep would search (BOM-sniffed as ``--encoding auto`` does), or None for binary."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, "replace")
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def python_regex(pattern: str, literal: bool, case_insensitive: bool) -> re.Pattern[str]:
    """Compile for Python's ``re``, translating the Rust-only syntax models use most."""
    flags = re.IGNORECASE if case_insensitive else 0
    if literal:
        return re.compile(re.escape(pattern), flags)
    translated = re.sub(r"\\\\|\\z|\(\?<(?![=!])", _rust_to_python, pattern)
    try:
        return re.compile(translated, flags)
    except re.error as exc:
        raise ToolError(
            f"Invalid regular expression {pattern!r}: {exc}. Escape special characters such as ( [ {{ . * + ? "
            "with a backslash, or set literal to true to search for the text as it is."
        ) from None


def _rust_to_python(found: re.Match[str]) -> str:
    return {"\\\\": "\\\\", "\\z": "\\Z", "(?<": "(?P<"}[found.group(0)]


def python_grep(
    query: Query, directory: str, target: str, stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> Hits:
    """The fallback engine: same inputs and results as :func:`~refagent.sandbox.search.ripgrep.rg_grep`.
    It backtracks: run it through :func:`python_grep_in_process` on anything but trusted patterns."""
    regex = python_regex(query.pattern, query.literal, query.case_insensitive)
    hits = Hits()
    if target != ".":
        items: Iterator[tuple[str, int, str]] = one_file(directory, target)
    else:
        items = walk_entries(directory, query.globs, stop, confine)
    for relative, dir_fd, name in items:
        if stop is not None and stop.is_set():
            break
        data = read_file(dir_fd, name)
        text = None if data is None else _decode(data)
        if text is None:
            continue
        found = _search_text(regex, text, query)
        if found is None:
            continue
        count, lines = found
        hits.counts[relative] = count
        hits.matches += count
        if lines:
            hits.lines[relative] = lines
        if hits.matches > HARD_LIMIT or len(hits.counts) > HARD_LIMIT:
            hits.complete = False
            break
    return hits


def _search_text(regex: re.Pattern[str], text: str, query: Query) -> tuple[int, list[tuple[int, bool, str]]] | None:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    search = regex.search
    matched = [i for i, line in enumerate(lines) if search(line[:-1] if line.endswith("\r") else line)]
    if not matched:
        return None
    if query.mode != "content":
        return len(matched), []
    keep: dict[int, bool] = {}
    for index in matched:
        for near in range(max(0, index - query.context), min(len(lines), index + query.context + 1)):
            keep.setdefault(near, False)
        keep[index] = True
    shown_lines = []
    for index in sorted(keep):
        line = lines[index]
        shown_lines.append((index + 1, keep[index], line[:-1] if line.endswith("\r") else line))
    return len(matched), shown_lines


def python_files(
    globs: list[str], directory: str, stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> tuple[list[str], bool]:
    """The fallback of :func:`~refagent.sandbox.search.ripgrep.rg_files`: the files under ``directory`` by
    the package's rules and ``globs``, in no order, and whether that is all of them."""
    paths: list[str] = []
    for path in walk(directory, globs, stop, confine=confine):
        paths.append(path)
        if len(paths) > HARD_LIMIT * 5:
            return paths, False
    return paths, True


# -- the Python engine in a child process --------------------------------------------------------------


async def python_grep_in_process(
    query: Query, directory: str, target: str, *, confine: Sequence[str] = (), seconds: float = PYTHON_GREP_SECONDS
) -> Hits:
    """:func:`python_grep` in a child process (:func:`refagent.child.run_in_child`), killed after
    ``seconds`` (ToolError: simplify the pattern) or when cancelled.

    Python's ``re`` backtracks, and holds the GIL while it does: a pattern such as ``(a+)+$`` on a long
    line would take exponential time and stop the event loop (every session) with it. A thread cannot
    be stopped, a process can. It costs a Python start (~0.15 s), on the fallback engine only.
    """
    python_regex(query.pattern, query.literal, query.case_insensitive)  # a bad pattern fails here, at no cost
    request = {"query": dataclasses.asdict(query), "directory": directory, "target": target, "confine": list(confine)}
    try:
        answer = await run_in_child(__name__, "grep_for_child", request, seconds=seconds, memory=PYTHON_GREP_MEMORY)
    except Overran:
        raise ToolError(
            f"The search took longer than {seconds:g} s and was stopped: the pattern took too long. It probably "
            "backtracks catastrophically on some lines (nested or repeated quantifiers such as `(a+)+` or "
            "`(a|aa)*`, often inside a look-around): simplify it, or narrow the search with path or glob."
        ) from None
    except ChildFailed as exc:
        log.warning("the Python grep engine failed: %s", exc)
        raise ToolError("The search failed (the Python search engine stopped unexpectedly).") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    hits = Hits(counts=answer["counts"], complete=answer["complete"], matches=answer["matches"])
    hits.lines = {path: [(n, m, t) for n, m, t in lines] for path, lines in answer["lines"].items()}
    return hits


def grep_for_child(request: dict[str, Any], data: bytes) -> dict[str, Any]:
    """The child's side of :func:`python_grep_in_process`: the hits of the request, as JSON-able data."""
    query = Query(**request["query"])
    try:
        hits = python_grep(query, request["directory"], request["target"], confine=request["confine"])
    except ToolError as exc:
        return {"error": str(exc)}
    cut = MAX_GREP_LINE_CHARS + 1  # grep's render() cuts at MAX_GREP_LINE_CHARS: no need to send more
    return {
        "counts": hits.counts,
        "complete": hits.complete,
        "matches": hits.matches,
        "lines": {path: [(n, m, t[:cut]) for n, m, t in lines] for path, lines in hits.lines.items()},
    }
