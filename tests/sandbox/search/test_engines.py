"""The search engines (refagent.sandbox.search) on real trees (``tmp_path``): ripgrep and the pure-Python
engine give the same results, and the glob rules they share.

Every parity test runs both engines on one tree (``tests/support/search_tree.py``) that has what differs
between naive walkers: nested and negated .gitignore rules, a nested repository, hidden files, binary files,
a .git directory, symlinks, CRLF and BOM-encoded text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refagent.errors import ToolError
from refagent.sandbox.disk.gitignore import GitIgnore
from refagent.sandbox.disk.globs import glob_regex
from refagent.sandbox.seams import Query
from refagent.sandbox.search.dispatch import search
from refagent.sandbox.search.python_engine import python_files, python_grep
from refagent.sandbox.search.ripgrep import rg_files, rg_grep
from refagent.tools.search import render
from tests.support.git import GIT, git_init, git_listing
from tests.support.search_tree import RG, make_tree, needs_rg, put, query

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


QUERIES = [
    query(),
    query(mode="files"),
    query(mode="count"),
    query("NEEDLE", case_insensitive=True),
    query("(?i)needle", mode="files"),
    query("^needle$"),
    query("needle$"),
    query(r"\bneedle\b", context=1),
    query("needle", context=2, globs=["*.txt"]),
    query("a.b", literal=True),
    query("a.b"),
    query("needle", globs=["*.py"]),
    query("needle", globs=["!*.txt"], mode="files"),
    query("needle", globs=["src/**"], mode="files"),
    query("needle", globs=["*.{py,md}"], mode="files"),
    query("needle", globs=["*.log"], mode="files"),
    query(r"\d+ needle \d+", mode="count"),
    query("caf"),  # invalid UTF-8 shows as U+FFFD in both (but rg's `.` never matches it: not compared)
    query("no such text anywhere"),
]


@needs_rg
@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.pattern}|{q.mode}|{q.globs}|{q.context}")
async def test_rg_and_python_agree(tree: Path, q: Query) -> None:
    assert RG is not None
    fast = await rg_grep(RG, q, str(tree), ".")
    slow = python_grep(q, str(tree), ".")
    assert sorted(fast.counts.items()) == sorted(slow.counts.items())
    assert {p: v for p, v in fast.lines.items()} == slow.lines
    assert render(fast, q, 200, "repo/") == render(slow, q, 200, "repo/")


@needs_rg
async def test_the_rules_hold(tree: Path) -> None:
    assert RG is not None
    hits = await rg_grep(RG, query(mode="files"), str(tree), ".")
    found = set(hits.counts)
    assert "src/a.py" in found
    assert "keep.log" in found
    assert ".hidden/secret.txt" in found
    assert "sub/anchored.txt" in found
    assert "nested/x.log" in found
    assert "crlf.txt" in found
    assert "bom16.txt" in found
    assert "bom8.txt" in found
    assert {"only_py/m.py", "only_py/deep/n.py"} <= found
    for ignored in (
        ".git/HEAD",
        "build/out.py",
        "src/x.log",
        "other.log",
        "anchored.txt",
        "docs/a/b.tmp",
        "docs/c.tmp",
        "nested/in/y.txt",
        "only_py/m.txt",
        "only_py/deep/n.txt",
        "bin.dat",
        "late_binary.dat",
        "link.py",
        "linkdir/a.py",
    ):
        assert ignored not in found, ignored


@needs_rg
@pytest.mark.parametrize("target", ["src", "only_py/deep", "nested"])
async def test_parity_in_a_subdirectory(tree: Path, target: str) -> None:
    """Searching below the repository's top still applies the ignore files above (up to the top)."""
    assert RG is not None
    q = query(mode="count")
    fast = await rg_grep(RG, q, str(tree / target), ".")
    slow = python_grep(q, str(tree / target), ".")
    assert fast.counts == slow.counts
    if target == "src":
        assert "x.log" not in fast.counts  # *.log from the top's .gitignore


@needs_rg
async def test_outside_a_repository_gitignore_is_not_used(tmp_path: Path) -> None:
    assert RG is not None
    put(tmp_path, "plain/.gitignore", "*.txt\n")
    put(tmp_path, "plain/a.txt", "needle\n")
    q = query(mode="files")
    fast = await rg_grep(RG, q, str(tmp_path / "plain"), ".")
    slow = python_grep(q, str(tmp_path / "plain"), ".")
    assert set(fast.counts) == set(slow.counts) == {"a.txt"}


@needs_rg
@pytest.mark.parametrize("pattern", ["*.py", "**/*.py", "src/*", "*.{txt,md}", "**/n.*", "docs/**", "*.log", "*"])
async def test_glob_engines_agree(tree: Path, pattern: str) -> None:
    assert RG is not None
    fast, _ = await rg_files(RG, [pattern], str(tree))
    slow, _ = python_files([pattern], str(tree))
    assert sorted(fast) == sorted(slow)


async def test_named_binary_file_is_skipped_by_both(tree: Path) -> None:
    for rg in (RG, None):
        hits = await search(query(mode="count"), str(tree), "bin.dat", rg)
        assert hits.counts == {}
        named = await search(query(mode="count"), str(tree / "src"), "x.log", rg)
        assert named.counts == {"x.log": 1}  # a named file is searched even if .gitignore'd


