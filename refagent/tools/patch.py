"""``apply_patch``: apply a unified diff (one or more files) all or nothing.

The patch is parsed with :mod:`unidiff`; ``git diff`` output (``a/`` and ``b/`` prefixes, ``/dev/null`` for
new and deleted files, renames) is accepted. Every hunk must apply exactly: its context and removed lines
must equal the file's lines. Like ``patch``, a hunk is looked for near its stated line when the file has
shifted (the closest position wins), but there is no fuzz: a hunk that matches nowhere rejects the whole
patch, nothing is written, and the model is shown the expected lines next to the actual ones.

Lines are compared without their endings, so a CRLF file takes a patch written with ``\\n``; added lines
get the file's line ending. ``\\ No newline at end of file`` markers are honoured.

All or nothing holds while writing too, cancellation included. Every file's new text is worked out
before anything is written; then the files are changed one step at a time with a rollback journal
(:class:`_Transaction`), and an error or a cancel in the middle takes back every step already made
(shielded from the cancellation) before the call ends. The model is told exactly what happened: the
whole patch applied; or nothing changed, and why; or, if restoring itself failed, which file is in
which state. A cancelled patch re-raises the cancellation with that account as a note (:data:`CANCEL_NOTE`).

With its journal the module passes 400 lines; the rollback is part of the patch's contract, and is
best read next to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import anyio
import anyio.lowlevel
from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk, PatchedFile, PatchSet

from refagent.acp.types import ToolCallContent, ToolCallLocation
from refagent.errors import ToolError
from refagent.sandbox.local_fs import TEMP_PREFIX
from refagent.tools.base import CANCEL_NOTE, BaseTool, Plan, ResolvedPath, ToolContext, ToolResult
from refagent.tools.files import EDIT_PERMISSION, arg_str, diff, is_crlf, location, numbered, plural, read_existing
from refagent.tools.paths import forget_path

log = logging.getLogger(__name__)

DEV_NULL = "/dev/null"

GRACE_SECONDS = 5.0
"""After a cancel, how long a step already under way (a write sent to the editor) may still take: it is
finished rather than abandoned, so the rollback knows exactly what it is taking back."""
ROLLBACK_SECONDS = 30.0
"""How long restoring may take, shielded from the cancellation that may have caused it."""

Line = tuple[str, str]
"""A line's text and its ending (``\\n``, ``\\r\\n`` or ``""`` for a last line without one)."""


@dataclass
class FileChange:
    """One file's part of the patch, worked out in memory."""

    resolved: ResolvedPath
    before: str | None
    """The file's text now; None when the patch creates it (or renames something to it)."""
    after: str | None
    """None: the patch deletes the file."""
    first_line: int = 1
    added: int = 0
    removed: int = 0
    source: ResolvedPath | None = None
    """For a rename: the old path, deleted once the new one is written."""
    source_text: str = ""
    """For a rename: the old file's text now."""


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
        files = _header_paths(str(args.get("patch", "")))
        if len(files) == 1:
            return f"Patch {files[0]}"
        return f"Patch {len(files)} files" if files else "Apply patch"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        text = arg_str(args, "patch")
        if text.lstrip().startswith("*** Begin Patch"):
            raise ToolError(
                "apply_patch takes a unified diff (`--- a/file`, `+++ b/file`, `@@ -l,n +l,n @@` hunks), "
                "not the `*** Begin Patch` format."
            )
        if not text.endswith("\n"):
            text += "\n"  # a model's last line often lacks it; unidiff needs it
        try:
            patch = PatchSet(text)
        except UnidiffParseError as exc:
            raise ToolError(
                f"The patch could not be parsed: {exc}. Send a unified diff; the line counts in each "
                "`@@ -start,count +start,count @@` header must match the hunk's lines."
            ) from None
        if not patch:
            raise ToolError("The patch has no file changes (expected `--- a/file`, `+++ b/file` and `@@` hunks).")
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


def _header_paths(text: str) -> list[str]:
    """Target paths from ``+++`` headers, for a title before parsing."""
    paths = []
    for line in text.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            if name == DEV_NULL:
                continue
            paths.append(name[2:] if name.startswith("b/") else name)
    return paths


