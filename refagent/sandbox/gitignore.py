r"""``.gitignore`` rules: one reader and matcher, in the two dialects refagent must agree with.

- ``git``: what git ignores (``git status``; its ``wildmatch`` globs). :class:`GitIgnore` answers this
  way, for the root watcher.
- ``rg``: what ripgrep ignores (its ``ignore`` crate; ``globset`` globs, ``-g`` globs too). The search
  tools' Python engine (:mod:`refagent.tools.search`) reads ``.gitignore`` files this way, so that it
  lists what ``rg`` lists.

They agree on every common pattern. Where they differ (rare patterns; each is a branch below)::

    pattern                git                                       rg
    {a,b}                  the name {a,b}                            a or b
    [[:alpha:]]            a POSIX class (ASCII)                     [ or :, ..., then ]
    [\#]                   \ escapes in a class: #                   \ or #
    x[!a]b                 not x/b: a class never matches /          x/b
    [b-c-e]                b to c, - or e                            b to e
    ***/a, x**/a           any depth (x**/a: x, then **/a)           one directory level
    "a<tab>", "a\  "       tab kept; "a " (only unescaped spaces     "a"; nothing (a lone \)
                           at the end go)
    dir\/                  never matches                             the directory dir
    ! alone                nothing                                   re-includes everything
    UTF-8 BOM              skipped                                   part of the first pattern
    a line not UTF-8       a pattern like the others                 ends the file
    .gitignore a symlink   not read                                  read

Both match bytes, not characters: ``?`` is one byte of a UTF-8 name (``caf?`` does not match ``café``),
so patterns and paths are compared as their bytes, one character per byte (:func:`byte_view`). A line
the dialect rejects (an unclosed ``[``, a trailing ``\``) is skipped, as both skip it.

Untrusted input: a ``.gitignore`` comes with the repository, a ``glob`` from the model. Matching takes
time linear in the path for every pattern (:class:`GlobMatcher`): a pattern such as ``*a*a*a*a*a*b``,
which makes a backtracking regex engine take exponential time, is matched by simulating its automaton.
Files are read by :func:`read_regular`: only regular files, without blocking, within a size cap.

The module is ~860 lines: one reader for both dialects keeps each difference a branch, side by side,
checked against git and ``rg`` themselves on random trees (``tests/test_tools_search.py``); the matcher
and the careful reading are what both dialects share.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

Dialect = Literal["git", "rg"]

_RUST_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
_RUST_WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"
"""What Rust's ``str::trim_end`` drops (Unicode White_Space; Python's ``str.rstrip`` also drops ``\\x1c-\\x1f``)."""

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
    return _regex(_translate(glob, dialect, quirk=False))


# A glob is a sequence of tokens: one byte of the path (_Char), a {a,b} group (rg), or one of these
# three, written as the regex they stand for.
_STAR = "[^/]*"
_ANY = ".*"
_DIRS = "(?:.*/)?"  # `**/`: any number of leading directories


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


def _translate(glob: str, dialect: Dialect, *, quirk: bool) -> list[_Token]:
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
                    out.append(_DIRS)
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
        self._basename = bool(tokens) and tokens[0] == _DIRS and not any(_crosses(t) for t in tokens[1:])
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
        if token == _ANY and previous in (_STAR, _DIRS):
            out[-1] = _ANY
            continue
        if previous == _ANY and token in (_STAR, _DIRS):
            continue
        out.append(token)
    if out[-2:] == [_DIRS, _STAR]:
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
            else:  # _DIRS: (?:.*/)?
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


# -- rules -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    glob: GlobMatcher
    """Matches the :func:`byte_view` of a path relative to the rule's directory."""
    whitelist: bool
    dir_only: bool


def parse_rule(line: str, dialect: Dialect = "rg") -> Rule | None:
    """One ``.gitignore`` line (None for blanks, comments and patterns the dialect rejects)."""
    if line.startswith("#"):
        return None
    try:
        if dialect == "git":
            return _parse_git(line)
        return _parse_rg(line)
    except (ValueError, re.error):
        return None


