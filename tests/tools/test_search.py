"""glob and grep, the tools, on real trees (``tmp_path``; ``tests/support/search_tree.py``), with each engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.seams import Hits, Query
from refagent.sandbox.search.dispatch import LocalSearch
from refagent.tools.search import Glob, Grep
from tests.support.search_tree import RG, make_tree, put
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


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
    put(tree, ".env", "")
    every = [(await call(tool, ctx, pattern=pattern)).output.splitlines() for pattern in ("*", "**", "**/*")]
    assert every[0] == every[1] == every[2]  # each lists every file the rules keep (sent as no glob at all)
    assert {".env", "only_py/deep/n.py", "src/a.py"} <= set(every[0])
    assert every[0] == sorted(await _every_file(ctx, str(tree)))
    assert not {"build/out.py", "other.log"} & set(every[0])  # what .gitignore ignores stays out


async def _every_file(ctx: object, root: str) -> list[str]:
    """Every file the engine lists under ``root`` with no glob (by the ignore rules alone)."""
    files, complete = await ctx.search.files([], root, roots=[root])  # type: ignore[attr-defined]
    assert complete
    return list(files)


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
    """A :class:`~refagent.sandbox.seams.Search` of a disk elsewhere: it finds what it is told to, and notes what it
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
