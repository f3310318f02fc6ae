"""``apply_patch``: apply a unified diff (one or more files) all or nothing.

The patch is parsed with :mod:`unidiff`; ``git diff`` output (``a/`` and ``b/`` prefixes, ``/dev/null`` for
new and deleted files, renames) is accepted. Every hunk must apply exactly: its context and removed lines
must equal the file's lines. Like ``patch``, a hunk is looked for near its stated line when the file has
shifted (the closest position wins), but there is no fuzz: a hunk that matches nowhere rejects the whole
patch, nothing is written, and the model is shown the expected lines next to the actual ones.

Lines are compared without their endings, so a CRLF file takes a patch written with ``\\n``; added lines
get the file's line ending. ``\\ No newline at end of file`` markers are honoured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk, PatchedFile, PatchSet

from refagent.acp.types import ToolCallContent, ToolCallLocation
from refagent.errors import ToolError
from refagent.tools.base import BaseTool, Plan, ResolvedPath, ToolContext, ToolResult
from refagent.tools.files import EDIT_PERMISSION, arg_str, diff, is_crlf, location, numbered, read_existing
from refagent.tools.paths import forget_path

DEV_NULL = "/dev/null"

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
            return await _write(ctx, ordered)

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


async def _write(ctx: ToolContext, changes: list[FileChange]) -> ToolResult:
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
    summary: list[str] = []
    try:
        for change in changes:
            path, display = change.resolved.path, change.resolved.display
            if change.after is None:
                await ctx.disk.delete(path)
                forget_path(ctx, path)
                summary.append(f"D {display}")
                continue
            await ctx.files.write_text(path, change.after)
            ctx.reads.saw(path, change.after)
            if change.source is not None:
                await ctx.disk.delete(change.source.path)
                forget_path(ctx, change.source.path)
                summary.append(f"R {change.source.display} -> {display} (+{change.added} -{change.removed})")
            else:
                letter = "A" if change.before is None else "M"
                summary.append(f"{letter} {display} (+{change.added} -{change.removed})")
    except (ToolError, OSError) as exc:
        done = "; ".join(summary) or "none"
        raise ToolError(f"Writing the patch failed: {exc}. Already changed: {done}.") from None
    return ToolResult(
        "Applied the patch:\n" + "\n".join(summary),
        content=_diffs(changes),
        raw_output={"files": summary},
        locations=_locations(changes),
    )
