"""``apply_patch``: apply a unified diff (one or more files) all or nothing.

The patch is parsed, and each file's hunks applied to its text in memory, by
:mod:`refagent.tools.patch_format` (``git diff`` output accepted; every hunk must apply exactly, near its
stated line, with no fuzz). A hunk that matches nowhere rejects the whole patch: nothing is written, and
the model is shown the expected lines next to the actual ones.

All or nothing holds while writing too, cancellation included. Every file's new text is worked out
before anything is written; then the files are changed one step at a time with a rollback journal
(:class:`~refagent.tools.patch_transaction.Transaction`), and an error or a cancel in the middle takes
back every step already made (shielded from the cancellation) before the call ends. The model is told
exactly what happened: the whole patch applied; or nothing changed, and why; or, if restoring itself
failed, which file is in which state. A cancelled patch re-raises the cancellation with that account as
a note (:data:`~refagent.tools.base.CANCEL_NOTE`).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
from unidiff.patch import PatchedFile

from refagent.acp.types import ToolCallContent, ToolCallLocation
from refagent.errors import ToolError
from refagent.tools.args import arg_str
from refagent.tools.base import CANCEL_NOTE, BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.files import EDIT_PERMISSION, disk_note, read_existing
from refagent.tools.patch_format import apply_hunks, file_paths, header_paths, parse_patch
from refagent.tools.patch_transaction import GRACE_SECONDS, ROLLBACK_SECONDS, FileChange, Transaction
from refagent.tools.paths import forget_path
from refagent.tools.text import diff, location

log = logging.getLogger(__name__)


class ApplyPatch(BaseTool):
    name = "apply_patch"
    description = (
        "Apply a unified diff to one or more files, all or nothing. Use `---`/`+++` file headers (`a/` and "
        "`b/` prefixes allowed, `/dev/null` to create or delete a file) and `@@ -l,n +l,n @@` hunks with a "
        "few lines of unchanged context. Context and removed lines must match the file exactly (a hunk may "
        "sit at a different line than stated). If any hunk does not match, nothing is changed and the "
        "error shows the expected and actual lines."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "patch": {"type": "string", "description": "The unified diff text, e.g. the output of `git diff`."},
        },
        "required": ["patch"],
        "additionalProperties": False,
    }
    kind = "edit"

    def __init__(self, *, grace: float = GRACE_SECONDS, rollback_seconds: float = ROLLBACK_SECONDS) -> None:
        self.grace = grace
        self.rollback_seconds = rollback_seconds

    def title(self, args: dict[str, Any]) -> str:
        files = header_paths(str(args.get("patch", "")))
        if len(files) == 1:
            return f"Patch {files[0]}"
        return f"Patch {len(files)} files" if files else "Apply patch"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        patch = parse_patch(arg_str(args, "patch", kind="content"))
        changes: dict[str, FileChange] = {}
        for patched in patch:
            change = await _plan_file(ctx, patched, changes)
            changes[change.resolved.path] = change
        ordered = list(changes.values())

        async def execute() -> ToolResult:
            return await _write(ctx, ordered, self.grace, self.rollback_seconds)

        titles = [c.resolved.display for c in ordered]
        deletes = any(c.after is None for c in ordered)
        renames = any(c.source is not None for c in ordered)
        return Plan(
            title=f"Patch {titles[0]}" if len(titles) == 1 else f"Patch {len(titles)} files",
            execute=execute,
            locations=_locations(ordered),
            preview=_diffs(ordered),
            mutating=True,
            # Deleting or renaming files is not "just an edit": asked for as such, even in accept-edits mode.
            kind="delete" if deletes else "move" if renames else None,
            permission_key="delete" if deletes else EDIT_PERMISSION[0],
            permission_label="deletions inside the workspace" if deletes else EDIT_PERMISSION[1],
        )


async def _plan_file(ctx: ToolContext, patched: PatchedFile, earlier: dict[str, FileChange]) -> FileChange:
    source, target = file_paths(patched)
    name = target or source
    if name is None:
        raise ToolError("A file in the patch goes from /dev/null to /dev/null.")
    if patched.is_binary_file:
        raise ToolError(f"The patch changes the binary file {name}; apply_patch handles text only.")
    resolved = ctx.policy.check_write(name)
    renamed_from = ctx.policy.check_write(source) if source and target and source != target else None
    origin = renamed_from or resolved

    # The same file may appear twice in one patch: the second part applies to the first part's result.
    prior = earlier.get(resolved.path)
    if prior is not None:
        if prior.after is None:
            raise ToolError(f"The patch changes {resolved.display} after deleting it.")
        if renamed_from is not None:
            raise ToolError(f"The patch renames {renamed_from.display} onto {resolved.display}, which it also changes.")
        current: str | None = prior.after
    else:
        if await ctx.disk.kind(origin.path) == "dir":
            raise ToolError(f"{origin.display} is a directory.")
        current = await read_existing(ctx, origin.path)
        if current is not None:
            ctx.reads.check_fresh(origin.path, current)

    if source is None:
        if current is not None:
            raise ToolError(f"The patch creates {resolved.display}, but it already exists.")
        current = ""
    elif current is None:
        raise ToolError(f"The patch changes {origin.display}, which does not exist.")
    if renamed_from is not None and await ctx.disk.kind(resolved.path) is not None:
        raise ToolError(f"The patch renames {renamed_from.display} to {resolved.display}, which already exists.")

    patched_text, first_line = apply_hunks(origin.display, patched, current)
    after: str | None = patched_text
    if target is None:
        if patched_text:
            raise ToolError(
                f"The patch deletes {resolved.display} but does not remove all of its lines; "
                "a deletion must remove the whole file."
            )
        after = None
    added = sum(hunk.added for hunk in patched)
    removed = sum(hunk.removed for hunk in patched)
    if prior is not None:
        return FileChange(
            resolved,
            prior.before,
            after,
            min(prior.first_line, first_line),
            prior.added + added,
            prior.removed + removed,
            prior.source,
            prior.source_text,
        )
    if renamed_from is not None:
        return FileChange(resolved, None, after, first_line, added, removed, renamed_from, current)
    return FileChange(resolved, None if source is None else current, after, first_line, added, removed)


def _diffs(changes: list[FileChange]) -> list[ToolCallContent]:
    content: list[ToolCallContent] = []
    for change in changes:
        if change.source is not None:
            content.append(diff(change.source.path, change.source_text, ""))
        content.append(diff(change.resolved.path, change.before, change.after or ""))
    return content


def _locations(changes: list[FileChange]) -> list[ToolCallLocation]:
    return [location(c.resolved.path, c.first_line) for c in changes]


async def _write(ctx: ToolContext, changes: list[FileChange], grace: float, rollback_seconds: float) -> ToolResult:
    # The diffs the user approved must still be true: check every file before writing any.
    for change in changes:
        origin = change.source or change.resolved
        expected = change.source_text if change.source is not None else change.before
        if await read_existing(ctx, origin.path) != expected or (
            change.source is not None and await ctx.disk.kind(change.resolved.path) is not None
        ):
            raise ToolError(
                f"{origin.display} changed while waiting for permission; nothing was written. "
                "Read it again and redo the patch."
            )
    transaction = Transaction(ctx, grace)
    try:
        for change in changes:
            await transaction.apply(change)
        # A cancel that came during the last step still finds the patch undoable: roll back, not commit.
        await anyio.lowlevel.checkpoint()
    except BaseException as exc:
        undone = await transaction.roll_back(rollback_seconds)
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            exc.add_note(CANCEL_NOTE + "The user cancelled this patch while it was being written. " + undone.told())
            if undone.failed:
                log.warning("a cancelled patch was not wholly rolled back: %s", undone.told())
            raise
        if not isinstance(exc, Exception):
            raise
        if isinstance(exc, (ToolError, OSError)):
            reason = str(exc)
        else:  # a bug, or a backend's surprise: still the model must hear what state the files are in
            log.warning("apply_patch failed", exc_info=exc)
            reason = f"{type(exc).__name__}: {exc}"
        raise ToolError(f"Writing the patch failed at {transaction.current}: {reason}\n{undone.told()}") from None
    kept = await transaction.commit(rollback_seconds)
    summary: list[str] = []
    for change in changes:
        path, display = change.resolved.path, change.resolved.display
        if change.after is None:
            forget_path(ctx, path)
            summary.append(f"D {display}")
            continue
        ctx.reads.saw(path, change.after)
        if change.source is not None:
            forget_path(ctx, change.source.path)
            summary.append(f"R {change.source.display} -> {display} (+{change.added} -{change.removed})")
        else:
            letter = "A" if change.before is None else "M"
            summary.append(f"{letter} {display} (+{change.added} -{change.removed})")
    output = "Applied the patch:\n" + "\n".join(summary)
    if kept:
        output += "\n" + "\n".join(kept)
    output += disk_note(*(change.before for change in changes), *(change.source_text for change in changes))
    try:
        await anyio.lowlevel.checkpoint()
    except anyio.get_cancelled_exc_class() as exc:
        # Cancelled once the whole patch was in place (there was no undoing it then): it is applied.
        exc.add_note(CANCEL_NOTE + "The user cancelled this call only after the whole patch was written. " + output)
        raise
    return ToolResult(
        output,
        content=_diffs(changes),
        raw_output={"files": summary},
        locations=_locations(changes),
    )