def _paths(patched: PatchedFile) -> tuple[str | None, str | None]:
    """Source and target paths without git's ``a/`` ``b/`` prefixes (None for ``/dev/null``)."""
    source, target = patched.source_file, patched.target_file
    git_style = patched.patch_info is not None and any(
        str(line).startswith("diff --git ") for line in patched.patch_info
    )
    source_git = source.startswith("a/") or source == DEV_NULL
    target_git = target.startswith("b/") or target == DEV_NULL
    strip = git_style or (source_git and target_git and not (source == DEV_NULL and target == DEV_NULL))

    def clean(name: str, prefix: str) -> str | None:
        if name == DEV_NULL:
            return None
        return name[2:] if strip and name.startswith(prefix) else name

    return clean(source, "a/"), clean(target, "b/")


async def _plan_file(ctx: ToolContext, patched: PatchedFile, earlier: dict[str, FileChange]) -> FileChange:
    source, target = _paths(patched)
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

    patched_text, first_line = _apply_hunks(origin.display, patched, current)
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


def _apply_hunks(display: str, patched: PatchedFile, text: str) -> tuple[str, int]:
    """``text`` with every hunk applied, and the first changed line; ToolError if a hunk does not fit."""
    lines = _lines(text)
    eol = "\r\n" if is_crlf(text) else "\n"
    first_line = 1
    floor = 0  # hunks apply in order and never overlap: the next one starts after the previous one
    drift = 0  # how far the file has moved from the hunks' stated lines (inserted lines, shifted code)
    for number, hunk in enumerate(patched, 1):
        expected = [_text(line.value) for line in hunk if line.line_type in (" ", "-")]
        # "-5,0" means "after line 5": an empty source range names the line before it.
        nominal = hunk.source_start - 1 if expected else hunk.source_start
        at = _locate(lines, expected, nominal + drift, floor)
        if at is None:
            raise ToolError(_rejection(display, number, hunk, lines, expected, nominal + drift))
        replacement = _replacement(hunk, lines[at : at + len(expected)], eol)
        lines[at : at + len(expected)] = replacement
        if number == 1:
            first_line = at + 1
        drift = at - nominal + len(replacement) - len(expected)
        floor = at + len(replacement)
    return "".join(text + end for text, end in lines), first_line


def _lines(text: str) -> list[Line]:
    parts = text.split("\n")
    lines: list[Line] = [(p[:-1], "\r\n") if p.endswith("\r") else (p, "\n") for p in parts[:-1]]
    if parts[-1]:
        lines.append((parts[-1], ""))
    return lines