def _parse_git(line: str) -> Rule | None:
    """As git's ``dir.c`` reads a line (``parse_path_pattern``, ``match_basename``, ``match_pathname``)."""
    line = _trim_trailing_spaces(line)
    whitelist = line.startswith("!")
    if whitelist:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    if "/" in line:  # matched against the path relative to the .gitignore's directory
        tokens = _translate(line.removeprefix("/"), "git", quirk=True)
    else:  # matched against the name alone, at any depth
        tokens = [_DIRS, *_translate(line, "git", quirk=False)]
    return Rule(GlobMatcher(tokens), whitelist, dir_only)


def _trim_trailing_spaces(line: str) -> str:
    """git's ``trim_trailing_spaces``: trailing spaces go unless escaped; tabs and the like stay."""
    last_space = None
    index = 0
    while index < len(line):
        char = line[index]
        if char == " ":
            if last_space is None:
                last_space = index
        else:
            if char == "\\":
                index += 1
                if index == len(line):
                    return line
            last_space = None
        index += 1
    return line if last_space is None else line[:last_space]


def _parse_rg(line: str) -> Rule | None:
    """As the ``ignore`` crate's ``GitignoreBuilder::add_line`` reads a line."""
    if not line.endswith("\\ "):
        line = line.rstrip(_RUST_WHITESPACE)
    if not line:
        return None
    whitelist = anchored = False
    if line.startswith(("\\!", "\\#")):
        line = line[1:]
        anchored = line.startswith("/")
    else:
        if line.startswith("!"):
            whitelist, line = True, line[1:]
        if line.startswith("/"):
            anchored, line = True, line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
        if line.endswith("\\"):
            line = line[:-1]
    if not anchored and "/" not in line and not line.startswith("**/"):
        line = "**/" + line
    if line.endswith("/**"):
        line += "/*"  # everything inside, not the directory itself
    return Rule(GlobMatcher(_translate(line, "rg", quirk=False)), whitelist, dir_only)


