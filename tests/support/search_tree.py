"""The tree the search tests run on (``tests/sandbox/search/test_engines.py``, the engines;
``tests/tools/test_search.py``, the tools): what differs between naive walkers, in one place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from refagent.sandbox.seams import Query
from refagent.sandbox.search.ripgrep import find_rg

RG = find_rg()
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")


def put(root: Path, relative: str, data: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def make_tree(tmp_path: Path) -> Path:
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
