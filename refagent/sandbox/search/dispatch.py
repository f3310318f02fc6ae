"""Which engine runs a search: :func:`search` (grep) and :func:`list_files` (glob), what the tools call.

Contract: ripgrep when there is one, it accepts the pattern, and the tree's ``.gitignore`` files are safe
for it to read (:func:`~refagent.sandbox.search.walk.rg_can_walk`); what it reports is then checked to
be where it says (:func:`~refagent.sandbox.search.ripgrep.where_it_says`) and dropped if not. Otherwise
the Python engine: for grep in a child process with a deadline
(:func:`~refagent.sandbox.search.python_engine.python_grep_in_process`). A pattern neither engine accepts
raises :class:`~refagent.errors.ToolError`. ``directory`` is absolute and resolved; a ``.gitignore``
that is a link is read only when it leads inside the roots or the searched directory.

:class:`LocalSearch` is these two as the :class:`~refagent.sandbox.seams.Search` seam: what a local sandbox gives
its tools.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

import anyio

from refagent.errors import ToolError
from refagent.sandbox.seams import Hits, Query
from refagent.sandbox.search.clearance import Clearances
from refagent.sandbox.search.python_engine import (
    PYTHON_GREP_SECONDS,
    python_files,
    python_grep_in_process,
    python_regex,
)
from refagent.sandbox.search.ripgrep import RgPatternError, find_rg, rg_files, rg_grep, where_it_says
from refagent.sandbox.search.walk import in_thread

T = TypeVar("T")


async def _while_checked(
    run: Callable[[], Awaitable[T]], directory: str, globs: list[str], confine: list[str], cleared: Clearances
) -> T | None:
    """``run`` (an rg search or listing of ``directory``) while, beside it, the walk that checks the tree's
    ignore files are safe for rg runs (both only read; on a large tree the walk costs as much as the
    search, so one after the other took half again rg's time): what ``run`` gave, or None when the check
    says no (``run`` is then cancelled, which kills rg, and what it found is not used). The check's own
    refusal comes first; then ``run``'s failure (a pattern rg rejects), as it was raised."""
    found: list[T] = []
    failed: list[Exception] = []

    async def search() -> None:
        try:
            found.append(await run())
        except Exception as exc:  # kept, not raised in the group (which would wrap it)
            failed.append(exc)

    refused: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(search)
        try:
            safe = await in_thread(lambda stop: cleared.rg_can_walk(directory, globs, confine, stop))
        except Exception as exc:  # the check's own word (the directory is not the one checked) comes first
            refused, safe = exc, False
        if not safe:
            group.cancel_scope.cancel()
    if refused is not None:
        raise refused
    if not safe:
        return None
    if failed:
        raise failed[0]
    return found[0]


def _confine(directory: str, roots: Sequence[str]) -> list[str]:
    """Where a linked ``.gitignore`` may lead: the roots, and the searched directory (which may be outside
    them, with the user's leave)."""
    return list(dict.fromkeys([*roots, directory]))


async def search(
    query: Query,
    directory: str,
    target: str,
    rg: str | None,
    *,
    roots: Sequence[str] = (),
    python_seconds: float = PYTHON_GREP_SECONDS,
    cleared: Clearances | None = None,
) -> Hits:
    """Search ``target`` (``.`` for all of ``directory``, else a file name in it): ripgrep when there is
    one, it accepts the pattern and the tree's ignore files are safe for it to read, else the Python
    engine (in a child process, within ``python_seconds``). ``directory`` is absolute and resolved.
    ``cleared``: the trees already cleared for rg (default: none kept)."""
    confine = _confine(directory, roots)
    cleared = cleared if cleared is not None else Clearances(keep=0)
    if rg is not None:
        try:
            if target == ".":
                checked = await _while_checked(
                    lambda: rg_grep(rg, query, directory, "."), directory, query.globs, confine, cleared
                )
            else:
                checked = await rg_grep(rg, query, directory, target)
        except RgPatternError as exc:
            try:
                python_regex(query.pattern, query.literal, query.case_insensitive)
            except ToolError:
                raise ToolError(f"Invalid regular expression {query.pattern!r}: {_rg_message(str(exc))}") from None
        else:
            if checked is not None:
                hits = checked
                if target == ".":
                    found = list(hits.counts)
                    kept = set(await anyio.to_thread.run_sync(lambda: where_it_says(directory, found, files=True)))
                    for path in [path for path in hits.counts if path not in kept]:
                        hits.drop(path)
                return hits
    return await python_grep_in_process(query, directory, target, confine=confine, seconds=python_seconds)


async def list_files(
    globs: list[str], directory: str, rg: str | None, *, roots: Sequence[str] = (), cleared: Clearances | None = None
) -> tuple[list[str], bool]:
    """The files under ``directory`` by the package's rules (and ``globs``), in no order, and whether that
    is all of them: ripgrep when there is one and the tree's ignore files are safe for it to read.
    ``cleared``: as for :func:`search`."""
    confine = _confine(directory, roots)
    cleared = cleared if cleared is not None else Clearances(keep=0)
    listed = None
    if rg is not None:
        listed = await _while_checked(lambda: rg_files(rg, globs, directory), directory, globs, confine, cleared)
    if listed is not None:
        paths, complete = listed
        # A listing reads no file, so its directories are what must be checked (file names can leak too).
        kept: list[str] = await anyio.to_thread.run_sync(lambda: where_it_says(directory, paths, files=False))
        return kept, complete
    found: tuple[list[str], bool] = await in_thread(lambda stop: python_files(globs, directory, stop, confine=confine))
    return found


class LocalSearch:
    """The :class:`~refagent.sandbox.seams.Search` of the local disk: :func:`search` and :func:`list_files`."""

    def __init__(
        self, rg: str | Literal["auto"] | None = "auto", *, python_seconds: float = PYTHON_GREP_SECONDS
    ) -> None:
        """``rg``: the ripgrep binary, None for the Python engine alone, ``auto`` to look for it (once,
        here). ``python_seconds``: the Python grep engine's time limit."""
        self.rg = find_rg() if rg == "auto" else rg
        self.python_seconds = python_seconds
        self.cleared = Clearances()
        """The trees cleared for rg, kept while they are as they were (a search's check is then a stat of
        each directory, not a walk)."""

    async def grep(self, query: Query, directory: str, target: str, *, roots: Sequence[str]) -> Hits:
        return await search(
            query, directory, target, self.rg, roots=roots, python_seconds=self.python_seconds, cleared=self.cleared
        )

    async def files(self, globs: list[str], directory: str, *, roots: Sequence[str]) -> tuple[list[str], bool]:
        return await list_files(globs, directory, self.rg, roots=roots, cleared=self.cleared)


def _rg_message(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return " ".join(lines[-3:]) if lines else "ripgrep rejected it"