class Rules:
    """The rules of one ignore file (or list of globs), matched against paths relative to its directory."""

    def __init__(self, lines: list[str], dialect: Dialect = "rg") -> None:
        self.rules = [rule for rule in (parse_rule(line, dialect) for line in lines) if rule is not None]

    @classmethod
    def parse(cls, data: bytes | None, dialect: Dialect) -> Rules | None:
        """The rules in an ignore file's bytes; None for None, more than :data:`MAX_IGNORE_BYTES` or no rules."""
        if data is None or len(data) > MAX_IGNORE_BYTES:
            return None
        rules = cls(_lines(data, dialect), dialect)
        return rules if rules.rules else None

    @classmethod
    def read(
        cls,
        file: str,
        dialect: Dialect,
        *,
        dir_fd: int | None = None,
        follow_symlinks: bool = False,
        within: Sequence[str] = (),
    ) -> Rules | None:
        """The rules in ``file`` (relative to ``dir_fd`` when given), read by :func:`read_regular`; None
        when it is not a regular file, is bigger than :data:`MAX_IGNORE_BYTES` or has no rules."""
        data = read_regular(file, MAX_IGNORE_BYTES, dir_fd=dir_fd, follow_symlinks=follow_symlinks, within=within)
        return cls.parse(data, dialect)

    def match(self, relative: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included (``!``); None: no rule matches. The last match wins."""
        view = byte_view(relative)
        for rule in reversed(self.rules):
            if (is_dir or not rule.dir_only) and rule.glob.fullmatch(view):
                return not rule.whitelist
        return None


def _lines(data: bytes, dialect: Dialect) -> list[str]:
    if dialect == "git":
        # git splits on LF, drops a CR before it and a UTF-8 BOM at the start, and compares bytes.
        data = data.removeprefix(codecs.BOM_UTF8)
        return [raw.removesuffix(b"\r").decode("utf-8", "surrogateescape") for raw in data.split(b"\n")]
    lines: list[str] = []
    raws = data.split(b"\n")
    for number, raw in enumerate(raws):
        try:
            # Rust's BufRead::lines drops "\n" or "\r\n"; the crate stops reading at a line not UTF-8.
            lines.append((raw.removesuffix(b"\r") if number < len(raws) - 1 else raw).decode("utf-8"))
        except UnicodeDecodeError:
            break
    return lines


Stack = list[tuple[int, Rules]]
"""The ignore files that apply to a path, outermost first: (where, in the path, the part relative to the
file's directory starts; its rules)."""


def ignored_by(stack: Stack, path: str, is_dir: bool) -> bool:
    """Whether ``stack`` ignores ``path`` itself (its parents not considered): the innermost file with an
    opinion decides, as in git and ripgrep."""
    for cut, rules in reversed(stack):
        verdict = rules.match(path[cut:], is_dir)
        if verdict is not None:
            return verdict
    return False


# -- reading files the repository provides ---------------------------------------------------------

MAX_IGNORE_BYTES = 1024 * 1024
"""A bigger ignore file is not read (it is data, not rules): the biggest real ones are a few tens of KiB."""

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC  # a FIFO opens at once instead of waiting for a writer


def open_directory(path: str, *, dir_fd: int | None = None) -> int:
    """A descriptor (``O_RDONLY``, close-on-exec) of the directory ``path``, reached one component at a time
    without following a symbolic link: from ``/`` for an absolute path, else from ``dir_fd``.

    Raises OSError when a component is missing, is not a directory, or is a link (``ELOOP`` or
    ``ENOTDIR``), and for ``..`` (which could lead out). The caller closes the descriptor.
    """
    absolute = path.startswith("/")
    fd = os.open("/" if absolute else ".", _DIRECTORY_FLAGS, dir_fd=None if absolute else dir_fd)
    try:
        for name in path.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                raise OSError(errno.EINVAL, "a path with '..' is not walked", path)
            child = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: str,
    max_bytes: int,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
    within: Sequence[str] = (),
) -> bytes | None:
    """The first ``max_bytes + 1`` bytes of ``path`` (so the caller can tell a file over the cap), or None
    when it is not a regular file, cannot be read, or, given ``within`` (absolute, resolved directories),
    its real path is in none of them.

    For files the repository provides, read before anyone is asked: a FIFO, socket or device is never
    read and never waited on (checked before the open, which is non-blocking, and with ``fstat`` on the
    open descriptor, so a swap in between cannot win), and a link to ``/dev/zero`` or to a secret
    outside ``within`` reads nothing. A final symbolic link is followed only with ``follow_symlinks``.
    """
    try:
        link = stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        if link and not follow_symlinks:
            return None
        if not stat.S_ISREG(os.stat(path, dir_fd=dir_fd).st_mode):
            return None  # so most non-regular files are never even opened
        fd = os.open(path, _READ_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW), dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if within:
            real = _real_path(fd, path, dir_fd)
            # Where the OS cannot tell (no /proc), a file that was not a link is in the directory given.
            if not (_is_within(real, within) or (real is None and dir_fd is not None and not link)):
                return None
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _real_path(fd: int, path: str, dir_fd: int | None) -> str | None:
    """Where the open file ``fd`` really is (None if that cannot be told): the kernel's answer where there
    is one, which no rename or link swap after the open can change."""
    if sys.platform.startswith("linux"):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # no /proc: ask the path, and check it still leads to this file
    elif sys.platform == "darwin":
        import fcntl

        try:
            name: bytes = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024))  # type: ignore[attr-defined,unused-ignore]
            return os.fsdecode(name.split(b"\0", 1)[0])
        except OSError:
            pass
    if dir_fd is not None:
        return None
    real = os.path.realpath(path)
    try:
        return real if os.path.samestat(os.stat(real), os.fstat(fd)) else None
    except OSError:
        return None


