r"""Gitignore-style globs, in the two dialects refagent must agree with, matched in time linear in the path.

- ``git``: git's ``wildmatch`` globs (what ``git status`` ignores).
- ``rg``: ripgrep's ``globset`` globs (its ``-g`` globs, and the lines its ``ignore`` crate reads).

Contract: :func:`glob_regex` is a glob's meaning, as a regex; :func:`translate` is the same glob as
tokens, which :class:`GlobMatcher` matches against paths with the same answers as that regex, in time
linear in the path. :func:`translate` raises ValueError for a glob the dialect rejects (an unclosed
``[``, a trailing ``\``). The ``.gitignore`` lines built on these globs are read in
:mod:`refagent.sandbox.disk.gitignore`.

They agree on every common glob. Where they differ (rare patterns; each is a branch below)::

    pattern                git                                       rg
    {a,b}                  the name {a,b}                            a or b
    [[:alpha:]]            a POSIX class (ASCII)                     [ or :, ..., then ]
    [\#]                   \ escapes in a class: #                   \ or #
    x[!a]b                 not x/b: a class never matches /          x/b
    [b-c-e]                b to c, - or e                            b to e
    ***/a, x**/a           any depth (x**/a: x, then **/a)           one directory level

Both match bytes, not characters: ``?`` is one byte of a UTF-8 name (``caf?`` does not match ``café``),
so patterns and paths are compared as their bytes, one character per byte (:func:`byte_view`).

Untrusted input: a ``.gitignore`` comes with the repository, a ``glob`` from the model. Matching takes
time linear in the path for every pattern (:class:`GlobMatcher`): a pattern such as ``*a*a*a*a*a*b``,
which makes a backtracking regex engine take exponential time, is matched by simulating its automaton.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

Dialect = Literal["git", "rg"]

_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\r ",  # git's own ctype: not \v or \f
    "upper": "A-Z",
    "xdigit": "0-9a-fA-F",
}
"""git's ``[:name:]`` classes, as its locale-independent ``ctype.c`` defines them (ASCII only)."""


def byte_view(text: str) -> str:
    """``text`` as its bytes (UTF-8; a file name's undecodable bytes restored), one character per byte."""
    return text if text.isascii() else text.encode("utf-8", "surrogateescape").decode("latin-1")


# -- globs -------------------------------------------------------------------------------------------


def glob_regex(glob: str, dialect: Dialect = "rg") -> str:
    """The regex of one glob, for ``re.fullmatch(..., re.DOTALL)`` on :func:`byte_view` paths.

    ``*`` and ``?`` never match ``/`` (nor does a class, in git's dialect); ``**`` between slashes, or
    at either end, matches any number of directories. Raises ValueError for a glob the dialect rejects
    (ripgrep reports an error for it; git reads it as matching nothing). This is the glob's meaning;
    to match many paths, use :class:`GlobMatcher`, whose time does not depend on the pattern's shape.
    """
    return _regex(translate(glob, dialect, quirk=False))


# A glob is a sequence of tokens: one byte of the path (_Char), a {a,b} group (rg), or one of these
# three, written as the regex they stand for.
_STAR = "[^/]*"
_ANY = ".*"
DIRS = "(?:.*/)?"  # `**/`: any number of leading directories


@dataclass(frozen=True, slots=True, eq=False)
class _Char:
    """One byte of the path (a :func:`byte_view` character): ``literal``, or one that ``regex`` matches."""

    regex: str
    literal: str | None = None
    _known: dict[str, bool] = field(default_factory=dict, repr=False)

    def matches(self, char: str) -> bool:
        if self.literal is not None:
            return char == self.literal
        known = self._known.get(char)
        if known is None:
            known = self._known[char] = re.fullmatch(self.regex, char, re.DOTALL) is not None
        return known


@dataclass(frozen=True, slots=True)
class _Group:
    """``{a,b}`` (rg): one of the alternatives (no nesting)."""

    alternatives: tuple[tuple[_Token, ...], ...]


_Token: TypeAlias = "str | _Char | _Group"


def _regex(tokens: Sequence[_Token]) -> str:
    parts = []
    for token in tokens:
        if isinstance(token, _Char):
            parts.append(token.regex)
        elif isinstance(token, _Group):
            parts.append("(?:" + "|".join(_regex(alternative) for alternative in token.alternatives) + ")")
        else:
            parts.append(token)
    return "".join(parts)


