"""gitignore rules (refagent.sandbox.disk.gitignore, and its globs: refagent.sandbox.disk.globs): GitIgnore on a
fake file system, then both dialects on real trees, checked against git and ripgrep themselves when they
are installed.

The root watcher asks :class:`GitIgnore` (the ``git`` dialect); the search engines' Python walker reads the
same rules in the ``rg`` dialect. The random-tree test in ``test_tools_search.py`` checks both against
git and ripgrep; the tables here pin the patterns where the two used to disagree and where git and
ripgrep themselves do.
"""

from __future__ import annotations

import functools
import os
import re
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem

from refagent.sandbox.disk.gitignore import MAX_IGNORE_BYTES, GitIgnore, Rules, parse_rule
from refagent.sandbox.disk.globs import (
    DIRS,
    Dialect,
    GlobMatcher,
    _automaton,
    _regex,
    _run,
    _simplify,
    byte_view,
    translate,
)
from refagent.sandbox.disk.safe_open import read_regular
from refagent.sandbox.search.dispatch import list_files
from refagent.sandbox.search.python_engine import python_files
from refagent.sandbox.search.ripgrep import find_rg, rg_files
from tests.support.git import GIT, git_init, git_listing

ROOT = "/repo"
RG = find_rg()


# -- GitIgnore on a fake file system ---------------------------------------------------------------


@pytest.fixture
def rules(fs: FakeFilesystem) -> GitIgnore:
    fs.create_file(f"{ROOT}/.gitignore", contents="*.log\n!keep.log\nbuild/\n/top-only.txt\nsecret/\n# comment\n")
    fs.create_file(f"{ROOT}/sub/.gitignore", contents="!debug.log\nlocal.txt\n")
    fs.create_file(f"{ROOT}/.git/info/exclude", contents="excluded.txt\n")
    return GitIgnore(ROOT)


@pytest.mark.parametrize(
    ("path", "is_dir", "ignored"),
    [
        ("app.py", False, False),
        ("app.log", False, True),
        ("deep/er/app.log", False, True),
        ("keep.log", False, False),
        ("build", True, True),
        ("build", False, False),  # a file named build: "build/" matches directories only
        ("build/out.o", False, True),
        ("src/build/out.o", False, True),
        ("top-only.txt", False, True),
        ("src/top-only.txt", False, False),
        ("sub/debug.log", False, False),  # the deeper .gitignore re-includes it
        ("sub/other.log", False, True),
        ("sub/local.txt", False, True),
        ("local.txt", False, False),
        ("secret/!keep.txt", False, True),
        ("excluded.txt", False, True),
        (".git", True, True),
        (".git/config", False, True),
        ("sub/.git/HEAD", False, True),
        (".gitignore", False, False),
    ],
)
def test_is_ignored(rules: GitIgnore, path: str, is_dir: bool, ignored: bool) -> None:
    assert rules.is_ignored(path, is_dir=is_dir) is ignored
    assert rules.is_ignored(f"{ROOT}/{path}", is_dir=is_dir) is ignored


def test_a_file_in_an_excluded_directory_cannot_be_re_included(fs: FakeFilesystem) -> None:
    fs.create_file(f"{ROOT}/.gitignore", contents="vendor/\n!vendor/keep.txt\n")
    assert GitIgnore(ROOT).is_ignored("vendor/keep.txt")


def test_outside_and_the_root_itself_are_not_ignored(rules: GitIgnore) -> None:
    assert not rules.is_ignored("/elsewhere/app.log")
    assert not rules.is_ignored(ROOT, is_dir=True)


def test_forget_rereads_a_changed_gitignore(fs: FakeFilesystem, rules: GitIgnore) -> None:
    assert not rules.is_ignored("notes.md")
    fs.remove(f"{ROOT}/.gitignore")
    fs.create_file(f"{ROOT}/.gitignore", contents="*.md\n")
    assert not rules.is_ignored("notes.md")  # cached
    rules.forget(ROOT)
    assert rules.is_ignored("notes.md")


