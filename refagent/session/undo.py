"""``/undo``: what each turn changed, recorded before the change is made (:class:`UndoLog`), and put back as
it was before the last turn that changed files (:func:`restore_last_turn`).

Recording. Before a tool changes files, :meth:`UndoLog.record` turns each diff of its plan into a
``change`` record (:mod:`refagent.persistence.records`): the turn, the path, ``before`` (None: the file
did not exist) and ``after`` (None: it is deleted; ``afterSha256`` instead, the digest, for a text over
:data:`LARGE_AFTER_CHARS`). It is saved before anything is written, so that a crash during the write keeps
the way back; a write that then fails leaves a record of a state that never came, which restoring
recognises (the file is still as it was before). A move or a deleted directory has no text to put back:
it is recorded as ``unsupported``, and undo says so instead of guessing.

Restoring (:func:`restore_last_turn`) the last turn with changes is all or nothing: nothing is written if any of its
files is outside the session's roots now (or a link leads elsewhere), or changed since the agent left it
(it holds neither its text before the turn nor a text the agent wrote). A file already as it was before is
left alone. A file that cannot be written is said, and the others are restored all the same. The turn's
changes are then forgotten (an ``undo`` record), the model is told in a system reminder, and the user
reads what was restored. What commands changed is not tracked, and undo says that too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refagent.errors import ToolError

if TYPE_CHECKING:  # annotations: the tools are not loaded to answer session/new, which makes an UndoLog
    from refagent.tools.base import Plan, ToolContext

Change = dict[str, Any]
"""One ``change`` record, as it is saved (and read back by :mod:`refagent.persistence.reader`)."""

LARGE_AFTER_CHARS = 1 << 20
"""A change record keeps a text written over this size as its digest: ``/undo`` only needs to recognise
it (the file still as the agent left it), and a 20 MB write would otherwise be recorded twice."""

UNTRACKED = "\n\nChanges made by commands the agent ran are not tracked and were not undone."


def text_digest(text: str) -> str:
    """SHA-256 of a text as the record holds it (surrogates too: a file name's bytes may carry them)."""
    import hashlib  # here: only large writes and /undo need it, not the way to session/new's response

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class UndoLog:
    """One session's ``change`` records, the ones not undone yet. ``save`` appends a record to the session's
    record file (it does nothing for a session that is not saved)."""

    __slots__ = ("_save", "changes")

    def __init__(self, save: Callable[[dict[str, Any]], None]) -> None:
        self._save = save
        self.changes: list[Change] = []
        """Oldest first."""

    def restore(self, changes: Iterable[Change]) -> None:
        """Take the changes a saved session's records hold (they are saved already)."""
        self.changes = list(changes)

    def record(self, turn: int, kind: str, plan: Plan) -> None:
        """Record what ``plan`` (of ``kind``, in turn ``turn``) is about to change; save it first."""
        for content in plan.preview:
            if content["type"] != "diff":
                continue
            change: Change = {"kind": "change", "turn": turn, "path": content["path"], "before": content.get("oldText")}
            # A patch that deletes or renames files carries that kind for all its diffs: the file it edits
            # still has its new text; the file it removes shows as emptied (newText "").
            after = None if kind in ("delete", "move") and content["newText"] == "" else content["newText"]
            if after is not None and len(after) > LARGE_AFTER_CHARS:
                change["afterSha256"] = text_digest(after)  # undo restores "before"; "after" it only recognises
            else:
                change["after"] = after
            self._add(change)
        if kind in ("move", "delete") and not any(c["type"] == "diff" for c in plan.preview):
            # A move, or a deleted directory: no text to restore. Undo says so instead of guessing.
            self._add({"kind": "change", "turn": turn, "path": plan.title, "unsupported": kind})

    def last_turn(self) -> int | None:
        """The last turn with changes not undone, if any."""
        return max((c["turn"] for c in self.changes), default=None)

    def forget(self, turn: int) -> None:
        """Turn ``turn`` is undone: its changes are forgotten, in memory and in the record file alike."""
        self.changes = [c for c in self.changes if c["turn"] != turn]
        self._save({"kind": "undo", "turn": turn})

    def _add(self, change: Change) -> None:
        self.changes.append(change)
        self._save(change)


class _File:
    """One file a turn changed, from its change records: its text before the turn, and every text the agent
    left in it (recorded whole, or by digest)."""

    __slots__ = ("before", "digests", "left")

    def __init__(self, before: str | None) -> None:
        self.before = before
        self.left: list[str | None] = []
        self.digests: set[str] = set()

    def left_by_agent(self, text: str | None) -> bool:
        """Whether ``text`` (None: no file) is a state the agent left the file in."""
        return text in self.left or (text is not None and text_digest(text) in self.digests)


async def restore_last_turn(log: UndoLog, context: ToolContext, history: list[dict[str, Any]]) -> str:
    """Put back the files of the last turn with changes, as the module docstring says, through ``context``
    (the session's roots, files and disk now); tell the model in ``history``. Returns what to tell the user."""
    turn = log.last_turn()
    if turn is None:
        return "There is nothing to undo: no turn of this session changed files."
    outcome = await restore_turns(log, context, {turn}, "Undo")
    if outcome.refused is not None:
        return outcome.refused
    if not outcome.restored and not outcome.unsupported and not outcome.failed:
        return "There is nothing to undo: the files the last turn meant to change are as they were before it."
    note = _note(turn, outcome.restored, outcome.unsupported, outcome.failed)
    history.append({"role": "user", "content": f"<system-reminder>{note}</system-reminder>"})
    return _told(outcome.restored, outcome.unsupported, outcome.failed, "the last turn")


@dataclass
class Restored:
    """What :func:`restore_turns` did: ``refused`` (why nothing was written), or the files restored, those
    that could not be (with why), and the changes no text can undo (moves, deleted directories)."""

    refused: str | None = None
    restored: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def told(self, since: str) -> str:
        """What the user reads of it: files restored to their state before ``since``."""
        if self.refused is not None:
            return self.refused
        return _told(self.restored, self.unsupported, self.failed, since)


async def restore_turns(log: UndoLog, context: ToolContext, turns: set[int], doing: str) -> Restored:
    """Put back the files ``turns`` changed as they were before the first of them, all or nothing (``doing``
    names the command in a refusal: "Undo"), and forget those turns' changes."""
    changes = [c for c in log.changes if c["turn"] in turns]
    unsupported = [c["path"] for c in changes if "unsupported" in c]
    files = _files(changes)
    outside = _outside(files, context)
    if outside:
        return Restored(
            f"{doing} refused: these files are outside the session's roots now (or a link leads elsewhere), "
            f"so {doing.lower()} may not write them:\n{_listed(outside)}\nNothing was restored."
        )
    conflicts, unchanged = await _compare(files, context)
    if conflicts:
        return Restored(
            f"{doing} refused: these files changed after the agent's last turn wrote them, and "
            f"{'undoing' if doing == 'Undo' else 'rewinding'} would lose those changes:\n{_listed(conflicts)}\n"
            "Nothing was restored."
        )
    for path in unchanged:
        del files[path]
    failed = await _write_back(files, context) if files else {}
    for turn in sorted({c["turn"] for c in changes}):
        log.forget(turn)
    restored = sorted(path for path in files if path not in failed)
    return Restored(None, restored, unsupported, failed)


def _files(changes: Iterable[Change]) -> dict[str, _File]:
    """The files of a turn's changes (in order: each path's first ``before`` is its state before the turn)."""
    files: dict[str, _File] = {}
    for change in changes:
        if "unsupported" in change:
            continue
        file = files.setdefault(change["path"], _File(change["before"]))
        if "afterSha256" in change:  # a large text, recorded by its digest (UndoLog.record)
            file.digests.add(change["afterSha256"])
        else:
            file.left.append(change.get("after"))
    return files


def _outside(files: Iterable[str], context: ToolContext) -> list[str]:
    """The paths undo may not write now: outside the roots in force (a load may have dropped a directory),
    or reached through a link."""
    outside = []
    for path in files:
        try:
            if context.policy.check_write(path).path != path:
                outside.append(path)
        except ToolError:
            outside.append(path)
    return outside


async def _compare(files: dict[str, _File], context: ToolContext) -> tuple[list[str], list[str]]:
    """``(conflicts, unchanged)``: the files someone changed since the agent left them, and those already as
    they were before the turn (the write never happened, or was undone by hand)."""
    conflicts, unchanged = [], []
    for path, file in files.items():
        try:
            current: str | None = await context.files.read_text(path)
        except FileNotFoundError:
            current = None
        except (ToolError, OSError):  # now a directory, unreadable, too big: not what the agent left there
            conflicts.append(path)
            continue
        if current == file.before:
            unchanged.append(path)
        elif not file.left_by_agent(current):
            conflicts.append(path)
    return conflicts, unchanged


async def _write_back(files: dict[str, _File], context: ToolContext) -> dict[str, str]:
    """Put each file back as it was before the turn (deleted, if it did not exist); returns the ones that
    could not be, with why. The others are restored all the same."""
    failed: dict[str, str] = {}
    for path, file in files.items():
        try:
            if file.before is None:
                if await context.disk.kind(path) is not None:
                    await context.disk.delete(path)
            else:
                await context.files.write_text(path, file.before)
        except (ToolError, OSError) as exc:
            failed[path] = str(exc)
        context.reads.forget(path)  # read again before an edit: the model's view of it is the turn's
    return failed


def _note(turn: int, restored: Sequence[str], unsupported: Sequence[str], failed: dict[str, str]) -> str:
    """What the model is told: its turn's files are back, and what could not be."""
    note = f"The user ran /undo: the files your turn {turn} changed are back as they were before it:\n"
    note += _listed(restored)
    if unsupported:
        note += "\nNot undone (moves and deleted directories cannot be): " + ", ".join(unsupported)
    if failed:
        note += "\nCould not be restored: " + ", ".join(sorted(failed))
    return note


def _told(restored: Sequence[str], unsupported: Sequence[str], failed: dict[str, str], since: str) -> str:
    """What the user is told."""
    message = ""
    if restored:
        files = "file to its" if len(restored) == 1 else "files to their"
        message = f"Restored {len(restored)} {files} state before {since}:\n{_listed(restored)}"
    if unsupported:
        message += f"\nNot undone (moves and deleted directories cannot be): {', '.join(unsupported)}"
    if failed:
        message += "\nCould not restore:\n" + "\n".join(f"- {path}: {why}" for path, why in sorted(failed.items()))
    return message.strip() + UNTRACKED


def _listed(paths: Iterable[str]) -> str:
    """A markdown list, and the line break that, with the next one, ends it (else the next sentence would
    be drawn as part of its last item)."""
    return "".join(f"- {path}\n" for path in sorted(paths))