def translate(glob: str, dialect: Dialect, *, quirk: bool) -> list[_Token]:
    """``glob`` as the tokens :class:`GlobMatcher` matches (their regex is :func:`glob_regex`'s). ``quirk``:
    as git reads a ``.gitignore`` pattern with a slash (a ``**`` right after its literal head counts as
    at the start). Raises ValueError for a glob the dialect rejects."""
    git = dialect == "git"
    if not git and glob in ("**", "**/"):
        return [_ANY]  # globset: a lone recursive prefix matches everything
    if git:
        glob = byte_view(glob)  # wildmatch reads bytes; globset reads characters (and emits their bytes)
    starts = {0}
    if quirk:
        # git matches a pattern's literal head with a plain compare, then the rest with wildmatch, where
        # a leading `**` counts as at the start: `x**/a` matches `x/y/a`.
        starts.add(next((i for i, char in enumerate(glob) if char in "*?[\\"), 0))
    tokens: list[_Token] = []
    out = tokens  # where the next token goes: `tokens`, or the current alternative of a {a,b} group
    group: list[list[_Token]] | None = None  # inside {a,b} (rg)
    index = 0
    length = len(glob)
    while index < length:
        char = glob[index]
        if char == "*":
            end = index + 1
            while end < length and glob[end] == "*" and (git or end < index + 2):
                end += 1  # git reads any run of `*` as one; globset reads them in pairs
            rest = glob[end:]
            if (
                end - index >= 2
                and (index in starts or glob[index - 1] == "/")
                and (not rest or rest[0] == "/" or (git and rest.startswith("\\/")))
            ):
                if rest.startswith("/"):  # `**/`: any leading directories, or none
                    out.append(DIRS)
                    end += 1
                else:  # `/**` at the end: everything below
                    out.append(_ANY)
            else:
                out.append(_STAR)
            index = end
            continue
        if char == "?":
            out.append(_Char("[^/]"))
        elif char == "[":
            regex, index = _git_class(glob, index) if git else _rg_class(glob, index)
            out.append(_Char(regex))
            continue
        elif char == "{" and not git:
            if group is not None:
                raise ValueError(f"The glob {glob!r} nests {{...}} groups, which is not supported.")
            group = [[]]
            out = group[0]
        elif char == "}" and group is not None:
            tokens.append(_Group(tuple(tuple(alternative) for alternative in group)))
            group, out = None, tokens
        elif char == "," and group is not None:
            group.append([])
            out = group[-1]
        elif char == "\\":
            index += 1
            if index == length:
                raise ValueError(f"The glob {glob!r} ends with a lone '\\'.")
            out.extend(_literal(glob[index], git))
        else:
            out.extend(_literal(char, git))
        index += 1
    if group is not None:
        raise ValueError(f"The glob {glob!r} has an unclosed '{{'.")
    return tokens


def _literal(char: str, git: bool) -> list[_Token]:
    return [_Char(re.escape(byte), byte) for byte in (char if git else byte_view(char))]


def _escaped(char: str) -> str:
    return re.escape(byte_view(char))


def _rg_class(glob: str, start: int) -> tuple[str, int]:
    """``[...]`` at ``start`` as globset parses it: a leading ``]`` or ``-`` is literal, and ``a-c-e``
    extends the range to ``e``. Returns the regex and the index after the class."""
    index = start + 1
    negate = index < len(glob) and glob[index] in "!^"
    if negate:
        index += 1
    ranges: list[list[str]] = []
    in_range = False
    first = True
    while True:
        if index == len(glob):
            raise ValueError(f"The glob {glob!r} has an unclosed '['.")
        char = glob[index]
        index += 1
        if char == "]" and not first:
            break
        if char == "-" and not first:
            if in_range:
                ranges[-1][1], in_range = "-", False
            else:
                in_range = True
                continue
        elif in_range:
            ranges[-1][1], in_range = char, False
        else:
            ranges.append([char, char])
        if ranges[-1][1] < ranges[-1][0]:
            raise ValueError(f"The glob {glob!r} has an invalid range {ranges[-1][0]}-{ranges[-1][1]}.")
        first = False
    if in_range:
        ranges.append(["-", "-"])
    # globset writes each character as its UTF-8 bytes: `[é]` is one of two bytes, as here.
    body = "".join(_escaped(low) + ("" if low == high else "-" + _escaped(high)) for low, high in ranges)
    return ("[^" if negate else "[") + body + "]", index