async def test_lookaround_runs_on_the_python_engine(tree: Path) -> None:
    hits = await search(query("needle(?=\\(\\))"), str(tree), ".", RG)
    assert hits.lines == {"src/a.py": [(3, True, "def needle():")]}


async def test_invalid_patterns_are_explained(tree: Path) -> None:
    for rg in (RG, None):
        with pytest.raises(ToolError, match=r"Invalid regular expression"):
            await search(query("foo("), str(tree), ".", rg)


# -- the tools --------------------------------------------------------------------------------------


# -- globs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "matches", "misses"),
    [
        ("*.py", ["a.py", ".py"], ["a/b.py", "a.pyc"]),
        ("**/*.py", ["a.py", "a/b.py", "a/b/c.py"], ["a.pyc"]),
        ("a/**", ["a/b", "a/b/c"], ["a", "b/a/c"]),
        ("a/**/b", ["a/b", "a/x/b", "a/x/y/b"], ["a/xb"]),
        ("?.txt", ["a.txt"], ["ab.txt", "/.txt"]),
        ("[ab].md", ["a.md", "b.md"], ["c.md"]),
        ("[!ab].md", ["c.md"], ["a.md"]),
        ("*.{ts,tsx}", ["a.ts", "a.tsx"], ["a.js"]),
        ("a**b", ["ab", "axxb"], ["a/b"]),
        ("\\*.md", ["*.md"], ["a.md"]),
    ],
)
def test_glob_regex(glob: str, matches: list[str], misses: list[str]) -> None:
    import re

    regex = re.compile(glob_regex(glob), re.DOTALL)
    for path in matches:
        assert regex.fullmatch(path), (glob, path)
    for path in misses:
        assert not regex.fullmatch(path), (glob, path)


# -- property: on random trees, the walker agrees with `rg --files` and GitIgnore with git ---------------

NAMES = st.sampled_from(["a", "b", "c.py", "d.txt", ".e", "f.log", "é.txt"])
RULES = st.sampled_from(
    [
        "*.py", "!c.py", "a/", "/b", "a/**", "**/d.txt", "!a/", "b/*.txt", "[ab]", "?", "*", "!*/", "!*.txt",
        "/a/b", "**/a", ".e", "!.e", "f.*", "# comment", "", "a/**/c.py", "\\!x",
        # where git and ripgrep read a line differently (each reader must follow its own):
        "{a,b}", "[[:alpha:]]", "?.txt", "***/c.py", "a**/d.txt", "b\t", "a\\/", "!", "c.py\\  ", "[!a]",
    ]
)  # fmt: skip
TREES = st.lists(st.lists(NAMES, min_size=1, max_size=3), min_size=1, max_size=12)
IGNORES = st.dictionaries(st.sampled_from(["", "a", "b", "a/b"]), st.lists(RULES, max_size=4), max_size=3)


@needs_rg
@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=TREES,
    ignores=IGNORES,
    exclude=st.lists(RULES, max_size=2),
    glob=st.sampled_from([None, "*.py", "!*.txt", "a/*", "**/b/*"]),
)
def test_walker_matches_rg_files(
    files: list[list[str]], ignores: dict[str, list[str]], exclude: list[str], glob: str | None
) -> None:
    """Also, with git installed: GitIgnore agrees with ``git ls-files --others --exclude-standard``
    (``.git/info/exclude`` included, which the search tools skip as ``rg`` is told to)."""
    import anyio

    assert RG is not None
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        git_init(root)
        (root / ".git" / "info" / "exclude").write_text("\n".join(exclude) + "\n")
        for parts in files:
            path = root.joinpath(*parts)
            if any(p.is_file() for p in path.parents if p != root) or path.is_dir():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x\n")
        for directory, rules in ignores.items():
            try:
                (root / directory).mkdir(parents=True, exist_ok=True)
                (root / directory / ".gitignore").write_text("\n".join(rules) + "\n")
            except OSError:  # a file is in the way: this .gitignore cannot exist
                continue
        globs = [glob] if glob else []
        fast, _ = anyio.run(rg_files, RG, globs, temp)
        slow, _ = python_files(globs, temp)
        assert sorted(fast) == sorted(slow)
        if GIT is not None:
            untracked, kept = git_listing(root)
            watcher = GitIgnore(temp)
            assert {path for path in untracked if not watcher.is_ignored(path)} == kept


LINES = st.lists(st.sampled_from(["a", "b", "ab", "ba b", "", "a\r", "AB", " a", "x" * 3]), max_size=12)
PATTERNS = st.sampled_from(["a", "^a", "b$", "a+b", r"\bab\b", "(?i)ab", "^$", r"a\s", "x{2}"])


@needs_rg
@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(files=st.lists(LINES, min_size=1, max_size=3), pattern=PATTERNS, context=st.integers(0, 2))
def test_grep_engines_agree_on_random_text(files: list[list[str]], pattern: str, context: int) -> None:
    import anyio

    assert RG is not None
    with tempfile.TemporaryDirectory() as temp:
        for index, lines in enumerate(files):
            Path(temp, f"f{index}.txt").write_bytes("".join(line + "\n" for line in lines).encode())
        for mode in ("content", "count"):
            q = query(pattern, context=context, mode=mode)
            fast = anyio.run(rg_grep, RG, q, temp, ".")
            slow = python_grep(q, temp, ".")
            assert fast.counts == slow.counts
            assert fast.lines == slow.lines
