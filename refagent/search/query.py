"""What a search asks and what it finds: the types both engines take and return, and their shared limits.

:class:`Query` is one grep (pattern, flags, context lines, output mode, globs); :class:`Hits` is its
answer, by path relative to the searched directory, in no order. Both engines
(:mod:`~refagent.search.ripgrep`, :mod:`~refagent.search.python_engine`) fill a
:class:`Hits` alike for the same tree, and stop past :data:`HARD_LIMIT` matches or files, marking it
incomplete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

HARD_LIMIT = 20_000
"""Stop reading matches (and kill rg) past this many: the answer is "narrow your search" anyway."""
MAX_GREP_LINE_CHARS = 500
"""The longest line the model is shown (``grep`` cuts there, :mod:`refagent.tools.search`): the Python
engine's child process sends one character more at most, so that the cut is still seen."""

OutputMode = Literal["content", "files", "count"]


@dataclass
class Hits:
    """What a search found, by path relative to the searched directory."""

    lines: dict[str, list[tuple[int, bool, str]]] = field(default_factory=dict)
    """Content mode: (line number, is a match, text) per file, in line order."""
    counts: dict[str, int] = field(default_factory=dict)
    """Matching lines per file (every mode)."""
    complete: bool = True
    """False: the search stopped at :data:`HARD_LIMIT`."""
    matches: int = 0

    def drop(self, path: str) -> None:
        self.matches -= self.counts.pop(path, 0)
        self.lines.pop(path, None)


@dataclass(frozen=True, slots=True)
class Query:
    """One grep: ``pattern`` (a regex, or text with ``literal``), ``context`` lines around each match
    (content mode), what to give back (``mode``) and ripgrep's ``-g`` globs."""

    pattern: str
    literal: bool
    case_insensitive: bool
    context: int
    mode: OutputMode
    globs: list[str]
