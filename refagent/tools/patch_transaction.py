"""All or nothing while ``apply_patch`` writes: a :class:`Transaction` makes a patch's changes
(:class:`FileChange`, worked out in memory beforehand) one step at a time with a rollback journal.

Contract: an error or a cancel in the middle takes back every step already made
(:meth:`Transaction.roll_back`, shielded from the cancellation) and says exactly what it restored and
what it could not (:class:`Undone`); a step already under way when a cancel comes is finished rather
than abandoned (within :data:`GRACE_SECONDS`), so the journal knows what it is taking back. Files
deleted by the patch are only moved aside until :meth:`Transaction.commit`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from refagent.errors import ToolError
from refagent.sandbox.disk.write import TEMP_PREFIX, TEMP_SUFFIX
from refagent.tools.args import plural
from refagent.tools.base import ResolvedPath, ToolContext

GRACE_SECONDS = 5.0
"""After a cancel, how long a step already under way (a write sent to the editor) may still take: it is
finished rather than abandoned, so the rollback knows exactly what it is taking back."""
ROLLBACK_SECONDS = 30.0
"""How long restoring may take, shielded from the cancellation that may have caused it."""


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


@runtime_checkable
class DirRemover(Protocol):
    """A disk that can remove an empty directory (:meth:`refagent.sandbox.disk.local_fs.LocalFileSystem.remove_dir`):
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
class Undone:
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


class Transaction:
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

    async def roll_back(self, seconds: float) -> Undone:
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
        return Undone([name for name in restored if name not in failed], list(failed.values()), unsure)

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
    there and back is a rename), under the name of one of the agent's temporary files, which the root
    watcher, ``glob`` and ``grep`` all leave out: the model never sees it while the patch runs."""
    return os.path.join(os.path.dirname(path), f"{TEMP_PREFIX}{secrets.token_hex(8)}-deleted{TEMP_SUFFIX}")


def _were(count: int) -> str:
    return "was" if count == 1 else "were"


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, (ToolError, OSError)) else f"{type(exc).__name__}: {exc}"
