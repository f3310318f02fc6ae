"""glob and grep on real trees (``tmp_path``): ripgrep and the pure-Python engine give the same results.

Every parity test runs both engines on one tree that has what differs between naive walkers: nested and
negated .gitignore rules, a nested repository, hidden files, binary files, a .git directory, symlinks,
CRLF and BOM-encoded text.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refagent.disk.gitignore import GitIgnore
from refagent.disk.globs import glob_regex
from refagent.disk.policy import RootPolicy
from refagent.errors import ToolError
from refagent.seams import Hits, Query
from refagent.search.dispatch import LocalSearch, search
from refagent.search.python_engine import python_files, python_grep
from refagent.search.ripgrep import find_rg, rg_files, rg_grep
from refagent.tools.search import Glob, Grep, render
from tests.support.git import GIT, git_init, git_listing
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio

RG = find_rg()
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")


def put(root: Path, relative: str, data: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    put(root, ".git/HEAD", "ref: needle\n")
    put(root, ".git/objects/x", "needle\n")
    put(root, ".gitignore", "build/\n*.log\n!keep.log\n/anchored.txt\ndocs/**/*.tmp\n")
    put(root, "src/a.py", "import os\n\ndef needle():\n    return 'needle'\n# end\n")
    put(root, "src/b.py", "nothing here\nNEEDLE upper\n")
    put(root, "src/x.log", "needle in an ignored log\n")
    put(root, "build/out.py", "needle\n")
    put(root, "keep.log", "needle kept\n")
    put(root, "other.log", "needle ignored\n")
    put(root, "anchored.txt", "needle anchored\n")
    put(root, "sub/anchored.txt", "needle not anchored here\n")
    put(root, "docs/a/b.tmp", "needle\n")
    put(root, "docs/c.tmp", "needle\n")
    put(root, "docs/readme.md", "a.b needle\naxb\n")
    put(root, ".hidden/secret.txt", "needle hidden\n")
    put(root, ".env", "TOKEN=needle\n")
    put(root, "bin.dat", b"needle\n\x00\x01\x02needle\n")
    put(root, "late_binary.dat", b"needle\n" + b"x" * 200_000 + b"\n\x00needle\n")
    put(root, "nested/.git/HEAD", "x\n")
    put(root, "nested/.gitignore", "in/\n")
    put(root, "nested/x.log", "needle in a nested repo's log\n")
    put(root, "nested/in/y.txt", "needle\n")
    put(root, "only_py/.gitignore", "*\n!*/\n!*.py\n")
    put(root, "only_py/m.py", "needle\n")
    put(root, "only_py/m.txt", "needle\n")
    put(root, "only_py/deep/n.py", "needle\n")
    put(root, "only_py/deep/n.txt", "needle\n")
    put(root, "crlf.txt", "needle\r\nfoo needle\r\nbar\r\n")
    put(root, "bom8.txt", b"\xef\xbb\xbfneedle with a BOM\n")
    put(root, "bom16.txt", "needle in UTF-16\n".encode("utf-16"))
    put(root, "latin1.txt", b"caf\xe9 needle\n")
    put(root, "many.txt", "".join(f"{n} needle {n}\n" if n % 3 == 0 else f"{n} filler\n" for n in range(1, 60)))
    os.symlink(root / "src" / "a.py", root / "link.py")
    os.symlink(root / "src", root / "linkdir")
    return root


def query(pattern: str = "needle", **options: object) -> Query:
    return Query(
        pattern=pattern,
        literal=bool(options.get("literal", False)),
        case_insensitive=bool(options.get("case_insensitive", False)),
        context=int(options.get("context", 0)),  # type: ignore[call-overload]
        mode=options.get("mode", "content"),  # type: ignore[arg-type]
        globs=list(options.get("globs", [])),  # type: ignore[call-overload]
    )


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


@pytest.mark.parametrize("engine", ["rg", pytest.param("python", marks=pytest.mark.slow)])  # a process a call
async def test_grep_tool_output(tree: Path, engine: str) -> None:
    if engine == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    tool = Grep()
    ctx = make_ctx(str(tree.parent), search=LocalSearch(RG if engine == "rg" else None))
    result = await call(tool, ctx, pattern="needle", path="repo/src")
    assert result.output == "repo/src/a.py:3:def needle():\nrepo/src/a.py:4:    return 'needle'"
    with_context = await call(tool, ctx, pattern="return", path="repo/src", context=1)
    assert (
        with_context.output
        == "repo/src/a.py-3-def needle():\nrepo/src/a.py:4:    return 'needle'\nrepo/src/a.py-5-# end"
    )
    one_file = await call(tool, ctx, pattern="upper", path="repo/src/b.py", output_mode="count")
    assert one_file.output == "repo/src/b.py:1\n\n(1 matching line in 1 file.)"
    capped = await call(tool, ctx, pattern="needle", path="repo/many.txt", max_results=5)
    lines = capped.output.splitlines()
    assert lines[:5] == [f"repo/many.txt:{n}:{n} needle {n}" for n in (3, 6, 9, 12, 15)]
    assert "Showing 5 of 19 matching lines in 1 file" in capped.output
    none = await call(tool, ctx, pattern="zzz_nothing", path="repo")
    assert none.output == "No matches for `zzz_nothing`."


async def test_grep_tool_errors_and_permission(tree: Path) -> None:
    ctx = make_ctx(str(tree / "src"))
    with pytest.raises(ToolError, match=r"Not found"):
        await Grep().prepare({"pattern": "x", "path": "missing"}, ctx)
    with pytest.raises(ToolError, match=r"output_mode"):
        await Grep().prepare({"pattern": "x", "output_mode": "lines"}, ctx)
    with pytest.raises(ToolError, match=r"nests"):
        await Grep().prepare({"pattern": "x", "glob": "{a,{b,c}}"}, ctx)
    outside = await Grep().prepare({"pattern": "q", "path": str(tree / "docs")}, ctx)
    assert outside.outside
    assert outside.permission_key == f"read-outside-tree:{tree / 'docs'}"
    result = await outside.execute()
    assert result.output == "No matches for `q`."
    result = await call(Grep(), ctx, pattern="a.b", path=str(tree / "docs"), literal=True)
    assert result.output == f"{tree}/docs/readme.md:1:a.b needle"


@pytest.mark.parametrize("engine", ["rg", "python"])
async def test_glob_tool(tree: Path, engine: str) -> None:
    if engine == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    tool = Glob()
    ctx = make_ctx(str(tree), search=LocalSearch(RG if engine == "rg" else None))
    result = await call(tool, ctx, pattern="**/*.py")
    assert result.output.splitlines() == ["only_py/deep/n.py", "only_py/m.py", "src/a.py", "src/b.py"]
    assert (await call(tool, ctx, pattern="*.py", path="src")).output == "src/a.py\nsrc/b.py"
    absolute = await call(tool, ctx, pattern=f"{tree}/only_py/*.py")
    assert absolute.output == "only_py/m.py"  # not only_py/deep/n.py: the pattern is anchored there
    deep = await call(tool, ctx, pattern=f"{tree}/only_py/**/*.py")
    assert deep.output == "only_py/deep/n.py\nonly_py/m.py"
    one = await call(tool, ctx, pattern=f"{tree}/src/a.py")
    assert one.output == "src/a.py"
    none = await call(tool, ctx, pattern="*.rs")
    assert none.output == "No files match `*.rs`."
    assert (await call(tool, ctx, pattern="*.rs", path="src")).output == "No files match `*.rs` in src."


async def test_glob_caps_its_list(tmp_path: Path) -> None:
    for n in range(510):
        put(tmp_path, f"f/{n:04}.txt", "")
    result = await call(Glob(), make_ctx(str(tmp_path)), pattern="*.txt")
    lines = result.output.splitlines()
    assert lines[0] == "f/0000.txt"
    assert lines[499] == "f/0499.txt"
    assert "Showing the first 500 of 510 files" in result.output


async def test_glob_argument_errors(tmp_path: Path) -> None:
    put(tmp_path, "a.txt", "")
    ctx = make_ctx(str(tmp_path))
    with pytest.raises(ToolError, match=r"cannot start with '!'"):
        await Glob().prepare({"pattern": "!*.py"}, ctx)
    with pytest.raises(ToolError, match=r"not a directory"):
        await Glob().prepare({"pattern": "*", "path": "a.txt"}, ctx)


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


@pytest.mark.parametrize("engine", ["rg", pytest.param("python", marks=pytest.mark.slow)])
async def test_searches_keep_out_of_private_paths(tmp_path: Path, engine: str) -> None:
    """A session in ``$HOME``: grep and glob over it do not read the agent's files or the credentials
    (``RootPolicy.private``), whatever globs the model passes."""
    if engine == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    home = tmp_path / "home"
    for name in (".ssh/id_ed25519", ".config/refagent/config.toml", "we[i]rd!/key", "project/notes.txt"):
        put(home, name, "SECRET\n")
    private = [str(home / ".ssh"), str(home / ".config" / "refagent"), str(home / "we[i]rd!")]
    rg = RG if engine == "rg" else None
    ctx = dataclasses.replace(
        make_ctx(str(home), search=LocalSearch(rg)), policy=RootPolicy(str(home), private=private)
    )
    found = await call(Grep(), ctx, pattern="SECRET", output_mode="files")
    assert found.output.splitlines()[0] == "project/notes.txt"
    for name in ("ssh", "refagent", "we[i]rd"):
        assert name not in found.output
    forced = await call(Grep(), ctx, pattern="SECRET", glob="**/.ssh/*", output_mode="files")
    assert "ssh" not in forced.output
    listed = await call(Glob(), ctx, pattern="**/*")
    assert listed.output.splitlines() == ["project/notes.txt"]
    inside = await Grep().prepare({"pattern": "SECRET", "path": ".ssh"}, ctx)
    assert inside.outside  # searching in there asks, as outside the roots does


class RemoteSearch:
    """A :class:`~refagent.seams.Search` of a disk elsewhere: it finds what it is told to, and notes what it
    was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str], str]] = []

    async def grep(self, query: Query, directory: str, target: str, *, roots: Sequence[str]) -> Hits:
        self.asked.append(("grep", query.globs, directory))
        return Hits(lines={"remote.py": [(3, True, "needle = 1")]}, counts={"remote.py": 1}, matches=1)

    async def files(self, globs: list[str], directory: str, *, roots: Sequence[str]) -> tuple[list[str], bool]:
        self.asked.append(("files", globs, directory))
        return ["remote.py", "lib/other.py"], True


async def test_grep_and_glob_search_through_the_sandboxs_search(tmp_path: Path) -> None:
    """Nothing of the host's tree: the tools show what the sandbox's search found, and hand it the private
    paths' exclusions after the model's globs."""
    put(tmp_path, "host.py", "needle\n")
    put(tmp_path, ".ssh/id", "needle\n")
    remote = RemoteSearch()
    ctx = dataclasses.replace(
        make_ctx(str(tmp_path), search=remote), policy=RootPolicy(str(tmp_path), private=[str(tmp_path / ".ssh")])
    )
    found = await call(Grep(), ctx, pattern="needle", glob="*.py")
    assert found.output == "remote.py:3:needle = 1"
    listed = await call(Glob(), ctx, pattern="**/*.py")
    assert listed.output.splitlines() == ["lib/other.py", "remote.py"]
    assert remote.asked == [
        ("grep", ["*.py", "!/.ssh"], str(tmp_path)),
        ("files", ["**/*.py", "!/.ssh"], str(tmp_path)),
    ]
