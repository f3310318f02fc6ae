"""Which engine runs a search: :func:`search` (grep) and :func:`list_files` (glob), what the tools call.

Contract: ripgrep when there is one, it accepts the pattern, and the tree's ``.gitignore`` files are safe
for it to read (:func:`~refagent.sandbox.search.walk.rg_can_walk`, kept while the tree is as it was:
:mod:`~refagent.sandbox.search.clearance`). ripgrep walks by path, so a directory (or, for grep, a file)
swapped for a link while it runs leads it outside. Where the tree is watched
(:mod:`~refagent.sandbox.search.journal`), it is held from before rg starts to after it ends, and what rg
found is vouched for by the journal; a tree that changed meanwhile (or while it was walked) is searched
by the Python engine instead, which opens each directory from its parent and is led nowhere by a link.
Elsewhere, each find is looked at after rg ends (:func:`~refagent.sandbox.search.ripgrep.where_it_says`)
and dropped if not where it says, which a swap undone before the look escapes. Otherwise the Python
engine: for grep in a child process with a deadline
(:func:`~refagent.sandbox.search.python_engine.python_grep_in_process`). A pattern neither engine accepts
raises :class:`~refagent.errors.ToolError`. ``directory`` is absolute and resolved; a ``.gitignore``
that is a link is read only when it leads inside the roots or the searched directory.

:class:`LocalSearch` is these two as the :class:`~refagent.sandbox.seams.Search` seam: what a local sandbox gives
its tools.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

import anyio

from refagent.errors import ToolError
from refagent.sandbox.seams import Hits, Query
from refagent.sandbox.search.clearance import Clearances, Held
from refagent.sandbox.search.python_engine import (
    PYTHON_GREP_SECONDS,
    python_files,
    python_grep_in_process,
    python_regex,
)
from refagent.sandbox.search.ripgrep import RgPatternError, find_rg, rg_files, rg_grep, where_it_says
from refagent.sandbox.search.walk import in_thread

T = TypeVar("T")

log = logging.getLogger(__name__)


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


async def _cleared(
    run: Callable[[], Awaitable[T]], directory: str, globs: list[str], confine: list[str], cleared: Clearances
) -> tuple[T, Held | None] | None:
    """``run`` (rg over the tree) once the tree is cleared for it: what it gave, with the tree held when
    it is watched (so that :meth:`Held.verdict` vouches for what rg found), or None when rg may not walk
    it (:meth:`Clearances.hold`). A watched tree is walked, when it must be, before rg runs: rg then
    walks a tree watched throughout. Where nothing watches, the check runs beside rg."""
    if not cleared.watches(directory, globs, confine):
        checked = await _while_checked(run, directory, globs, confine, cleared)
        return None if checked is None else (checked, None)
    held = cleared.held(directory, globs, confine)
    if held is None:
        hold = await in_thread(lambda stop: cleared.hold(directory, globs, confine, stop))
        if hold is False:
            return None
        held = hold if isinstance(hold, Held) else None
    return await run(), held


async def _where_they_say(
    directory: str, paths: list[str], held: Held | None, *, files: bool, folders: set[str] | None = None
) -> list[str] | None:
    """Those of ``paths`` rg found that are where they say: all, when the held tree vouches for them; else
    each looked at (:func:`where_it_says`). None when the held tree changed while rg ran: what rg found
    then cannot be told from what a link swapped in and out led it to. ``folders``: the directories of
    ``paths``, when known."""
    if held is not None:
        verdict = held.verdict(paths, folders, files=files)
        if verdict == "vouched":
            return paths
        if verdict == "changed":
            log.info("searching %s again without ripgrep: it changed while ripgrep ran", directory)
            return None
    kept: list[str] = await anyio.to_thread.run_sync(lambda: where_it_says(directory, paths, files=files))
    return kept


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
                checked = await _cleared(
                    lambda: rg_grep(rg, query, directory, "."), directory, query.globs, confine, cleared
                )
            else:
                checked = (await rg_grep(rg, query, directory, target), None)
        except RgPatternError as exc:
            try:
                python_regex(query.pattern, query.literal, query.case_insensitive)
            except ToolError:
                raise ToolError(f"Invalid regular expression {query.pattern!r}: {_rg_message(str(exc))}") from None
        else:
            if checked is not None:
                hits, held = checked
                found = list(hits.counts)
                kept = await _where_they_say(directory, found, held, files=True) if target == "." else found
                if kept is not None:
                    if len(kept) < len(found):
                        for path in set(found).difference(kept):
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
    if rg is not None:
        folders: set[str] = set()  # filled as rg's names arrive
        run = functools.partial(rg_files, rg, globs, directory, folders)
        listed = await _cleared(run, directory, globs, confine, cleared)
        if listed is not None:
            (paths, complete), held = listed
            # A listing reads no file, so its directories are what must be checked (file names can leak too).
            kept = await _where_they_say(directory, paths, held, files=False, folders=folders)
            if kept is not None:
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
