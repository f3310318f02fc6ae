"""apply_patch is all or nothing while writing too: a 60-file patch (edits, new files in new directories,
deletions, renames) that fails or is cancelled at its 41st file leaves all 60 exactly as they were, and
the model is told so. On pyfakefs with fake editor files (``ctx.files``), and on the real disk."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.sandbox.disk.write import TEMP_PREFIX
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect
from refagent.tools.base import CANCEL_NOTE, Disk, Plan
from refagent.tools.patch import ApplyPatch
from refagent.tools.permissions import Permissions
from refagent.tools.runner import ToolRunner
from tests.support.tool_fakes import check_result, make_ctx, sent

pytestmark = pytest.mark.anyio

ROOT = "/proj"
FILES = 60
FAILING = 40
"""Index of the file whose write fails or is cancelled: 40 files are changed before it."""
BODY = "".join(f"line {n}\n" for n in range(1, 6))


def kind(index: int) -> str:
    return ("modify", "create", "delete", "rename")[index % 4]


def build(root: str) -> None:
    """The project before the patch: a file for every change but the creations, two of them executable."""
    os.makedirs(f"{root}/src")
    for index in range(FILES):
        if kind(index) != "create":
            with open(f"{root}/src/f{index:02}.txt", "w") as handle:
                handle.write(BODY.replace("line 1", f"file {index}"))
    os.chmod(f"{root}/src/f00.txt", 0o755)
    os.chmod(f"{root}/src/f02.txt", 0o750)


def patch(*, blocked: int | None = None) -> str:
    """One change for each of the 60 files, in index order; the ``blocked`` one instead creates a file
    below ``src/blocker``."""
    parts = []
    for index in range(FILES):
        name = f"src/f{index:02}.txt"
        first = f"file {index}"
        change = kind(index)
        if index == blocked:
            new = f"src/blocker/f{index:02}.txt"
            parts.append(f"--- /dev/null\n+++ b/{new}\n@@ -0,0 +1 @@\n+blocked\n")
        elif change == "modify":
            parts.append(
                f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n"
                f"@@ -1,3 +1,3 @@\n {first}\n-line 2\n+line two\n line 3\n"
            )
        elif change == "create":
            new = f"new/d{index:02}/f{index:02}.txt"
            parts.append(
                f"diff --git a/{new} b/{new}\nnew file mode 100644\n--- /dev/null\n+++ b/{new}\n@@ -0,0 +1 @@\n+new\n"
            )
        elif change == "delete":
            removed = "".join(f"-{line}\n" for line in BODY.replace("line 1", first).splitlines())
            parts.append(
                f"diff --git a/{name} b/{name}\ndeleted file mode 100644\n--- a/{name}\n+++ /dev/null\n"
                f"@@ -1,5 +0,0 @@\n{removed}"
            )
        else:
            moved = f"moved/f{index:02}.txt"
            parts.append(
                f"diff --git a/{name} b/{moved}\nsimilarity index 80%\nrename from {name}\nrename to {moved}\n"
                f"--- a/{name}\n+++ b/{moved}\n@@ -4,2 +4,2 @@\n line 4\n-line 5\n+line five\n"
            )
    return "".join(parts)


def snapshot(root: str, *, modes: bool = False) -> dict[str, Any]:
    """Every entry under ``root``: its kind and content, and with ``modes`` its permission bits (only on
    the real disk: pyfakefs's ``os.open`` gives an existing file its default mode, even for a read)."""
    seen: dict[str, Any] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            relative = os.path.relpath(path, root)
            mode = stat.S_IMODE(info.st_mode) if modes else None
            if stat.S_ISDIR(info.st_mode):
                seen[relative] = ("dir", mode)
            else:
                with open(path) as handle:
                    seen[relative] = ("file", handle.read(), mode)
    return seen


# Sync helpers: the checks of the outcome are plain blocking calls (ruff's ASYNC rules want them out of
# the coroutines).
def read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def exists(path: str) -> bool:
    return os.path.lexists(path)


def deleted_inodes(root: str) -> dict[str, int]:
    """The inodes of the files the patch deletes: a rollback moves them back, it does not rewrite them."""
    names = [f"f{index:02}.txt" for index in range(FILES) if kind(index) == "delete"]
    return {name: os.lstat(f"{root}/src/{name}").st_ino for name in names}


class FailingFiles:
    """``ctx.files`` as an editor that refuses to write one file (acpx does, for every file)."""

    def __init__(self, disk: Disk, fail: str) -> None:
        self.disk = disk
        self.fail = fail
        self.writes: list[str] = []

    async def read_text(self, path: str) -> str:
        return await self.disk.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        self.writes.append(path)
        if path == self.fail:
            raise ToolError(f"The editor refused to write {path}: the disk is full")
        await self.disk.write_text(path, content)


class GatedFiles:
    """``ctx.files`` as an editor whose first write of one file waits until the test opens the gate (or
    forever): ``started`` is set once that write has been sent."""

    def __init__(self, disk: Disk, gated: str) -> None:
        self.disk = disk
        self.gated = gated
        self.started = anyio.Event()
        self.gate = anyio.Event()
        self.writes: list[str] = []

    async def read_text(self, path: str) -> str:
        return await self.disk.read_text(path)

    async def write_text(self, path: str, content: str) -> None:
        self.writes.append(path)
        if path == self.gated and not self.started.is_set():
            self.started.set()
            await self.gate.wait()
        await self.disk.write_text(path, content)


@pytest.fixture
def proj(fs):  # type: ignore[no-untyped-def]
    build(ROOT)
    return fs


async def cancel_during(plan: Plan, files: GatedFiles, *, answer: bool) -> list[str]:
    """Run the patch, cancel it while the gated write is under way (then let that write finish, or not);
    the notes on the cancellation it raised."""
    notes: list[str] = []

    async def run() -> None:
        try:
            await plan.execute()
        except anyio.get_cancelled_exc_class() as exc:
            notes.extend(getattr(exc, "__notes__", []))
            raise
        raise AssertionError("the patch was not cancelled")

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await files.started.wait()
        group.cancel_scope.cancel()
        if answer:
            files.gate.set()  # the editor answers after the cancel: the write did happen
    return notes


# -- the 60-file patch ---------------------------------------------------------------------------------------


async def test_the_whole_60_file_patch_applies_and_leaves_no_backup(proj) -> None:  # type: ignore[no-untyped-def]
    ctx = make_ctx(ROOT)
    plan = await ApplyPatch().prepare({"patch": patch()}, ctx)
    assert plan.title == "Patch 60 files"
    result = await plan.execute()
    check_result(result)
    assert len(result.output.splitlines()) == 1 + FILES
    assert not [name for _, _, names in os.walk(ROOT) for name in names if name.startswith(TEMP_PREFIX)]
    assert not exists(f"{ROOT}/src/f02.txt")
    assert read(f"{ROOT}/moved/f03.txt").endswith("line 4\nline five\n")


async def test_a_write_that_fails_at_file_41_restores_the_40_before(proj) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(ROOT)
    files = FailingFiles(make_ctx(ROOT).disk, f"{ROOT}/src/f{FAILING}.txt")
    ctx = make_ctx(ROOT, files=files)
    plan = await ApplyPatch().prepare({"patch": patch()}, ctx)
    with pytest.raises(ToolError) as caught:
        await plan.execute()
    assert snapshot(ROOT) == before  # contents, no new directory, no backup left
    assert str(caught.value) == (
        f"Writing the patch failed at src/f{FAILING}.txt: The editor refused to write {ROOT}/src/f{FAILING}.txt: "
        f"the disk is full\nNothing was changed: the {FAILING} files it had already changed were restored."
    )
    assert files.writes.count(f"{ROOT}/src/f{FAILING}.txt") == 1  # a write that failed is not "restored"
    # what the model saw is still what is there: it may patch again without reading
    assert ctx.reads.check_fresh(f"{ROOT}/src/f00.txt", before["src/f00.txt"][1]) is None


async def test_a_cancel_at_file_41_restores_all_and_says_so(proj) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(ROOT)
    gated = f"{ROOT}/src/f{FAILING}.txt"
    files = GatedFiles(make_ctx(ROOT).disk, gated)
    plan = await ApplyPatch().prepare({"patch": patch()}, make_ctx(ROOT, files=files))
    notes = await cancel_during(plan, files, answer=True)
    assert snapshot(ROOT) == before
    # the write under way when the cancel came was finished, then taken back with the others
    assert files.writes.count(gated) == 2
    assert notes == [
        CANCEL_NOTE + "The user cancelled this patch while it was being written. Nothing was changed: the "
        f"{FAILING + 1} files it had already changed were restored."
    ]


async def test_a_cancel_while_the_editor_never_answers(proj) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(ROOT)
    gated = f"{ROOT}/src/f{FAILING}.txt"
    files = GatedFiles(make_ctx(ROOT).disk, gated)
    plan = await ApplyPatch(grace=0).prepare({"patch": patch()}, make_ctx(ROOT, files=files))
    notes = await cancel_during(plan, files, answer=False)
    assert snapshot(ROOT) == before
    assert len(notes) == 1
    assert notes[0].endswith(
        f"src/f{FAILING}.txt was being changed when it was cut off; restored all the same.)"
    )  # its outcome was unknown: written back to be sure


async def test_a_cancel_during_the_first_write_restores_it(proj) -> None:  # type: ignore[no-untyped-def]
    before = snapshot(ROOT)
    files = GatedFiles(make_ctx(ROOT).disk, f"{ROOT}/src/f00.txt")
    plan = await ApplyPatch().prepare({"patch": patch()}, make_ctx(ROOT, files=files))
    notes = await cancel_during(plan, files, answer=True)
    assert snapshot(ROOT) == before
    assert notes[0].endswith("Nothing was changed: the 1 file it had already changed was restored.")


class BrokenRestore(FailingFiles):
    """Refuses one file's writes once the patch has failed: a rollback that cannot finish."""

    def __init__(self, disk: Disk, fail: str, stuck: str) -> None:
        super().__init__(disk, fail)
        self.stuck = stuck

    async def write_text(self, path: str, content: str) -> None:
        if path == self.stuck and self.fail in self.writes:
            raise ToolError(f"The editor refused to write {path}: read-only buffer")
        await super().write_text(path, content)


async def test_a_rollback_that_fails_says_which_file_is_in_which_state(proj) -> None:  # type: ignore[no-untyped-def]
    files = BrokenRestore(make_ctx(ROOT).disk, f"{ROOT}/src/f{FAILING}.txt", f"{ROOT}/src/f04.txt")
    plan = await ApplyPatch().prepare({"patch": patch()}, make_ctx(ROOT, files=files))
    with pytest.raises(ToolError) as caught:
        await plan.execute()
    message = str(caught.value)
    assert "Restoring the files already written failed, so part of the patch is in place:\n" in message
    assert (
        "- src/f04.txt has the patched text (restoring it failed: The editor refused to write "
        f"{ROOT}/src/f04.txt: read-only buffer)" in message
    )
    assert "Restored: moved/f39.txt, src/f38.txt, new/d37/f37.txt, " in message  # newest first
    assert "The other files of the patch were not touched. Read these files again" in message
    assert "line two" in read(f"{ROOT}/src/f04.txt")  # exactly as told
    assert "line two" not in read(f"{ROOT}/src/f08.txt")


# -- through the runner ------------------------------------------------------------------------------------


async def test_the_runner_lets_the_cancel_through_with_the_account(proj) -> None:  # type: ignore[no-untyped-def]
    """The runner marks the call cancelled and re-raises; the account travels on the exception, for the
    turn to tell the model (the turn's generic "cancelled before it ran" is not true of a patch under way)."""
    before = snapshot(ROOT)
    files = GatedFiles(make_ctx(ROOT).disk, f"{ROOT}/src/f{FAILING}.txt")
    ctx = make_ctx(ROOT, files=files)

    async def never_asked(tool_call: dict[str, Any], options: Any) -> Any:
        raise AssertionError("full-access does not ask")

    runner = ToolRunner([ApplyPatch()], ctx, Permissions(), lambda: "full-access", never_asked, lambda: None)
    notes: list[str] = []

    async def run() -> None:
        try:
            await runner.run(ToolCallRequest(id="c1", name="apply_patch", arguments=_json({"patch": patch()})))
        except anyio.get_cancelled_exc_class() as exc:
            notes.extend(getattr(exc, "__notes__", []))
            raise

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await files.started.wait()
        group.cancel_scope.cancel()
        files.gate.set()
    assert snapshot(ROOT) == before
    assert len(notes) == 1
    assert "Nothing was changed" in notes[0]
    assert sent(ctx)[-1]["status"] == "failed"


def _json(value: Any) -> str:
    return json.dumps(value)


# -- the real disk -----------------------------------------------------------------------------------------


def real_snapshot(root: Path) -> Iterator[tuple[str, Any]]:
    yield from sorted(snapshot(str(root), modes=True).items())


async def test_real_disk_a_write_that_fails_restores_contents_modes_and_deleted_inodes(tmp_path: Path) -> None:
    root = str(tmp_path / "proj")
    build(root)
    # The 41st change writes below a regular file: the disk refuses it (even for root, unlike a read-only file).
    text = patch(blocked=FAILING)
    write(f"{root}/src/blocker", "a file, not a directory\n")
    before, deleted = list(real_snapshot(Path(root))), deleted_inodes(root)
    ctx = make_ctx(root)
    plan = await ApplyPatch().prepare({"patch": text}, ctx)
    with pytest.raises(ToolError) as caught:
        await plan.execute()
    assert list(real_snapshot(Path(root))) == before  # contents and modes, no new directory, no backup
    assert deleted_inodes(root) == deleted  # the same files, moved aside and back: owner, links, all kept
    assert f"Writing the patch failed at src/blocker/f{FAILING}.txt: Cannot write" in str(caught.value)
    assert str(caught.value).endswith(f"Nothing was changed: the {FAILING} files it had already changed were restored.")


async def test_real_disk_a_cancel_restores_everything(tmp_path: Path) -> None:
    root = str(tmp_path / "proj")
    build(root)
    before = list(real_snapshot(Path(root)))
    files = GatedFiles(make_ctx(root).disk, f"{root}/src/f{FAILING}.txt")
    plan = await ApplyPatch().prepare({"patch": patch()}, make_ctx(root, files=files))
    notes = await cancel_during(plan, files, answer=True)
    assert list(real_snapshot(Path(root))) == before
    assert "Nothing was changed" in notes[0]


async def test_real_disk_a_rename_keeps_the_mode(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "run.sh").chmod(0o755)
    text = (
        "diff --git a/bin/run.sh b/tools/run.sh\nsimilarity index 90%\nrename from bin/run.sh\nrename to tools/run.sh\n"
        "--- a/bin/run.sh\n+++ b/tools/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo hi\n+echo hello\n"
    )
    plan = await ApplyPatch().prepare({"patch": text}, make_ctx(str(root)))
    await plan.execute()
    assert (root / "tools" / "run.sh").read_text() == "#!/bin/sh\necho hello\n"
    assert stat.S_IMODE((root / "tools" / "run.sh").stat().st_mode) == 0o755
    assert not (root / "bin" / "run.sh").exists()


# -- what the model and /undo are told -----------------------------------------------------------------------


async def test_the_model_hears_the_truth_and_undo_finds_nothing_to_undo(tmp_path: Path, check: Any) -> None:
    """Through the agent: /undo's records are made before a change, so a rolled-back patch leaves records
    of changes that did not happen; /undo sees every file as it was before and claims nothing."""
    root = tmp_path / "proj"
    build(str(root))
    (root / "src" / "blocker").write_text("a file, not a directory\n")
    before = list(real_snapshot(root))
    model = ScriptedModel(
        [[ToolCallRequest(id="c1", name="apply_patch", arguments=_json({"patch": patch(blocked=FAILING)}))], text("ok")]
    )
    settings = Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))
    async with connect(settings, client=FakeClient(), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(root))
        assert await editor.prompt(sid, "patch it") == {"stopReason": "end_turn"}
        told = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
        assert len(told) == 1
        assert told[0].startswith(f"Error: Writing the patch failed at src/blocker/f{FAILING}.txt: Cannot write")
        assert told[0].endswith(f"Nothing was changed: the {FAILING} files it had already changed were restored.")
        assert list(real_snapshot(root)) == before
        mark = len(editor.updates(sid))
        assert await editor.prompt(sid, "/undo") == {"stopReason": "end_turn"}
        answer = "".join(
            u["content"]["text"] for u in editor.updates(sid)[mark:] if u["sessionUpdate"] == "agent_message_chunk"
        )
    assert answer.startswith("There is nothing to undo: the files the last turn meant to change are as they were")
    assert list(real_snapshot(root)) == before


