"""``delete_path`` and ``move_path``: changes to the tree itself, always on the local disk (ACP gives
editors no such methods).

Both act on the directory entry the model names: a symbolic link is deleted or moved itself, never its
target (when the policy supports ``follow_symlinks=False``, as :class:`~refagent.sandbox.disk.policy.RootPolicy`
does). The policy refuses roots, anything outside the roots and ``.git``; a directory is deleted only with
``recursive``; a move never overwrites.

A ``.git`` at any depth is never deleted or moved along with a tree (a nested or vendored repository,
a submodule): a directory that holds one is refused here, before permission is asked, and again by the
disk at the moment of the delete or move (:data:`~refagent.sandbox.disk.trees.PROTECTED_NAME`), which
refuses before it deletes or moves anything.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from refagent.acp.types import ToolCallContent
from refagent.errors import ToolError
from refagent.tools.args import arg_bool, arg_str, plural, shown
from refagent.tools.base import BaseTool, PathPolicy, Plan, ResolvedPath, ToolContext, ToolResult, TreePreview
from refagent.tools.files import change_plan
from refagent.tools.text import diff, location, text_content

DELETE_PERMISSION = ("delete", "deletions inside the workspace")
MOVE_PERMISSION = ("move", "moves and renames inside the workspace")
PREVIEW_TEXT_BYTES = 1_000_000
"""A deleted file bigger than this is described, not shown as a diff."""


def check_entry(policy: PathPolicy, path: str) -> ResolvedPath:
    """``policy.check_write`` for the entry itself: a final symbolic link is not followed."""
    return policy.check_write(path, follow_symlinks=False)


def forget_path(ctx: ToolContext, path: str) -> None:
    """Tell the read tracker a path is gone (a file made there later is new)."""
    ctx.reads.forget(path)


def _summary(tree: TreePreview) -> str:
    more = "" if tree.complete else "more than "
    dirs = f"{tree.dirs} {'directory' if tree.dirs == 1 else 'directories'}"
    return f"{more}{plural(tree.files, 'file')} and {dirs}, {tree.size} bytes"


class DeletePath(BaseTool):
    name = "delete_path"
    description = (
        "Delete a file, a symbolic link (not its target), or a directory with everything in it (only with "
        "`recursive: true`). A workspace root, .git, and a directory that holds a .git at any depth (a nested "
        "repository) cannot be deleted."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path, relative to the working directory or absolute."},
            "recursive": {
                "type": "boolean",
                "description": "Required to delete a directory and everything in it (default false).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    kind = "delete"

    def title(self, args: dict[str, Any]) -> str:
        return f"Delete {shown(args.get('path', ''))}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        resolved = check_entry(ctx.policy, arg_str(args, "path", kind="name"))
        recursive = arg_bool(args, "recursive")
        path, display = resolved.path, resolved.display
        if path in ctx.roots:  # the policy refuses roots too; a second lock on the most dangerous door
            raise ToolError(f"{display} is a workspace root; it cannot be deleted.")
        kind = await ctx.disk.kind(path)
        if kind is None:
            raise ToolError(f"Not found: {display}")
        preview: list[ToolCallContent]
        if kind == "dir":
            tree = await ctx.disk.preview_tree(path)
            _refuse_git(tree, display, "delete", "deleted")
            if not recursive:
                raise ToolError(
                    f"{display} is a directory ({_summary(tree)}). Set recursive to true to delete it and "
                    "everything in it."
                )
            listing = "\n".join(f"- {entry}" for entry in tree.entries)
            more = "\n- ..." if tree.files + tree.dirs > len(tree.entries) else ""
            what = f"directory {display} and everything in it ({_summary(tree)})"
            preview = [text_content(f"Delete the {what}:\n{listing}{more}" if listing else f"Delete the {what}.")]
            done = f"Deleted the {what}."
        elif kind == "file":
            old = await _text_or_none(ctx, path)
            if old is not None:
                ctx.reads.check_fresh(path, old)
                preview = [diff(path, old, "")]
            else:
                preview = [text_content(f"Delete {display} (not shown: binary or large).")]
            done = f"Deleted {display}."
        else:
            target = await ctx.disk.link_target(path) or "?"
            preview = [text_content(f"Delete {display} (a symbolic link to {target}; the target stays).")]
            done = f"Deleted the symbolic link {display}."

        async def execute() -> ToolResult:
            await ctx.disk.delete(path, recursive=kind == "dir")
            forget_path(ctx, path)
            return ToolResult(done, content=preview, raw_output={"path": path, "kind": kind})

        return change_plan(f"Delete {display}", execute, [location(path)], preview, DELETE_PERMISSION)


def _refuse_git(tree: TreePreview, display: str, verb: str, done: str) -> None:
    """ToolError if ``tree`` holds a ``.git``: a repository inside the workspace is not the file tools' to
    delete or move (its history; its paths)."""
    if tree.git is None:
        return
    found = os.path.join(display, tree.git)
    raise ToolError(
        f"{display} contains {found}, a git repository's .git, and the file tools never {verb} a .git, at any "
        f"depth. Nothing was {done}. {verb.capitalize()} the other entries by name instead, or ask the user."
    )


async def _text_or_none(ctx: ToolContext, path: str) -> str | None:
    """The file's text for a deletion diff, or None when it is not text or too big to show."""
    data = await ctx.disk.read_start(path, PREVIEW_TEXT_BYTES)
    if data is None or len(data) > PREVIEW_TEXT_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class MovePath(BaseTool):
    name = "move_path"
    description = (
        "Move or rename a file, directory or symbolic link. `destination` is the new path itself (not a "
        "directory to move into) and must not exist; missing parent directories are created. .git, and a "
        "directory that holds a .git at any depth, cannot be moved."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "description": "Existing path."},
            "destination": {"type": "string", "description": "New path; must not exist yet."},
        },
        "required": ["source", "destination"],
        "additionalProperties": False,
    }
    kind = "move"

    def title(self, args: dict[str, Any]) -> str:
        return f"Move {shown(args.get('source', ''))} to {shown(args.get('destination', ''))}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        source = check_entry(ctx.policy, arg_str(args, "source", kind="name"))
        destination = check_entry(ctx.policy, arg_str(args, "destination", kind="name"))
        if source.path == destination.path:
            raise ToolError("source and destination are the same path.")
        kind = await ctx.disk.kind(source.path)
        if kind is None:
            raise ToolError(f"Not found: {source.display}")
        if await ctx.disk.kind(destination.path) is not None:
            raise ToolError(
                f"{destination.display} already exists; move_path does not overwrite. Delete it first, or "
                "choose another destination (the full new path, including the name)."
            )
        if kind == "dir" and destination.path.startswith(source.path.rstrip("/") + "/"):
            raise ToolError(f"Cannot move {source.display} into itself ({destination.display}).")
        if kind == "dir":
            _refuse_git(await ctx.disk.preview_tree(source.path), source.display, "move", "moved")
        what = {"dir": "directory ", "other": "symbolic link "}.get(kind, "")
        message = f"Move {what}{source.display} to {destination.display}"
        preview = [text_content(message + ".")]

        async def execute() -> ToolResult:
            await ctx.disk.move(source.path, destination.path)
            ctx.reads.moved(source.path, destination.path)  # what the model saw moves along
            return ToolResult(
                f"Moved {what}{source.display} to {destination.display}.",
                content=preview,
                raw_output={"source": source.path, "destination": destination.path},
                locations=[location(destination.path)],
            )

        locations = [location(source.path), location(destination.path)]
        return change_plan(message, execute, locations, preview, MOVE_PERMISSION)
