"""The file tools: ``read_file``, ``write_file`` and ``edit_file`` (the contract: :mod:`refagent.tools.base`).

Reads go through ``ctx.files`` (the editor's buffers when it offers ``fs/read_text_file``, else the
disk); from the local disk, a page is read without reading the rest of a big file (:class:`LinePager`,
returning :class:`~refagent.sandbox.disk.read.LinePage`). A read records what the model saw in
``ctx.reads``; an edit or overwrite of a file that changed since is refused by ``ctx.reads.check_fresh``,
and so is one whose file changed while the user was being asked. Edits are previewed as ACP ``diff``
content (the whole file before and after) and written through ``ctx.files.write_text``. :func:`change_plan`
builds the plan of each call that changes the workspace, here and in :mod:`refagent.tools.paths`.

The argument checks and text helpers these tools share with the others are in :mod:`refagent.tools.args`
and :mod:`refagent.tools.text`. An edit's diagnostics (why ``old_string`` was not found, and the nearest
text to copy) stay here, next to the edit.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from refagent.acp.types import ToolCallContent, ToolCallLocation
from refagent.errors import ToolError
from refagent.sandbox.disk.read import LinePage
from refagent.sandbox.seams import FromDisk
from refagent.tools.args import arg_bool, arg_int, arg_str, shown
from refagent.tools.base import CANCEL_NOTE, BaseTool, Plan, ResolvedPath, ToolContext, ToolResult, outside_read_scope
from refagent.tools.text import MAX_LINE_CHARS, cut_line, diff, is_crlf, location, numbered, split_lines, with_endings

DEFAULT_READ_LIMIT = 2000
"""Lines per read_file page when the model gives no ``limit``."""
MAX_READ_LIMIT = 10_000
MAX_PAGE_CHARS = 100_000
"""A page ends early when its text would pass this (~25k tokens), whatever ``limit`` says."""

EDIT_PERMISSION = ("edit", "edits inside the workspace")


def change_plan(
    title: str,
    execute: Callable[[], Awaitable[ToolResult]],
    locations: list[ToolCallLocation],
    preview: list[ToolCallContent],
    permission: tuple[str, str],
) -> Plan:
    """The plan of a call that changes the workspace (``mutating``: the session's mode decides whether the user
    is asked); an "always allow" remembers ``permission``, a ``(key, label)`` such as :data:`EDIT_PERMISSION`."""
    key, label = permission
    return Plan(
        title, execute, locations=locations, preview=preview, mutating=True, permission_key=key, permission_label=label
    )


async def read_existing(ctx: ToolContext, path: str) -> str | None:
    """The current text of ``path``, or None if there is no such file."""
    try:
        return await ctx.files.read_text(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ToolError(f"{path} is a directory, not a file.") from None


def disk_note(*texts: str | None) -> str:
    """What a tool's result adds for a text the editor could not give (read from the disk instead:
    :class:`~refagent.sandbox.seams.FromDisk`), so the model knows unsaved changes may be missing; else ``""``."""
    notes = dict.fromkeys(text.note for text in texts if isinstance(text, FromDisk))
    return "".join(f"\n\n(Note: {note})" for note in notes)


# -- read_file --------------------------------------------------------------------------------------


@runtime_checkable
class LinePager(Protocol):
    """A backend that reads a page without reading the whole file: the local disk
    (:meth:`refagent.sandbox.disk.local_fs.LocalFileSystem.read_lines`). Page 1 of a 100 MB file must cost
    what page 1 of a 1 MB file costs."""

    async def read_lines(self, path: str, offset: int, limit: int, max_line_chars: int) -> LinePage: ...


def page_of(text: str, offset: int, limit: int) -> LinePage:
    """A page of ``text`` already in memory (an editor's buffer: ``fs/read_text_file`` has ``line`` and
    ``limit``, but :class:`~refagent.tools.base.TextFiles` reads whole files)."""
    lines = split_lines(text)
    chosen = [cut_line(line) for line in lines[offset - 1 : offset - 1 + limit]]
    return LinePage(chosen, offset, offset - 1 + len(chosen) < len(lines), total=len(lines), text=text)


class ReadFile(BaseTool):
    name = "read_file"
    description = (
        "Read a text file. Returns its lines numbered like `cat -n` (number, tab, line). Reads up to "
        f"{DEFAULT_READ_LIMIT} lines from `offset`; the result says how to read on when there is more. Lines "
        f"over {MAX_LINE_CHARS} characters are cut. Binary files are refused. When you edit, copy text "
        "without the line-number prefix."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
            "offset": {"type": "integer", "description": "First line to read, 1-based (default 1).", "minimum": 1},
            "limit": {
                "type": "integer",
                "description": f"Maximum number of lines (default {DEFAULT_READ_LIMIT}, at most {MAX_READ_LIMIT}).",
                "minimum": 1,
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    kind = "read"

    def title(self, args: dict[str, Any]) -> str:
        title = f"Read {shown(args.get('path', ''))}"
        offset = args.get("offset")
        return f"{title} (from line {offset})" if isinstance(offset, int) and offset > 1 else title

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        resolved = ctx.policy.resolve(arg_str(args, "path", kind="name"))
        offset = arg_int(args, "offset", 1, minimum=1, maximum=2**62)
        limit = arg_int(args, "limit", DEFAULT_READ_LIMIT, minimum=1, maximum=MAX_READ_LIMIT)
        # Nothing is read before permission: a read outside the roots is what the user is asked about.
        plan = Plan(
            title=f"Read {resolved.display}" + (f" (from line {offset})" if offset > 1 else ""),
            execute=lambda: self._read(ctx, resolved, offset, limit),
            locations=[location(resolved.path, offset)],
            outside=not resolved.inside,
        )
        if not resolved.inside:
            folder = resolved.path.rsplit("/", 1)[0] or "/"
            plan.permission_key, plan.permission_label = outside_read_scope(folder, tree=False)
        return plan

    async def _read(self, ctx: ToolContext, resolved: ResolvedPath, offset: int, limit: int) -> ToolResult:
        path = resolved.path
        if await ctx.disk.kind(path) == "dir":
            raise ToolError(f"{resolved.display} is a directory. Use glob to list its files.")
        note = ""
        try:
            page: LinePage
            if ctx.files is ctx.disk and isinstance(ctx.disk, LinePager):
                page = await ctx.disk.read_lines(path, offset, limit, MAX_LINE_CHARS)
            else:
                text = await ctx.files.read_text(path)
                note = disk_note(text)
                page = page_of(text, offset, limit)
        except FileNotFoundError:
            raise ToolError(f"File not found: {resolved.display}") from None
        if "\x00" in "".join(page.lines[:50]):
            raise ToolError(f"{resolved.display} is a binary file; read_file reads text only.")
        if page.text is not None:
            ctx.reads.saw(path, page.text)
        lines = _fit(page.lines)
        last = offset + len(lines) - 1
        if not lines:
            if offset == 1:
                return ToolResult("(The file is empty.)", raw_output={"path": path, "lines": 0})
            total = f" (it has {page.total} lines)" if page.total is not None else ""
            raise ToolError(f"offset {offset} is past the end of {resolved.display}{total}.")
        output = numbered(lines, offset, cut=False)
        more = page.more or len(lines) < len(page.lines)
        if more:
            of = f" of {page.total}" if page.total is not None else ""
            size = f", {page.size} bytes in all" if page.total is None and page.size is not None else ""
            output += (
                f"\n\n(Showing lines {offset}-{last}{of}{size}. Call read_file with offset={last + 1} to read on.)"
            )
        elif offset > 1:
            output += f"\n\n(Showing lines {offset}-{last}, the end of the file.)"
        raw = {"path": path, "first_line": offset, "last_line": last, "more": more, "total_lines": page.total}
        return ToolResult(output + note, raw_output=raw, locations=[location(path, offset)])


def _fit(lines: list[str]) -> list[str]:
    """The leading lines whose numbered text fits in :data:`MAX_PAGE_CHARS` (at least one)."""
    used = 0
    for index, line in enumerate(lines):
        used += 8 + min(len(line), MAX_LINE_CHARS + 40)
        if used > MAX_PAGE_CHARS and index > 0:
            return lines[:index]
    return lines


# -- write_file -------------------------------------------------------------------------------------


class WriteFile(BaseTool):
    name = "write_file"
    description = (
        "Create a file, or replace the whole content of an existing one (prefer edit_file for changes to an "
        "existing file). Parent directories are created. An existing file that uses CRLF line endings keeps "
        "them. Overwriting a file that changed since you read it is refused: read it again first."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    kind = "edit"

    def title(self, args: dict[str, Any]) -> str:
        return f"Write {shown(args.get('path', ''))}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        resolved = ctx.policy.check_write(arg_str(args, "path", kind="name"))
        content = arg_str(args, "content", empty=True, kind="content")
        path = resolved.path
        if await ctx.disk.kind(path) == "dir":
            raise ToolError(f"{resolved.display} is a directory.")
        old = await read_existing(ctx, path)
        if old is not None:
            # A file never read may be overwritten: the user sees the whole diff before it happens.
            ctx.reads.check_fresh(path, old)
        new = with_endings(content, old)

        async def execute() -> ToolResult:
            await _check_unchanged(ctx, resolved, old)
            await _write(ctx, path, new, resolved.display)
            verb = "Created" if old is None else "Overwrote"
            count = len(split_lines(new))
            return ToolResult(
                f"{verb} {resolved.display} ({count} lines).{disk_note(old)}",
                content=[diff(path, old, new)],
                raw_output={"path": path, "created": old is None, "lines": count},
                locations=[location(path, 1)],
            )

        title = f"Write {resolved.display}" if old is not None else f"Create {resolved.display}"
        return change_plan(title, execute, [location(path, 1)], [diff(path, old, new)], EDIT_PERMISSION)


async def _check_unchanged(ctx: ToolContext, resolved: ResolvedPath, expected: str | None) -> None:
    """Refuse to write if the file changed while the user was being asked (the diff they saw is stale)."""
    if await read_existing(ctx, resolved.path) != expected:
        raise ToolError(
            f"{resolved.display} changed while waiting for permission; nothing was written. "
            "Read it again and redo the change."
        )


# -- edit_file --------------------------------------------------------------------------------------

_LINE_NUMBER_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)


class EditFile(BaseTool):
    name = "edit_file"
    description = (
        "Replace an exact piece of text in a file. `old_string` must match the file exactly (whitespace and "
        "indentation included, no line-number prefixes from read_file) and exactly once, unless "
        "`replace_all` is true: include enough surrounding lines to make it unique. An empty `old_string` "
        "creates a new file (or fills an empty one) with `new_string`. Line endings of the file are kept. "
        "Read the file first; an edit of a file that changed since you read it is refused."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place (must differ)."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one (default false).",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    kind = "edit"

    def title(self, args: dict[str, Any]) -> str:
        return f"Edit {shown(args.get('path', ''))}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        resolved = ctx.policy.check_write(arg_str(args, "path", kind="name"))
        old_string = arg_str(args, "old_string", empty=True, kind="content")
        new_string = arg_str(args, "new_string", empty=True, kind="content")
        replace_all = arg_bool(args, "replace_all")
        if old_string == new_string:
            raise ToolError("old_string and new_string are the same: there is nothing to change.")
        path = resolved.path
        if await ctx.disk.kind(path) == "dir":
            raise ToolError(f"{resolved.display} is a directory.")
        before = await read_existing(ctx, path)
        if before is None:
            if old_string:
                raise ToolError(
                    f"File not found: {resolved.display}. To create it, use write_file (or edit_file "
                    "with an empty old_string)."
                )
            after, first_line, count = new_string, 1, 1
        else:
            ctx.reads.check_fresh(path, before)
            after, first_line, count = _replace(resolved.display, before, old_string, new_string, replace_all)

        async def execute() -> ToolResult:
            await _check_unchanged(ctx, resolved, before)
            await _write(ctx, path, after, resolved.display)
            return ToolResult(
                _edit_report(resolved.display, before, after, first_line, count, new_string) + disk_note(before),
                content=[diff(path, before, after)],
                raw_output={"path": path, "replacements": count, "created": before is None},
                locations=[location(path, first_line)],
            )

        title = f"Edit {resolved.display}" if before is not None else f"Create {resolved.display}"
        return change_plan(title, execute, [location(path, first_line)], [diff(path, before, after)], EDIT_PERMISSION)


def _replace(display: str, text: str, old: str, new: str, replace_all: bool) -> tuple[str, int, int]:
    """``text`` with ``old`` replaced; the first changed line (1-based) and the number of replacements.

    A file with CRLF endings throughout is matched and changed in ``\\n`` space and written back with
    CRLF, since models send ``\\n``.
    """
    if not old:
        if text:
            raise ToolError(
                f"old_string is empty but {display} is not: give the exact text to replace "
                "(or use write_file to replace the whole file)."
            )
        return with_endings(new, text), 1, 1
    crlf = is_crlf(text)
    if crlf:
        text, old, new = (s.replace("\r\n", "\n") for s in (text, old, new))
    positions = _find_all(text, old)
    if not positions:
        raise ToolError(_not_found(display, text, old))
    lines = [text.count("\n", 0, p) + 1 for p in positions]
    if len(positions) > 1 and not replace_all:
        shown_lines = ", ".join(map(str, lines[:20])) + (", ..." if len(lines) > 20 else "")
        raise ToolError(
            f"old_string occurs {len(positions)} times in {display} (at lines {shown_lines}). Include more "
            "surrounding lines to make it unique, or set replace_all to true to replace every occurrence."
        )
    after = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    if crlf:
        after = after.replace("\n", "\r\n")
    return after, lines[0], len(positions)


def _find_all(text: str, needle: str) -> list[int]:
    """Start offsets of the non-overlapping occurrences (the ones ``str.replace`` replaces)."""
    found: list[int] = []
    start = text.find(needle)
    while start != -1:
        found.append(start)
        start = text.find(needle, start + len(needle))
    return found


def _not_found(display: str, text: str, old: str) -> str:
    """Why ``old`` is not in ``text``, as precisely as we can tell, with the nearest text to copy."""
    message = f"old_string was not found in {display}."
    if _LINE_NUMBER_PREFIX.search(old) and all(
        _LINE_NUMBER_PREFIX.match(line) for line in old.split("\n") if line.strip()
    ):
        return message + (
            " It seems to include the line-number prefixes of read_file's output (spaces, number, tab): "
            "send the file's text without them."
        )
    file_lines = text.split("\n")
    old_lines = old.strip("\n").split("\n")
    near = _whitespace_match(file_lines, old_lines)
    if near is not None:
        actual = file_lines[near : near + len(old_lines)]
        return message + (
            f" It matches lines {near + 1}-{near + len(actual)} when whitespace is ignored, so the "
            "indentation or spacing differs. The file has (line numbers added):\n"
            + numbered(actual, near + 1)
            + "\nCopy the text exactly, with its whitespace."
        )
    close = _closest(file_lines, old_lines)
    if close is not None:
        start, ratio = close
        actual = file_lines[start : start + max(1, len(old_lines))]
        return message + (
            f" The most similar text ({ratio:.0%} alike) is at line {start + 1} (line numbers added):\n"
            + numbered(actual, start + 1)
            + "\nIf this is the place, copy its text exactly; otherwise read the file again."
        )
    return message + " Read the file again (read_file) and copy the exact text, including whitespace."


def _normal(line: str) -> str:
    return " ".join(line.split())


def _whitespace_match(file_lines: list[str], old_lines: list[str]) -> int | None:
    """The first index where ``old_lines`` match when runs of whitespace are ignored."""
    wanted = [_normal(line) for line in old_lines]
    if not any(wanted):
        return None
    normal = [_normal(line) for line in file_lines]
    size = len(wanted)
    for index in range(len(normal) - size + 1):
        if normal[index] == wanted[0] and normal[index : index + size] == wanted:
            return index
    return None


def _closest(file_lines: list[str], old_lines: list[str]) -> tuple[int, float] | None:
    """The line where the most similar block starts (by its first non-blank line), if similar enough."""
    anchor_at = next((i for i, line in enumerate(old_lines) if line.strip()), None)
    if anchor_at is None or len(file_lines) > 50_000:  # the hint is not worth seconds
        return None
    anchor = old_lines[anchor_at].strip()
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(anchor)
    best: tuple[int, float] | None = None
    for index, line in enumerate(file_lines):
        matcher.set_seq1(line.strip())
        if matcher.real_quick_ratio() < 0.6 or matcher.quick_ratio() < 0.6:
            continue
        ratio = matcher.ratio()
        if ratio >= 0.6 and (best is None or ratio > best[1]):
            best = (max(0, index - anchor_at), ratio)
    return best


def _edit_report(display: str, before: str | None, after: str, first_line: int, count: int, new: str) -> str:
    """What the model reads after an edit: what changed, and the changed region with line numbers."""
    if before is None:
        return f"Created {display} ({len(split_lines(after))} lines)."
    lines = split_lines(after)
    if count > 1:
        return f"Edited {display}: replaced {count} occurrences."
    changed = max(1, new.count("\n") + (0 if new.endswith("\n") else 1))
    start = max(1, first_line - 3)
    end = min(len(lines), first_line + changed - 1 + 3, start + 40)
    snippet = numbered(lines[start - 1 : end], start) if lines else "(the file is now empty)"
    return f"Edited {display}. Lines {start}-{end} now read:\n{snippet}"


WRITE_SECONDS = 30.0
"""How long a write on its way is waited for once the call is cancelled (:func:`_write`)."""


async def _write(ctx: ToolContext, path: str, text: str, display: str) -> None:
    """Write ``text`` to ``path`` and note that the model has seen it. A cancel that comes while the write
    is on its way (the editor's ``fs/write_text_file``, which the editor may still carry out after the agent
    stopped waiting) waits for its answer, :data:`WRITE_SECONDS` at most, and then says the file was
    written (:data:`~refagent.tools.base.CANCEL_NOTE`): the model, the record and ``/undo`` hear what was
    done, not that nothing was."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(WRITE_SECONDS) as waited:
        await ctx.files.write_text(path, text)
    if waited.cancelled_caught:
        raise ToolError(
            f"The write of {display} got no answer within {WRITE_SECONDS:g} s: it may or may not have been done. "
            f"Read {display} to see what it holds."
        )
    ctx.reads.saw(path, text)
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class() as cancelled:
        cancelled.add_note(f"{CANCEL_NOTE}The user cancelled this call after {display} was written.")
        raise
