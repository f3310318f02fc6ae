"""apply_patch on a fake file system (pyfakefs) with the real sandbox classes: all or nothing."""

from __future__ import annotations

import os

import pytest

from refagent.errors import ToolError
from refagent.tools.files import ReadFile
from refagent.tools.patch import ApplyPatch
from tests.support.tool_fakes import call, make_ctx

pytestmark = pytest.mark.anyio

ROOT = "/proj"


@pytest.fixture
def proj(fs):  # type: ignore[no-untyped-def]
    fs.create_dir(ROOT)
    return fs


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as handle:
        handle.write(text)


def read(path: str) -> str:
    with open(path, newline="") as handle:
        return handle.read()


APP = "".join(f"line {n}\n" for n in range(1, 21))

MULTI = """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -2,3 +2,3 @@
 line 2
-line 3
+line three
 line 4
@@ -15,3 +15,4 @@
 line 15
 line 16
+line 16.5
 line 17
diff --git a/README.md b/README.md
new file mode 100644
--- /dev/null
+++ b/README.md
@@ -0,0 +1,2 @@
+# Project
+Hello.
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-bye
-now
"""


async def test_a_multi_file_patch_previews_then_applies(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/src/app.py", APP)
    write("/proj/old.txt", "bye\nnow\n")
    ctx = make_ctx(ROOT)
    tool = ApplyPatch()
    assert tool.title({"patch": MULTI}) == "Patch 2 files"
    plan = await tool.prepare({"patch": MULTI}, ctx)
    assert plan.title == "Patch 3 files"
    assert plan.mutating
    assert plan.kind == "delete"  # it deletes old.txt: asked for as a deletion, even in accept-edits mode
    assert plan.permission_key == "delete"
    after = APP.replace("line 3\n", "line three\n").replace("line 16\n", "line 16\nline 16.5\n")
    assert plan.preview == [
        {"type": "diff", "path": "/proj/src/app.py", "oldText": APP, "newText": after},
        {"type": "diff", "path": "/proj/README.md", "oldText": None, "newText": "# Project\nHello.\n"},
        {"type": "diff", "path": "/proj/old.txt", "oldText": "bye\nnow\n", "newText": ""},
    ]
    assert plan.locations[0] == {"path": "/proj/src/app.py", "line": 2}
    assert read("/proj/src/app.py") == APP  # nothing yet
    result = await plan.execute()
    assert read("/proj/src/app.py") == after
    assert read("/proj/README.md") == "# Project\nHello.\n"
    assert not exists("/proj/old.txt")
    assert result.output.splitlines() == [
        "Applied the patch:",
        "M src/app.py (+2 -1)",
        "A README.md (+2 -0)",
        "D old.txt",
    ]


async def test_a_bad_hunk_rejects_the_whole_patch(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/src/app.py", APP.replace("line 16\n", "line sixteen\n"))
    write("/proj/old.txt", "bye\nnow\n")
    with pytest.raises(ToolError) as caught:
        await ApplyPatch().prepare({"patch": MULTI}, make_ctx(ROOT))
    message = str(caught.value)
    assert "Hunk 2 (@@ -15,3 +15,4 @@) of src/app.py does not apply" in message
    assert "Nothing was changed" in message
    assert "Expected (the hunk's context and removed lines):\nline 15\nline 16\nline 17\n" in message
    assert "    16\tline sixteen" in message
    assert read("/proj/src/app.py") == APP.replace("line 16\n", "line sixteen\n")
    assert not exists("/proj/README.md")
    assert exists("/proj/old.txt")


async def test_hunks_are_found_when_the_file_has_shifted(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/src/app.py", "new header\nmore\n" + APP)
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+line three\n line 4\n"
    await call(ApplyPatch(), make_ctx(ROOT), patch=patch)
    assert read("/proj/src/app.py") == "new header\nmore\n" + APP.replace("line 3\n", "line three\n")


async def test_no_fuzz_a_changed_context_line_does_not_apply(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "a\nb\nc\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n C\n"
    with pytest.raises(ToolError, match=r"does not apply"):
        await ApplyPatch().prepare({"patch": patch}, make_ctx(ROOT))


async def test_hunks_apply_in_order_at_the_nearest_match(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "x\n1\nx\n2\nx\n3\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -5,1 +5,1 @@\n-x\n+y\n"
    await call(ApplyPatch(), make_ctx(ROOT), patch=patch)
    assert read("/proj/a.txt") == "x\n1\nx\n2\ny\n3\n"


async def test_a_crlf_file_takes_an_lf_patch_and_stays_crlf(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/win.txt", "one\r\ntwo\r\nthree\r\n")
    patch = "--- win.txt\n+++ win.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n+2b\n three\n"
    await call(ApplyPatch(), make_ctx(ROOT), patch=patch)
    assert read("/proj/win.txt") == "one\r\n2\r\n2b\r\nthree\r\n"


async def test_no_newline_at_end_of_file_markers(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "a\nb")
    ctx = make_ctx(ROOT)
    add_newline = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n"
    await call(ApplyPatch(), ctx, patch=add_newline)
    assert read("/proj/a.txt") == "a\nb\nc\n"
    drop_newline = "--- a/a.txt\n+++ b/a.txt\n@@ -3,1 +3,1 @@\n-c\n+end\n\\ No newline at end of file\n"
    await call(ApplyPatch(), ctx, patch=drop_newline)
    assert read("/proj/a.txt") == "a\nb\nend"


async def test_a_rename_with_changes(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/old_name.py", "a = 1\nb = 2\n")
    patch = (
        "diff --git a/old_name.py b/pkg/new_name.py\nsimilarity index 80%\nrename from old_name.py\n"
        "rename to pkg/new_name.py\n--- a/old_name.py\n+++ b/pkg/new_name.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    )
    plan = await ApplyPatch().prepare({"patch": patch}, make_ctx(ROOT))
    assert [c["path"] for c in plan.preview] == ["/proj/old_name.py", "/proj/pkg/new_name.py"]  # type: ignore[typeddict-item]
    result = await plan.execute()
    assert not exists("/proj/old_name.py")
    assert read("/proj/pkg/new_name.py") == "a = 1\nb = 3\n"
    assert "R old_name.py -> pkg/new_name.py" in result.output


async def test_the_same_file_twice_applies_in_sequence(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "1\n2\n3\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-1\n+one\n--- a/a.txt\n+++ b/a.txt\n@@ -3 +3 @@\n-3\n+three\n"
    plan = await ApplyPatch().prepare({"patch": patch}, make_ctx(ROOT))
    assert len(plan.preview) == 1
    await plan.execute()
    assert read("/proj/a.txt") == "one\n2\nthree\n"


async def test_file_level_errors(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/exists.txt", "x\n")
    ctx = make_ctx(ROOT)
    create_existing = "--- /dev/null\n+++ b/exists.txt\n@@ -0,0 +1 @@\n+y\n"
    with pytest.raises(ToolError, match=r"creates exists.txt, but it already exists"):
        await ApplyPatch().prepare({"patch": create_existing}, ctx)
    change_missing = "--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(ToolError, match=r"changes missing.txt, which does not exist"):
        await ApplyPatch().prepare({"patch": change_missing}, ctx)
    partial_delete = "--- a/exists.txt\n+++ /dev/null\n@@ -1,0 +0,0 @@\n"
    with pytest.raises(ToolError):
        await ApplyPatch().prepare({"patch": partial_delete}, ctx)
    outside = "--- a/../x.txt\n+++ b/../x.txt\n@@ -0,0 +1 @@\n+y\n"
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await ApplyPatch().prepare({"patch": outside}, ctx)


async def test_text_that_is_not_a_unified_diff(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    with pytest.raises(ToolError, match=r"no file changes"):
        await ApplyPatch().prepare({"patch": "just some text"}, ctx)
    with pytest.raises(ToolError, match=r"could not be parsed.*line counts"):
        await ApplyPatch().prepare({"patch": "--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n a\n-b\n+c\n"}, ctx)
    with pytest.raises(ToolError, match=r"not the `\*\*\* Begin Patch` format"):
        await ApplyPatch().prepare({"patch": "*** Begin Patch\n*** Update File: x\n"}, ctx)


async def test_stale_files_and_changes_during_permission(proj) -> None:  # type: ignore[no-untyped-def]
    write("/proj/a.txt", "a\nb\n")
    ctx = make_ctx(ROOT)
    await call(ReadFile(), ctx, path="a.txt")
    write("/proj/a.txt", "a\nb\nc\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
    with pytest.raises(ToolError, match=r"changed since you last read it"):
        await ApplyPatch().prepare({"patch": patch}, ctx)
    await call(ReadFile(), ctx, path="a.txt")
    plan = await ApplyPatch().prepare({"patch": patch}, ctx)
    write("/proj/a.txt", "a\nb\nc\nd\n")
    with pytest.raises(ToolError, match=r"changed while waiting for permission; nothing was written"):
        await plan.execute()
    assert read("/proj/a.txt") == "a\nb\nc\nd\n"


def exists(path: str) -> bool:
    return os.path.exists(path)