def test_a_broken_gitignore_does_not_break_the_rules(fs: FakeFilesystem) -> None:
    fs.create_file(f"{ROOT}/.gitignore", contents=b"*.tmp\n\xff\xfe\n[z-a]\n[unclosed\ntrailing\\\n")
    assert GitIgnore(ROOT).is_ignored("x.tmp")
    assert GitIgnore(ROOT).is_ignored("z")  # git reads [z-a] as "z", then an empty range


def test_an_oversized_gitignore_is_not_read(fs: FakeFilesystem) -> None:
    fs.create_file(f"{ROOT}/.gitignore", contents="*.tmp\n" + "#" * (1024 * 1024))
    assert not GitIgnore(ROOT).is_ignored("x.tmp")


@pytest.mark.parametrize(
    ("line", "matches", "misses"),
    [
        ("[[:digit:]x]", ["1", "x"], ["a"]),
        ("[[:space:]]", ["\t", " "], ["\x0b", "a"]),  # git's own ctype: no \v
        ("[[:punct:]]", ["_", "~", "!"], ["a", "0"]),
        ("[\\]]", ["]"], ["\\"]),
        ("[a-]", ["a", "-"], ["b"]),
        ("[]a]", ["]", "a"], ["b"]),
        ("[!]a]", ["b"], ["]", "a"]),
        ("a\\ ", ["a "], ["a"]),
        ("a\\  ", ["a "], ["a", "a  "]),  # the escaped space stays, the unescaped one goes
    ],
)
def test_git_classes_and_escapes(line: str, matches: list[str], misses: list[str]) -> None:
    rules = Rules([line], "git")
    for name in matches:
        assert rules.match(name, False), (line, name)
    for name in misses:
        assert rules.match(name, False) is None, (line, name)


@pytest.mark.parametrize("line", ["", "#", "   ", "!", "/", "a[", "a\\", "[[:nope:]]", "[[:alpha:]"])
def test_lines_that_are_not_rules(line: str) -> None:
    assert parse_rule(line, "git") is None


# -- both dialects on real trees, against git and ripgrep ------------------------------------------


def _tree(root: Path, gitignore: str | bytes, path: str) -> None:
    git_init(root)
    (root / ".gitignore").write_bytes(gitignore.encode() if isinstance(gitignore, str) else gitignore)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text("x\n")


def _answers(root: Path, path: str) -> dict[str, bool]:
    """Whether each matcher ignores ``path``: refagent's two, and git and rg when they are installed."""
    answers = {"watcher": GitIgnore(str(root)).is_ignored(path), "walker": path not in python_files([], str(root))[0]}
    if GIT is not None:
        answers["git"] = path not in git_listing(root)[1]
    if RG is not None:
        answers["rg"] = path not in anyio.run(rg_files, RG, [], str(root))[0]
    return answers


AGREED = [
    # pathspec, the watcher's old matcher, let a class match the `/` after a directory's name:
    ("x[!b]\n", "x/a.txt", False),
    ("?[!a]\n", "x/b", False),
    ("/**x[!a]\n", "x/b", False),
    ("x\\/a\n", "x/a", True),  # an escaped slash is a slash (pathspec: no match)
    # The walker used to read these differently from ripgrep:
    ("caf?\n", "café", False),  # `?` is one byte: é is two
    ("k[é]\n", "ké", False),  # a class is a set of bytes
    ("a[\n", "a[", False),  # an unclosed class: the line is skipped, not read literally
    ("c\\\n", "c\\", False),  # so is a trailing backslash
    ("k[!x]\n", "ké", False),
]


@pytest.mark.parametrize(("gitignore", "path", "ignored"), AGREED)
def test_the_watcher_and_the_walker_agree(tmp_path: Path, gitignore: str, path: str, ignored: bool) -> None:
    """Where git and ripgrep agree, refagent's two matchers give their answer."""
    _tree(tmp_path, gitignore, path)
    answers = _answers(tmp_path, path)
    assert answers == dict.fromkeys(answers, ignored)