@pytest.mark.slow  # the write the editor never answers gets its grace (5 s) before the rollback
async def test_a_cancelled_patch_tells_the_model_it_was_rolled_back(tmp_path: Path, check: Any) -> None:
    """After ``session/cancel`` mid-patch, the next request tells the model what the patch really did (it
    was taken back), not that it was cancelled before it ran."""
    root = tmp_path / "proj"
    build(str(root))
    before = list(real_snapshot(root))
    model = ScriptedModel(
        [[ToolCallRequest(id="c1", name="apply_patch", arguments=_json({"patch": patch()}))], text("understood")]
    )
    writes = 0
    stuck = anyio.Event()

    async def write_then_hang(params: dict[str, Any]) -> None:
        nonlocal writes
        writes += 1
        if writes == 10:
            stuck.set()
            await anyio.sleep_forever()
        os.makedirs(os.path.dirname(params["path"]), exist_ok=True)  # as editors do
        write(params["path"], params["content"])

    client = FakeClient(extra={"fs/write_text_file": write_then_hang})
    async with connect(Settings(make_model=lambda profile: model), client=client, check=check) as editor:
        await editor.initialize({"fs": {"writeTextFile": True}})
        sid = await editor.new_session(str(root))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        async with anyio.create_task_group() as tasks:
            outcome: dict[str, Any] = {}

            async def prompt() -> None:
                outcome.update(await editor.prompt(sid, "patch it"))

            tasks.start_soon(prompt)
            await stuck.wait()
            await editor.cancel(sid)
        assert outcome == {"stopReason": "cancelled"}
        assert await editor.prompt(sid, "what happened?") == {"stopReason": "end_turn"}
    [told] = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert "cancelled this patch while it was being written" in told
    assert "before it ran" not in told
    assert list(real_snapshot(root)) == before


