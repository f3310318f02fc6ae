"""gitignore rules (refagent.gitignore): GitIgnore on a fake file system, then both dialects on real trees,
checked against git and ripgrep themselves when they are installed.

The root watcher asks :class:`GitIgnore` (the ``git`` dialect); the search tools' Python walker reads the
same rules in the ``rg`` dialect. The random-tree test in ``test_tools_search.py`` checks both against
git and ripgrep; the tables here pin the patterns where the two used to disagree and where git and
ripgrep themselves do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from refagent.gitignore import GitIgnore, Rules, parse_rule
from refagent.tools.search import find_rg, python_files, rg_files

ROOT = "/repo"
GIT = shutil.which("git")
RG = find_rg()


def git_init(root: Path) -> None:
    """Make ``root`` a repository: with git when it is installed (it is the oracle), else just ``.git``."""
    if GIT is None:
        (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    else:
        subprocess.run([GIT, "init", "-q", str(root)], env=_git_env(), check=True, capture_output=True)


def git_listing(root: Path) -> tuple[set[str], set[str]]:
    """(the untracked files, those git does not ignore) of the repository at ``root``, by git itself."""
    assert GIT is not None

    def listed(*options: str) -> set[str]:
        argv = [GIT, "-c", f"core.excludesFile={os.devnull}", "ls-files", "-z", "--others", *options]
        out = subprocess.run(argv, cwd=root, env=_git_env(), check=True, capture_output=True).stdout
        return {os.fsdecode(name) for name in out.split(b"\0") if name}

    return listed(), listed("--exclude-standard")


def _git_env() -> dict[str, str]:
    # The user's git config (a global excludes file, say) must not change the answers.
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


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
    (tmp_path / "rules").write_text("*.log\n")
    (tmp_path / "repo" / ".gitignore").unlink()
    (tmp_path / "repo" / ".gitignore").symlink_to(tmp_path / "rules")
    answers = _answers(tmp_path / "repo", "a.log")
    assert answers == {"watcher": False, "walker": True} | {
        k: v for k, v in (("git", False), ("rg", True)) if k in answers
    }