def _text(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def _locate(lines: list[Line], expected: list[str], stated: int, floor: int) -> int | None:
    """Where ``expected`` matches ``lines`` at or after ``floor``: at ``stated`` if it does, else the
    closest position (the earlier one on a tie, like ``patch``)."""
    size = len(expected)
    last = len(lines) - size
    if last < floor:
        return None
    if not expected:  # a pure insertion has nothing to match: trust the stated line
        return min(max(stated, floor), len(lines))
    stated = min(max(stated, floor), last)
    for distance in range(max(stated - floor, last - stated) + 1):
        for at in (stated - distance, stated + distance) if distance else (stated,):
            if floor <= at <= last and all(lines[at + i][0] == expected[i] for i in range(size)):
                return at
    return None


def _replacement(hunk: Hunk, old: list[Line], eol: str) -> list[Line]:
    """The hunk's target lines; context lines keep the file's endings, added lines get ``eol``."""
    result: list[Line] = []
    old_index = 0
    previous = " "
    for line in hunk:
        kind = line.line_type
        if kind == " ":
            result.append(old[old_index])
            old_index += 1
        elif kind == "-":
            old_index += 1
        elif kind == "+":
            result.append((_text(line.value), eol))
        elif kind == "\\" and previous in (" ", "+") and result:
            # "\ No newline at end of file" after a context or added line: the new text ends there.
            result[-1] = (result[-1][0], "")
        previous = kind
    return result


def _rejection(display: str, number: int, hunk: Hunk, lines: list[Line], expected: list[str], stated: int) -> str:
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    start = min(max(0, stated), max(0, len(lines) - 1))
    actual = [text for text, _ in lines[start : start + max(1, len(expected))]]
    shown_expected = "\n".join(expected) if expected else "(nothing)"
    shown_actual = numbered(actual, start + 1) if actual else "(the file has no lines there)"
    return (
        f"Hunk {number} ({header}) of {display} does not apply: its context and removed lines are not in "
        f"the file. Nothing was changed.\nExpected (the hunk's context and removed lines):\n{shown_expected}\n"
        f"Actual (the file from line {start + 1}, line numbers added):\n{shown_actual}\n"
        "Read the file again and make the patch from its current text, or use edit_file."
    )


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
    transaction = _Transaction(ctx, grace)
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


# -- all or nothing ----------------------------------------------------------------------------------------


@runtime_checkable
class DirRemover(Protocol):
    """A disk that can remove an empty directory (:meth:`refagent.sandbox.local_fs.LocalFileSystem.remove_dir`):
    a rolled-back patch then also takes away the directories it made for new files."""

    async def remove_dir(self, path: str) -> None: ...


@dataclass
class _Step:
    """One change made on the way to the whole patch, and how to take it back."""

    display: str
    """The file, as the model knows it."""
    undo: Callable[[], Awaitable[None]]
    left: str
    """What the file is if taking the step back fails."""
    quiet: bool = False
    """Not a file of the patch (directories made for one): not counted, and a failure is not reported."""
    unsure: bool = False
    """Cut off by a cancel (:func:`_to_the_end`): it may or may not have happened."""


@dataclass
class _Undone:
    """What a rollback did."""

    restored: list[str]
    failed: list[str]
    """One line per file left changed: what it is now, and why."""
    unsure: list[str]
    """Restored files whose change was cut off midway (it may not have happened)."""

    def told(self) -> str:
        """The truth for the model."""
        if not self.failed:
            if not self.restored:
                return "Nothing was changed."
            count = len(self.restored)
            told = f"Nothing was changed: the {plural(count, 'file')} it had already changed {_were(count)} restored."
            if self.unsure:
                told += f" ({', '.join(self.unsure)} was being changed when it was cut off; restored all the same.)"
            return told
        restored = f"Restored: {', '.join(self.restored)}. " if self.restored else ""
        return (
            "Restoring the files already written failed, so part of the patch is in place:\n"
            + "\n".join(f"- {line}" for line in self.failed)
            + f"\n{restored}The other files of the patch were not touched. Read these files again before "
            "going on."
        )


class _Transaction:
    """Applies a patch's changes one step at a time, with a journal to take them back.

    A step is never cut in half by a cancel (:func:`_to_the_end`), so the journal knows what happened.
    Written files are restored with their old text through ``ctx.files`` (the editor's buffers or the
    disk, whose atomic writes keep the file's mode); files the patch created are deleted and the
    directories made for them removed; deleted files are only moved aside (a same-directory rename,
    which keeps their mode, owner and links) until :meth:`commit`; renames are renamed back.
    """

    def __init__(self, ctx: ToolContext, grace: float) -> None:
        self.files = ctx.files
        self.disk = ctx.disk
        self.policy = ctx.policy
        self.grace = grace
        self.steps: list[_Step] = []
        self.backups: list[tuple[str, str]] = []
        """(backup, display) of each deleted file: removed at commit."""
        self.current = ""
        """The file being changed: where a failure happened."""

    async def apply(self, change: FileChange) -> None:
        path, display = change.resolved.path, change.resolved.display
        self.current = display
        if change.after is None:
            backup = _backup_path(path)
            await self._step(
                lambda: self.disk.move(path, backup),
                _Step(display, lambda: self._unhide(backup, path), f"{display} is deleted; its text is in {backup}"),
            )
            self.backups.append((backup, display))
        elif change.source is not None:
            source, source_text, after = change.source.path, change.source_text, change.after
            await self._made_dirs(path, display)
            await self._step(
                lambda: self.disk.move(source, path),
                _Step(display, lambda: self._move_back(path, source), f"{change.source.display} is at {display}"),
            )
            if after != source_text:
                await self._step(
                    lambda: self.files.write_text(path, after),
                    _Step(display, lambda: self.files.write_text(path, source_text), f"{display} has the patched text"),
                )
        elif change.before is None:
            after = change.after
            await self._made_dirs(path, display)
            await self._step(
                lambda: self.files.write_text(path, after),
                _Step(display, lambda: self._remove(path), f"{display} was created by the patch and is still there"),
            )
        else:
            before, after = change.before, change.after
            await self._step(
                lambda: self.files.write_text(path, after),
                _Step(display, lambda: self.files.write_text(path, before), f"{display} has the patched text"),
            )

    async def _step(self, action: Callable[[], Awaitable[None]], step: _Step) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled already: this step does not start

        def ended(done: bool) -> None:
            # Cut off (not done): it may or may not have happened; taking it back is safe either way.
            step.unsure = not done
            self.steps.append(step)

        await _to_the_end(action, self.grace, ended)

    async def _made_dirs(self, path: str, display: str) -> None:
        """Journal the directories a write or move to ``path`` is about to make (``mkdir -p``)."""
        missing: list[str] = []
        parent = os.path.dirname(path)
        while parent not in ("", "/") and await self.disk.kind(parent) is None:
            missing.append(parent)
            parent = os.path.dirname(parent)
        disk = self.disk
        if not missing or not isinstance(disk, DirRemover):
            return

        async def remove() -> None:
            for directory in missing:  # deepest first; one that is not empty now is someone else's too
                with contextlib.suppress(ToolError, OSError):
                    await disk.remove_dir(directory)

        # Journalled before the step: a write that fails midway may have made them already.
        self.steps.append(_Step(display, remove, "", quiet=True))

    async def _remove(self, path: str) -> None:
        if await self.disk.kind(path) is not None:
            await self.disk.delete(path)

    async def _unhide(self, backup: str, path: str) -> None:
        if await self.disk.kind(backup) is not None:
            await self.disk.move(backup, path)

    async def _move_back(self, path: str, source: str) -> None:
        if await self.disk.kind(path) is not None:
            await self.disk.move(path, source)

    async def roll_back(self, seconds: float) -> _Undone:
        """Take back every step, newest first, shielded from cancellation (it may be what caused this) but
        within ``seconds``; what could not be restored is reported, file by file."""
        restored: dict[str, None] = {}
        failed: dict[str, str] = {}
        pending = list(reversed(self.steps))
        with anyio.CancelScope(shield=True), anyio.move_on_after(seconds):
            while pending:
                step = pending[0]
                try:
                    await step.undo()
                except Exception as exc:
                    if not step.quiet:
                        failed.setdefault(step.display, f"{step.left} (restoring it failed: {_reason(exc)})")
                else:
                    if not step.quiet:
                        restored[step.display] = None
                pending.pop(0)
        for step in pending:
            if not step.quiet:
                failed.setdefault(step.display, f"{step.left} (not restored: restoring took more than {seconds:g} s)")
        unsure = [step.display for step in self.steps if step.unsure and step.display in restored]
        self.steps = []
        return _Undone([name for name in restored if name not in failed], list(failed.values()), unsure)

    async def commit(self, seconds: float) -> list[str]:
        """The whole patch is in place: remove the deleted files' backups (shielded: a cancel now must
        not leave them behind). Returns a line for each one that stays."""
        kept: list[str] = []
        pending = list(self.backups)
        with anyio.CancelScope(shield=True), anyio.move_on_after(seconds):
            while pending:
                backup, display = pending[0]
                try:
                    await self.disk.delete(backup)
                except (ToolError, OSError) as exc:
                    kept.append(f"(The text of the deleted {display} is still in {backup}: removing it failed: {exc})")
                pending.pop(0)
        kept += [f"(The text of the deleted {display} is still in {backup}.)" for backup, display in pending]
        return kept


async def _to_the_end(action: Callable[[], Awaitable[None]], grace: float, ended: Callable[[bool], None]) -> None:
    """Run ``action`` to its end even if the call is cancelled meanwhile, but for no more than ``grace``
    seconds after the cancel.

    A write already sent to the editor and then abandoned would leave its outcome unknown (and the
    editor may still apply it after a rollback); waiting for the answer keeps the journal exact. Calls
    ``ended(True)`` once ``action`` returned and ``ended(False)`` when the grace ran out (the outcome is
    unknown); not at all when it raised, and then its error propagates. A cancel is raised afterwards.
    """
    shield = anyio.CancelScope(shield=True)
    over = False

    async def cut_off_when_cancelled() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            if not over:  # the call was cancelled: the step may finish, within the grace
                shield.deadline = anyio.current_time() + grace

    error: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(cut_off_when_cancelled)
        with shield:
            try:
                await action()
            except Exception as exc:
                error = exc
            else:
                ended(True)
        if shield.cancelled_caught:
            ended(False)
        over = True
        group.cancel_scope.cancel()
    if error is not None:
        raise error


def _backup_path(path: str) -> str:
    """Where a file the patch deletes waits for the commit: beside it (the same file system, so moving it
    there and back is a rename), under a name the root watcher ignores."""
    return os.path.join(os.path.dirname(path), f"{TEMP_PREFIX}{secrets.token_hex(8)}.deleted")


def _were(count: int) -> str:
    return "was" if count == 1 else "were"


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, (ToolError, OSError)) else f"{type(exc).__name__}: {exc}"