DIALECTS: list[tuple[str | bytes, str, bool, bool]] = [
    # (.gitignore, path, git ignores it, ripgrep ignores it)
    ("{a,b}\n", "a", False, True),
    ("{a,b}\n", "{a,b}", True, False),
    ("[[:alpha:]]\n", "a", True, False),
    ("[\\#]\n", "\\", False, True),
    ("x[!a]b\n", "x/b", False, True),
    ("[b-c-e]\n", "d", False, True),
    ("***/a\n", "x/y/a", True, False),
    ("x**/a\n", "xy/z/a", True, False),
    ("a\t\n", "a", False, True),
    ("a\\  \n", "a ", True, False),
    ("a\\/\n", "a/f", False, True),
    ("x\n!\n", "x/f", True, False),
    ("\ufeffa\n", "a", True, False),
    (b"a\n\xff\nb\n", "b", True, False),
]


@pytest.mark.parametrize(("gitignore", "path", "git", "rg"), DIALECTS)
def test_where_git_and_ripgrep_differ(tmp_path: Path, gitignore: str | bytes, path: str, git: bool, rg: bool) -> None:
    """The watcher answers as git does, the walker as ripgrep does."""
    _tree(tmp_path, gitignore, path)
    answers = _answers(tmp_path, path)
    expected = {"watcher": git, "git": git, "walker": rg, "rg": rg}
    assert answers == {matcher: expected[matcher] for matcher in answers}


def test_git_does_not_follow_a_symlinked_gitignore(tmp_path: Path) -> None:
    _tree(tmp_path / "repo", "", "a.log")
    (tmp_path / "repo" / "rules").write_text("*.log\n")
    (tmp_path / "repo" / ".gitignore").unlink()
    (tmp_path / "repo" / ".gitignore").symlink_to(tmp_path / "repo" / "rules")
    answers = _answers(tmp_path / "repo", "a.log")
    assert answers == {"watcher": False, "walker": True} | {
        k: v for k, v in (("git", False), ("rg", True)) if k in answers
    }


def test_a_symlinked_gitignore_is_followed_only_into_the_roots(tmp_path: Path) -> None:
    """ripgrep follows the link anywhere; the walker reads nothing outside the roots without asking, and
    the search tools then leave such a tree to the walker, so both engines list the same files."""
    _tree(tmp_path / "repo", "", "a.log")
    (tmp_path / "rules").write_text("*.log\n")
    (tmp_path / "repo" / ".gitignore").unlink()
    (tmp_path / "repo" / ".gitignore").symlink_to(tmp_path / "rules")
    root = str(tmp_path / "repo")
    assert "a.log" in python_files([], root)[0]
    assert "a.log" not in python_files([], root, confine=[str(tmp_path)])[0]  # inside these roots: followed
    for rg in (RG, None):
        assert "a.log" in anyio.run(functools.partial(list_files, [], root, rg, roots=[root]))[0]


# -- bounded time, careful reading: the repository is untrusted ------------------------------------------

GLOB_PARTS = st.sampled_from(
    ["a", "b", "/", "*", "**", "**/", "/**", "?", "[ab]", "[!a]", "{a,b*}", "{,a/}", "\\*", "é"]
)
SUBJECTS = st.text(alphabet="ab/*é", max_size=12).map(byte_view)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(parts=st.lists(GLOB_PARTS, max_size=7), subjects=st.lists(SUBJECTS, min_size=1, max_size=8))
def test_the_automaton_matches_what_the_regex_matches(parts: list[str], subjects: list[str]) -> None:
    """The two engines of GlobMatcher agree with the glob's regex, on every glob, in both dialects."""
    glob = "".join(parts)
    for dialect in ("git", "rg"):
        try:
            tokens = translate(glob, dialect, quirk=False)
        except ValueError:
            continue
        for shape in (tokens, [DIRS, *tokens]):  # as written, and as a pattern without a slash is read
            regex = re.compile(_regex(shape), re.DOTALL)
            program = _automaton(shape)
            simplified = _automaton(_simplify(shape))
            matcher = GlobMatcher(shape)
            for subject in subjects:
                expected = regex.fullmatch(subject) is not None
                assert _run(program, subject) is expected, (glob, dialect, subject)
                assert _run(simplified, subject) is expected, (glob, dialect, subject)
                assert matcher.fullmatch(subject) is expected, (glob, dialect, subject)


