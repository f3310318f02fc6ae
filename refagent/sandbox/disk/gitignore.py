r"""``.gitignore`` rules: one reader and matcher, in the two dialects refagent must agree with.

- ``git``: what git ignores (``git status``). :class:`GitIgnore` answers this way, for the root watcher
  (:mod:`refagent.sandbox.disk.watcher`).
- ``rg``: what ripgrep ignores (its ``ignore`` crate; ``-g`` globs too). The search engines' Python
  walker (:mod:`refagent.sandbox.search.walk`) reads ``.gitignore`` files this way, so that it lists
  what ``rg`` lists.

Each line is a glob (:mod:`refagent.sandbox.disk.globs`, where the two dialects' globs are told apart) with
the ``.gitignore`` syntax around it: ``#`` comments, ``!`` to re-include, a trailing ``/`` for
directories only, a slash anchoring the pattern at the file's directory. They agree on every common
line. Where they read lines and files differently (each is a branch below)::

    line                   git                                       rg
    "a<tab>", "a\  "       tab kept; "a " (only unescaped spaces     "a"; nothing (a lone \)
                           at the end go)
    dir\/                  never matches                             the directory dir
    ! alone                nothing                                   re-includes everything
    UTF-8 BOM              skipped                                   part of the first pattern
    a line not UTF-8       a pattern like the others                 ends the file
    .gitignore a symlink   not read                                  read

A line the dialect rejects (an unclosed ``[``, a trailing ``\``) is skipped, as both skip it. Ignore
files are untrusted (they come with the repository): they are read by
:func:`~refagent.sandbox.disk.safe_open.read_regular` (only regular files, without blocking, within
:data:`MAX_IGNORE_BYTES`) and matched in linear time (:class:`~refagent.sandbox.disk.globs.GlobMatcher`).

One reader for both dialects keeps each difference a branch, side by side, checked against git and
``rg`` themselves on random trees (``tests/tools/test_search.py``).
"""

from __future__ import annotations

import codecs
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from refagent.sandbox.disk.globs import DIRS, Dialect, GlobMatcher, byte_view, translate
from refagent.sandbox.disk.safe_open import open_directory, read_regular

_RUST_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
_RUST_WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"
"""What Rust's ``str::trim_end`` drops (Unicode White_Space; Python's ``str.rstrip`` also drops ``\\x1c-\\x1f``)."""

MAX_IGNORE_BYTES = 1024 * 1024
"""A bigger ignore file is not read (it is data, not rules): the biggest real ones are a few tens of KiB."""


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
        tokens = translate(line.removeprefix("/"), "git", quirk=True)
    else:  # matched against the name alone, at any depth
        tokens = [DIRS, *translate(line, "git", quirk=False)]
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
    return Rule(GlobMatcher(translate(line, "rg", quirk=False)), whitelist, dir_only)


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