def _is_within(path: str | None, directories: Sequence[str]) -> bool:
    if path is None:
        return False
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)


# -- what git ignores under a root ------------------------------------------------------------------

_EXCLUDE_KEY = "\x00exclude"  # no directory has this name


class GitIgnore:
    """What git would ignore under a root (an absolute, resolved directory): ``.gitignore`` files at any
    depth, then ``.git/info/exclude``.

    Contract: :meth:`is_ignored` answers for a path under the root as git does (the ``git`` dialect):
    ``.git`` itself is always ignored; a path is ignored when any directory above it is (git cannot
    re-include a file inside an excluded directory); otherwise the deepest ``.gitignore`` with a matching
    pattern decides (its last matching pattern, ``!`` re-including), then ``.git/info/exclude``. As in
    git, a ``.gitignore`` that is a symbolic link is not read. Not read: the global
    ``core.excludesFile``, which depends on the user's git config; not applied: ``core.ignoreCase``.
    Unlike git, a nested repository's files are answered for (by all the ``.gitignore`` files above
    them), and the root need not be a repository.

    ``.gitignore`` files are read lazily, once per directory, and cached; :meth:`forget` drops the cache
    when one changes (the root watcher calls it). Safe to call from several threads.
    """

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self._rules: dict[str, Rules | None] = {}
        self._lock = threading.Lock()  # the watcher asks from its thread, tools from theirs

    def is_ignored(self, path: str, *, is_dir: bool = False) -> bool:
        """Whether git ignores ``path`` (absolute, or relative to the root). Paths outside the root and
        the root itself are not ignored."""
        parts = self._parts(path)
        if not parts:
            return False
        if any(part.lower() == ".git" for part in parts):
            return True
        relative = "/".join(parts)
        exclude = self._load(_EXCLUDE_KEY)
        stack: Stack = [] if exclude is None else [(0, exclude)]
        start = 0  # where the current part starts in `relative`
        for depth, part in enumerate(parts):
            rules = self._load(relative[: max(start - 1, 0)])  # the .gitignore beside this part
            if rules is not None:
                stack.append((start, rules))
            end = start + len(part)
            if ignored_by(stack, relative[:end], is_dir or depth < len(parts) - 1):
                return True
            start = end + 1
        return False

    def forget(self, directory: str | None = None) -> None:
        """Re-read ``directory``'s ``.gitignore`` (absolute or relative) next time; all of them if None."""
        with self._lock:
            if directory is None:
                self._rules.clear()
                return
            parts = self._parts(directory)
            if parts is not None:
                self._rules.pop("/".join(parts), None)
                if parts == [".git", "info"] or parts == [".git"]:
                    self._rules.pop(_EXCLUDE_KEY, None)

    def _parts(self, path: str) -> list[str] | None:
        if not path.startswith("/"):
            return [part for part in path.split("/") if part and part != "."]
        if path == self.root:
            return []
        prefix = self.root if self.root == "/" else self.root + "/"
        if not path.startswith(prefix):
            return None
        return [part for part in path[len(prefix) :].split("/") if part]

    def _load(self, key: str) -> Rules | None:
        with self._lock:
            if key in self._rules:
                return self._rules[key]
        # The directories are walked from "/" without following links, so a directory swapped for a link
        # to elsewhere is not read from. git (2.32+) does not follow a .gitignore that is a link; it
        # follows .git/info/exclude, which is read here only if it stays inside the root.
        exclude = key == _EXCLUDE_KEY
        rules = None
        try:
            fd = open_directory(os.path.join(self.root, ".git", "info") if exclude else os.path.join(self.root, key))
        except OSError:
            pass
        else:
            try:
                if exclude:
                    rules = Rules.read("exclude", "git", dir_fd=fd, follow_symlinks=True, within=[self.root])
                else:
                    rules = Rules.read(".gitignore", "git", dir_fd=fd)
            finally:
                os.close(fd)
        with self._lock:
            self._rules[key] = rules
        return rules
