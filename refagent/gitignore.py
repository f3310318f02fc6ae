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

The module is ~480 lines: one reader for both dialects keeps each difference a branch, side by side,
checked against git and ``rg`` themselves on random trees (``tests/test_tools_search.py``).
"""

from __future__ import annotations

import codecs
import os
import re
import threading
from dataclasses import dataclass
from typing import Literal

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
    (ripgrep reports an error for it; git reads it as matching nothing).
    """
    return _translate(glob, dialect, quirk=False)


def _translate(glob: str, dialect: Dialect, *, quirk: bool) -> str:
    git = dialect == "git"
    if not git and glob in ("**", "**/"):
        return ".*"  # globset: a lone recursive prefix matches everything
    if git:
        glob = byte_view(glob)  # wildmatch reads bytes; globset reads characters (and emits their bytes)
    starts = {0}
    if quirk:
        # git matches a pattern's literal head with a plain compare, then the rest with wildmatch, where
        # a leading `**` counts as at the start: `x**/a` matches `x/y/a`.
        starts.add(next((i for i, char in enumerate(glob) if char in "*?[\\"), 0))
    out: list[str] = []
    index = 0
    depth = 0  # inside {a,b} (rg)
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
                    out.append("(?:.*/)?")
                    end += 1
                else:  # `/**` at the end: everything below
                    out.append(".*")
            else:
                out.append("[^/]*")
            index = end
            continue
        if char == "?":
            out.append("[^/]")
        elif char == "[":
            regex, index = _git_class(glob, index) if git else _rg_class(glob, index)
            out.append(regex)
            continue
        elif char == "{" and not git:
            if depth:
                raise ValueError(f"The glob {glob!r} nests {{...}} groups, which is not supported.")
            depth += 1
            out.append("(?:")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        elif char == "," and depth:
            out.append("|")
        elif char == "\\":
            index += 1
            if index == length:
                raise ValueError(f"The glob {glob!r} ends with a lone '\\'.")
            out.append(_literal(glob[index], git))
        else:
            out.append(_literal(char, git))
        index += 1
    if depth:
        raise ValueError(f"The glob {glob!r} has an unclosed '{{'.")
    return "".join(out)


def _literal(char: str, git: bool) -> str:
    return re.escape(char if git else byte_view(char))


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
    body = "".join(_literal(low, False) + ("" if low == high else "-" + _literal(high, False)) for low, high in ranges)
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


# -- rules -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    regex: re.Pattern[str]
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
        regex = _translate(line.removeprefix("/"), "git", quirk=True)
    else:  # matched against the name alone, at any depth
        regex = "(?:.*/)?" + _translate(line, "git", quirk=False)
    return Rule(re.compile(regex, re.DOTALL), whitelist, dir_only)


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
    return Rule(re.compile(_translate(line, "rg", quirk=False), re.DOTALL), whitelist, dir_only)


class Rules:
    """The rules of one ignore file (or list of globs), matched against paths relative to its directory."""

    def __init__(self, lines: list[str], dialect: Dialect = "rg") -> None:
        self.rules = [rule for rule in (parse_rule(line, dialect) for line in lines) if rule is not None]

    @classmethod
    def read(
        cls, file: str, dialect: Dialect, *, max_bytes: int | None = None, follow_symlinks: bool = True
    ) -> Rules | None:
        """The rules in ``file``; None when it cannot be read, is over ``max_bytes`` or has no rules."""
        try:
            flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
            with open(os.open(file, flags), "rb") as handle:
                data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
        except OSError:
            return None
        if max_bytes is not None and len(data) > max_bytes:
            return None
        rules = cls(_lines(data, dialect), dialect)
        return rules if rules.rules else None

    def match(self, relative: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included (``!``); None: no rule matches. The last match wins."""
        view = byte_view(relative)
        for rule in reversed(self.rules):
            if (is_dir or not rule.dir_only) and rule.regex.fullmatch(view):
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


# -- what git ignores under a root ------------------------------------------------------------------

_MAX_BYTES = 1024 * 1024
"""A bigger ``.gitignore`` is not read (it is data, not rules)."""

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
        if key == _EXCLUDE_KEY:
            rules = Rules.read(os.path.join(self.root, ".git", "info", "exclude"), "git", max_bytes=_MAX_BYTES)
        else:
            # git (2.32+) does not follow a .gitignore that is a symbolic link.
            file = os.path.join(self.root, key, ".gitignore")
            rules = Rules.read(file, "git", max_bytes=_MAX_BYTES, follow_symlinks=False)
        with self._lock:
            self._rules[key] = rules
        return rules