def _git_class(glob: str, start: int) -> tuple[str, int]:
    """``[...]`` at ``start`` as git's ``wildmatch`` reads it (``glob`` is a byte view)."""
    index = start + 1
    negate = index < len(glob) and glob[index] in "!^"
    if negate:
        index += 1
    parts: list[str] = []
    previous = ""  # the last single character, which a following `-x` makes a range from
    first = True
    while True:
        if index == len(glob):
            raise ValueError(f"The glob {glob!r} has an unclosed '['.")
        char = glob[index]
        if char == "]" and not first:
            break
        first = False
        if char == "\\":
            index += 1
            if index == len(glob):
                raise ValueError(f"The glob {glob!r} has an unclosed '['.")
            char = glob[index]
            parts.append(re.escape(char))
        elif char == "-" and previous and index + 1 < len(glob) and glob[index + 1] != "]":
            index += 1
            high = glob[index]
            if high == "\\":
                index += 1
                if index == len(glob):
                    raise ValueError(f"The glob {glob!r} has an unclosed '['.")
                high = glob[index]
            if previous <= high:  # a reversed range adds nothing (its start is already in)
                parts.append(f"{re.escape(previous)}-{re.escape(high)}")
            char = ""
        elif char == "[" and glob.startswith("[:", index):
            close = glob.find("]", index + 2)
            if close < 0:
                raise ValueError(f"The glob {glob!r} has an unclosed '['.")
            if close == index + 2 or glob[close - 1] != ":":  # no `[:name:]` after all: a literal `[`
                parts.append(re.escape(char))
            else:
                name = glob[index + 2 : close - 1]
                if name not in _POSIX_CLASSES:
                    raise ValueError(f"The glob {glob!r} has an unknown class [:{name}:].")
                parts.append(_POSIX_CLASSES[name])
                index, char = close, ""
        else:
            parts.append(re.escape(char))
        previous = char
        index += 1
    # With WM_PATHNAME a class never matches `/`, not even `[!a]`.
    return ("[^" + "".join(parts) + "/]" if negate else "(?!/)[" + "".join(parts) + "]"), index + 1


# -- matching in bounded time --------------------------------------------------------------------------

_BACKTRACK_BUDGET = 100_000
"""The most steps (about 1 ms) we let ``re`` take on one match: it backtracks, so a glob with ``k``
unbounded wildcards can take ``n ** k`` steps on an ``n``-byte path (``*a*a*a*a*a*b``: hours)."""

_MAX_REGEX_CHARS = 10_000
"""A longer glob is only ever run as an automaton (compiling a regex that size costs more than it saves)."""

_SLASH = _Char("/", "/")
_NOT_SLASH = _Char("[^/]")
_ANY_CHAR = _Char(".")

_Program: TypeAlias = tuple[list["_Char | None"], list[int], list[int], int]
"""An automaton: state ``s`` consumes a byte ``chars[s]`` matches and goes to ``nexts[s]``, or, when
``chars[s]`` is None, goes to both ``nexts[s]`` and ``alts[s]`` without consuming; state 0 accepts.
The last item is the start state."""


class GlobMatcher:
    """``fullmatch`` of one glob against :func:`byte_view` paths, in time linear in the path.

    Two engines with the same answers: ``re`` (fast, but it backtracks) when the glob's shape bounds its
    backtracking on this path within :data:`_BACKTRACK_BUDGET` steps, else a simulation of the glob's
    automaton (Thompson's construction: every state at once, so each byte is looked at once per state).
    Nearly every real pattern takes the first; a pattern like ``*a*a*a*a*a*a*b`` takes the second,
    where backtracking would take exponential time. A glob that starts with ``**/`` and cannot match
    ``/`` otherwise (git's and ripgrep's patterns without a slash) is matched against the last
    component alone, which is what it means, and short.
    """

    __slots__ = ("_basename", "_dfa", "_max_regex_length", "_program", "_regex", "_tokens")

    def __init__(self, tokens: Sequence[_Token]) -> None:
        tokens = _simplify(tokens)
        self._basename = bool(tokens) and tokens[0] == DIRS and not any(_crosses(t) for t in tokens[1:])
        self._tokens = tokens[1:] if self._basename else tokens
        self._regex: re.Pattern[str] | None = None
        self._program: _Program | None = None
        self._dfa: _DFA = {}  # the automaton's moves, as they are met (a DFA, built lazily)
        self._max_regex_length = -1  # paths up to this long go to `re`
        text = _regex(self._tokens)
        if len(text) <= _MAX_REGEX_CHARS:
            self._regex = re.compile(text, re.DOTALL)  # re.error for a bad glob: raised here, not later
            self._max_regex_length = _max_length(*_cost(self._tokens))

    def fullmatch(self, view: str) -> bool:
        """Whether the glob matches all of ``view`` (a path relative to the glob's directory)."""
        subject = view[view.rfind("/") + 1 :] if self._basename else view
        if self._regex is not None and len(subject) <= self._max_regex_length:
            return self._regex.fullmatch(subject) is not None
        if self._program is None:
            self._program = _automaton(self._tokens)
        return _run(self._program, subject, self._dfa)


