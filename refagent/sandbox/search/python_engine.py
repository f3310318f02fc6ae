"""The pure-Python engine: :func:`python_grep` and :func:`python_files`, the same inputs and results as
:mod:`~refagent.sandbox.search.ripgrep`'s, for when ``rg`` is missing, rejects the pattern, or must not
walk the tree.

It walks with :mod:`~refagent.sandbox.search.walk` and matches with Python's ``re``, translating the
Rust-only syntax models use most (:func:`python_regex`). ``re`` backtracks, holding the GIL: a pattern
such as ``(a+)+$`` takes exponential time. An untrusted pattern therefore runs through
:func:`python_grep_in_process`: the engine in an isolated child process (:func:`serve_python_grep`),
within :data:`PYTHON_GREP_MEMORY` of address space, killed after :data:`PYTHON_GREP_SECONDS` or when
the caller is cancelled; at the deadline the model is told (:class:`~refagent.errors.ToolError`) to
simplify the pattern.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import anyio

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

_WORKER = (
    "import json, sys\n"
    "request = json.load(sys.stdin)\n"
    "sys.path[:] = request['path']\n"
    "from refagent.sandbox.search.python_engine import serve_python_grep\n"
    "serve_python_grep(request)\n"
)


async def python_grep_in_process(
    query: Query, directory: str, target: str, *, confine: Sequence[str] = (), seconds: float = PYTHON_GREP_SECONDS
) -> Hits:
    """:func:`python_grep` in a child process, killed after ``seconds`` (ToolError: simplify the pattern)
    or when cancelled.

    Python's ``re`` backtracks, and holds the GIL while it does: a pattern such as ``(a+)+$`` on a long
    line would take exponential time and stop the event loop (every session) with it. A thread cannot
    be stopped, a process can. It costs a Python start (~0.15 s), on the fallback engine only.
    """
    python_regex(query.pattern, query.literal, query.case_insensitive)  # a bad pattern fails here, at no cost
    request = {
        "path": _child_path(),
        "query": dataclasses.asdict(query),
        "directory": directory,
        "target": target,
        "confine": list(confine),
        "seconds": seconds,
    }
    output = bytearray()
    errors = bytearray()
    with anyio.move_on_after(seconds) as deadline:
        # Isolated (-I: no environment, no script directory; -S: no site hooks; it gets our sys.path)
        # and in "/": the child must not import modules from the searched tree, or wherever we are.
        process = await anyio.open_process(
            [sys.executable, "-I", "-S", "-c", _WORKER],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(json.dumps(request).encode())
            await process.stdin.aclose()

            async def drain_errors() -> None:
                assert process.stderr is not None
                async for chunk in process.stderr:
                    errors.extend(chunk)
                    del errors[:-4096]

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(drain_errors)
                async for chunk in process.stdout:
                    output.extend(chunk)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
    if deadline.cancelled_caught:
        raise ToolError(
            f"The search took longer than {seconds:g} s and was stopped: the pattern took too long. It probably "
            "backtracks catastrophically on some lines (nested or repeated quantifiers such as `(a+)+` or "
            "`(a|aa)*`, often inside a look-around): simplify it, or narrow the search with path or glob."
        )
    try:
        answer = json.loads(output)
    except ValueError:
        log.warning("the Python grep engine failed: %s", errors.decode("utf-8", "replace").strip())
        raise ToolError("The search failed (the Python search engine stopped unexpectedly).") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    hits = Hits(counts=answer["counts"], complete=answer["complete"], matches=answer["matches"])
    hits.lines = {path: [(n, m, t) for n, m, t in lines] for path, lines in answer["lines"].items()}
    return hits


def _child_path() -> list[str]:
    """The child's ``sys.path``: ours, without relative entries (``""`` is the working directory, which
    may be the tree being searched), and with the directory refagent itself was imported from."""
    # This file is refagent/sandbox/search/python_engine.py: four levels below that directory.
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return list(dict.fromkeys([here, *(entry for entry in sys.path if os.path.isabs(entry))]))


def serve_python_grep(request: dict[str, Any]) -> None:
    """The child's side of :func:`python_grep_in_process`: run the request, print the hits as JSON."""
    seconds = float(request["seconds"])
    # The parent kills us at the deadline; the alarm (default action: terminate) covers a parent that died.
    signal.alarm(math.ceil(seconds) + 2)
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft > PYTHON_GREP_MEMORY:  # never loosen a stricter limit
            resource.setrlimit(resource.RLIMIT_AS, (PYTHON_GREP_MEMORY, hard))
    query = Query(**request["query"])
    try:
        hits = python_grep(query, request["directory"], request["target"], confine=request["confine"])
    except ToolError as exc:
        answer: dict[str, Any] = {"error": str(exc)}
    else:
        cut = MAX_GREP_LINE_CHARS + 1  # grep's render() cuts at MAX_GREP_LINE_CHARS: no need to send more
        answer = {
            "counts": hits.counts,
            "complete": hits.complete,
            "matches": hits.matches,
            "lines": {path: [(n, m, t[:cut]) for n, m, t in lines] for path, lines in hits.lines.items()},
        }
    sys.stdout.write(json.dumps(answer))  # ASCII: names that are not UTF-8 travel as \udcxx escapes
    sys.stdout.flush()