async def test_undo_takes_back_a_patch_that_deletes_one_file_and_edits_another(tmp_path: Path, check: Any) -> None:
    (tmp_path / "gone.txt").write_text("to be deleted\n")
    (tmp_path / "kept.txt").write_text("one\n")
    diff = (
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-to be deleted\n"
        "--- a/kept.txt\n+++ b/kept.txt\n@@ -1 +1 @@\n-one\n+two\n"
    )
    model = ScriptedModel(
        [[ToolCallRequest(id="c1", name="apply_patch", arguments=_json({"patch": diff}))], text("ok")]
    )
    async with connect(Settings(make_model=lambda profile: model), client=FakeClient(), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        assert await editor.prompt(sid, "patch it") == {"stopReason": "end_turn"}
        assert not exists(str(tmp_path / "gone.txt"))
        assert read(str(tmp_path / "kept.txt")) == "two\n"
        assert await editor.prompt(sid, "/undo") == {"stopReason": "end_turn"}
    assert read(str(tmp_path / "gone.txt")) == "to be deleted\n"
    assert read(str(tmp_path / "kept.txt")) == "one\n"


async def test_a_deleted_files_backup_is_hidden_from_glob(tmp_path: Path) -> None:
    """While a patch runs, a file it deletes waits beside its old place under a temporary name: neither
    search engine lists it (the root watcher ignores the prefix)."""
    from refagent.sandbox.search.python_engine import python_files
    from refagent.sandbox.search.ripgrep import find_rg, rg_files
    from refagent.tools.patch_transaction import _backup_path

    backup = Path(_backup_path(str(tmp_path / "gone.txt")))
    for path in (tmp_path / "kept.txt", backup):
        path.touch()
    assert python_files([], str(tmp_path))[0] == ["kept.txt"]
    rg = find_rg()
    if rg is not None:
        assert (await rg_files(rg, ["*"], str(tmp_path)))[0] == ["kept.txt"]
    assert backup.name.startswith(TEMP_PREFIX)