PATHOLOGICAL = [
    # (glob, matching paths, paths that do not match): each took minutes to forever with a backtracking regex
    ("*a*a*a*a*a*a*a*a*a*a*a*a*b", ["a" * 12 + "b", "x/" + "a" * 4000 + "b"], ["a" * 4000, "a" * 30 + "!"]),
    ("/**/a/**/a/**/a/**/a/**/a/**/b", ["a/" * 5 + "b", "a/" * 2000 + "b"], ["a/" * 2000 + "c", "a/a/b"]),
    ("a*" * 200 + "b", ["a" * 200 + "b", "a" * 4000 + "b"], ["a" * 4000, "a" * 199 + "b"]),
]


@pytest.mark.parametrize("dialect", ["git", "rg"])
@pytest.mark.parametrize(("glob", "matches", "misses"), PATHOLOGICAL, ids=lambda value: str(value)[:12])
def test_a_pathological_glob_is_matched_in_linear_time(
    glob: str, matches: list[str], misses: list[str], dialect: Dialect
) -> None:
    """The first took 213 s on one name of 30 a's. The deadline is generous: the matcher takes milliseconds."""
    rules = Rules([glob], dialect)
    started = time.monotonic()
    for path in matches:
        assert rules.match(path, False) is True, path[:20]
    for path in misses:
        assert rules.match(path, False) is None, path[:20]
    assert time.monotonic() - started < 5


def test_alternatives_that_multiply_are_matched_in_linear_time() -> None:
    rules = Rules(["{a,a}" * 24 + "b"], "rg")  # 2**24 ways for a regex to fail
    started = time.monotonic()
    assert rules.match("a" * 24 + "b", False) is True
    assert rules.match("a" * 24 + "!", False) is None
    assert rules.match("a" * 25 + "b", False) is None
    assert time.monotonic() - started < 5


def test_the_watcher_matches_a_pathological_gitignore_quickly(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*a*a*a*a*a*a*a*a*a*a*a*a*b\n")
    rules = GitIgnore(str(tmp_path))
    started = time.monotonic()
    assert not rules.is_ignored("a" * 40)
    assert rules.is_ignored("d/" + "a" * 40 + "b")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("kind", ["fifo", "zero", "outside", "huge", "directory"])
def test_a_hostile_gitignore_is_not_read(tmp_path: Path, kind: str) -> None:
    """Neither waited on (a FIFO), nor read without end (a link to /dev/zero), nor followed (git does not
    follow a linked .gitignore), nor read when bigger than the cap. No rule from it applies."""
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "rules").write_text("*.log\n")
    ignore = root / "sub" / ".gitignore"
    if kind == "fifo":
        os.mkfifo(ignore)
    elif kind == "zero":
        ignore.symlink_to("/dev/zero")
    elif kind == "outside":
        ignore.symlink_to(tmp_path / "rules")
    elif kind == "huge":
        ignore.write_text("*.log\n" + "#" * MAX_IGNORE_BYTES)
    else:
        ignore.mkdir()
    started = time.monotonic()
    assert not GitIgnore(str(root)).is_ignored("sub/a.log")
    assert Rules.read(str(ignore), "rg", follow_symlinks=True, within=[str(root)]) is None
    assert time.monotonic() - started < 5


def test_a_directory_swapped_for_a_link_is_not_read_through(tmp_path: Path) -> None:
    """GitIgnore walks from the root without following links: a directory that became a link to
    elsewhere does not lend it that place's .gitignore."""
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / ".gitignore").write_text("*.log\n")
    (root / "sub").symlink_to(tmp_path / "elsewhere")
    assert not GitIgnore(str(root)).is_ignored("sub/a.log")


def test_read_regular_reads_at_most_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_regular(str(path), 10) == b"x" * 11  # one more: the caller can tell it is over
    assert read_regular(str(path), 1000) == b"x" * 100
    link = tmp_path / "link"
    link.symlink_to(path)
    assert read_regular(str(link), 1000) is None  # not followed unless asked
    assert read_regular(str(link), 1000, follow_symlinks=True, within=[str(tmp_path)]) == b"x" * 100
    assert read_regular(str(link), 1000, follow_symlinks=True, within=[str(tmp_path / "other")]) is None