def _simplify(tokens: Sequence[_Token]) -> list[_Token]:
    """The same glob with runs of wildcards merged (``**`` pairs, ``*/**``...): fewer loops to run."""
    out: list[_Token] = []
    for token in tokens:
        if isinstance(token, _Group):
            token = _Group(tuple(tuple(_simplify(alternative)) for alternative in token.alternatives))
        previous = out[-1] if out else None
        if isinstance(token, str) and previous == token:
            continue
        if token == _ANY and previous in (_STAR, DIRS):
            out[-1] = _ANY
            continue
        if previous == _ANY and token in (_STAR, DIRS):
            continue
        out.append(token)
    if out[-2:] == [DIRS, _STAR]:
        out[-2:] = [_ANY]  # `**/*` at the end: any directories, then a name, is anything
    return out


def _crosses(token: _Token) -> bool:
    """Whether the token can match a ``/``."""
    if isinstance(token, _Char):
        return token.matches("/")
    if isinstance(token, _Group):
        return any(_crosses(t) for alternative in token.alternatives for t in alternative)
    return token != _STAR


def _cost(tokens: Sequence[_Token], at_end: bool = True) -> tuple[int, int]:
    """(the most unbounded wildcards on one path through the glob, the product of the groups' sizes):
    backtracking on an ``n``-byte path takes at most ``(n + 1) ** wildcards * branches`` steps. A ``.*``
    at the very end does not count: once reached, it matches the rest at the first try."""
    wildcards = 0
    branches = 1
    last = len(tokens) - 1
    for index, token in enumerate(tokens):
        end = at_end and index == last
        if isinstance(token, _Group):
            costs = [_cost(alternative, end) for alternative in token.alternatives]
            wildcards += max(cost[0] for cost in costs)
            branches = min(branches * sum(cost[1] for cost in costs), _BACKTRACK_BUDGET + 1)
        elif isinstance(token, str) and not (end and token == _ANY):
            wildcards += 1
    return wildcards, branches


def _max_length(wildcards: int, branches: int) -> int:
    """The longest path ``re`` may be given for a glob of this cost (-1: none)."""
    if branches > _BACKTRACK_BUDGET:
        return -1
    if wildcards == 0:
        return sys.maxsize
    return int((_BACKTRACK_BUDGET / branches) ** (1 / wildcards)) - 1


def _automaton(tokens: Sequence[_Token]) -> _Program:
    """Thompson's construction, built back to front: each token's states lead to what follows it."""
    chars: list[_Char | None] = [None]  # state 0: accept
    nexts = [0]
    alts = [0]

    def add(char: _Char | None, next_state: int, alt: int = 0) -> int:
        chars.append(char)
        nexts.append(next_state)
        alts.append(alt)
        return len(chars) - 1

    def repeat(char: _Char, then: int) -> int:  # char*, then `then`
        split = add(None, 0, then)
        nexts[split] = add(char, split)
        return split

    def sequence(tokens: Sequence[_Token], then: int) -> int:
        for token in reversed(tokens):
            if isinstance(token, _Char):
                then = add(token, then)
            elif isinstance(token, _Group):
                starts = [sequence(alternative, then) for alternative in token.alternatives]
                then = starts[-1]
                for start in reversed(starts[:-1]):
                    then = add(None, start, then)
            elif token == _STAR:
                then = repeat(_NOT_SLASH, then)
            elif token == _ANY:
                then = repeat(_ANY_CHAR, then)
            else:  # DIRS: (?:.*/)?
                then = add(None, repeat(_ANY_CHAR, add(_SLASH, then)), then)
        return then

    start = sequence(tokens, 0)
    return chars, nexts, alts, start


_MAX_DFA_STATES = 4096
"""The most sets of automaton states a matcher remembers the moves of (about 1 MB at worst)."""

_DFA: TypeAlias = dict[frozenset[int], dict[str, frozenset[int]]]


def _run(program: _Program, subject: str, dfa: _DFA | None = None) -> bool:
    """Whether the automaton accepts ``subject``: every state at once, one byte at a time. ``dfa``
    remembers each (set of states, byte) move, so a long path mostly costs a dictionary look-up a byte."""
    chars, nexts, _, start = program
    if dfa is None:
        dfa = {}
    current = frozenset(_closure(program, [start]))
    for byte in subject:
        moves = dfa.get(current)
        if moves is None:
            moves = {} if len(dfa) >= _MAX_DFA_STATES else dfa.setdefault(current, {})
        following = moves.get(byte)
        if following is None:
            moved = [nexts[state] for state in current if (char := chars[state]) is not None and char.matches(byte)]
            following = moves[byte] = frozenset(_closure(program, moved))
        if not following:
            return False
        current = following
    return 0 in current


def _closure(program: _Program, states: list[int]) -> list[int]:
    """``states`` and every state reachable from them without consuming: those that consume, or accept."""
    chars, nexts, alts, _ = program
    seen: set[int] = set()
    out = []
    while states:
        state = states.pop()
        if state in seen:
            continue
        seen.add(state)
        if state and chars[state] is None:
            states += (nexts[state], alts[state])
        else:
            out.append(state)
    return out
