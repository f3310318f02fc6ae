"""``glob`` and ``grep``: finding files and text on the sandbox's disk, as the model's tools.

This module is the tools' side: their argument schemas, titles, the permission a search outside the
roots asks for (scoped as any read there is), and the results as the model sees them: sorted by path
(the engines give them in no order), shown relative to the session's cwd, and capped with a note saying
so. What a search visits and finds (ripgrep or the pure-Python engine, the rules both follow, and how an
untrusted tree and pattern are kept harmless) is the sandbox's side, reached only through the
:class:`~refagent.sandbox.seams.Search` seam (``ToolContext.search``; the local one is :mod:`refagent.sandbox.search`).

- ``glob``: files whose path matches a gitignore-style glob (``*.py`` at any depth, ``src/**/*.ts``
  anchored at ``path``); a pattern that starts with an absolute directory (``/abs/dir/**/*.py``, as
  models often write) is searched in that directory.
- ``grep``: lines matching a regex (ripgrep's dialect, line by line) in a file or a directory, shown as
  lines (with context), files or counts. A file named as ``path`` is searched even if ``.gitignore``
  lists it, and ``glob`` does not apply to it (as in ripgrep).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar

from refagent.errors import ToolError
from refagent.sandbox.seams import Hits, OutputMode, PathPolicy, Query
from refagent.sandbox.search.limits import MAX_GREP_LINE_CHARS
from refagent.sandbox.search.walk import check_glob
from refagent.sandbox.within import within
from refagent.tools.args import arg_bool, arg_int, arg_str, plural, shown
from refagent.tools.base import BaseTool, Plan, ResolvedPath, ToolContext, ToolResult, outside_read_scope
from refagent.tools.text import location

MAX_GLOB_RESULTS = 500
DEFAULT_GREP_RESULTS = 200
MAX_GREP_RESULTS = 2000
MAX_PATTERN_BYTES = 32 * 1024
"""The longest regex or glob (UTF-8 bytes). Each goes to ripgrep as one command-line argument, and Linux
takes at most 128 KiB in one, less for all of them and the environment together (past that the start
fails with ``E2BIG``); no real search needs a pattern anywhere near this."""


# -- shared by both tools ---------------------------------------------------------------------------


def _pattern_arg(args: dict[str, Any], name: str, *, required: bool = True) -> str:
    """A regex or glob argument: :func:`arg_str` (no NUL byte, no lone surrogate), and at most
    :data:`MAX_PATTERN_BYTES`, so that ripgrep can be started with it."""
    value = arg_str(args, name, required=required)
    size = len(value.encode("utf-8"))
    if size > MAX_PATTERN_BYTES:
        raise ToolError(
            f"Argument {name!r} is {size:,} bytes long; a pattern is at most {MAX_PATTERN_BYTES:,} bytes. "
            "Search for a shorter one (or for a few shorter ones, one call each)."
        )
    return value


def _prefix(resolved: ResolvedPath) -> str:
    """How paths under ``resolved`` are shown: relative to the cwd, or absolute outside it."""
    display = resolved.display
    if display in ("", "."):
        return ""
    return display.rstrip("/") + "/"


def _outside(plan: Plan, resolved: ResolvedPath, *, tree: bool) -> Plan:
    """A search outside the roots asks, scoped as any read there is: one file's directory, or with
    ``tree`` (a directory searched or listed) everything under it."""
    if not resolved.inside:
        plan.outside = True
        directory = resolved.path if tree else (resolved.path.rsplit("/", 1)[0] or "/")
        plan.permission_key, plan.permission_label = outside_read_scope(directory, tree=tree)
    return plan


def _split_absolute_glob(pattern: str) -> tuple[str | None, str]:
    """``/abs/dir/**/*.py`` -> (``/abs/dir``, ``**/*.py``): models often put the directory in the pattern.

    The rest stays anchored at that directory (``/abs/dir/*.py`` -> ``/*.py``: its own files, not those
    of its subdirectories, as the model meant)."""
    if not pattern.startswith("/"):
        return None, pattern
    parts = pattern.split("/")
    literal = []
    for part in parts[1:]:
        if any(char in part for char in "*?[{"):
            break
        literal.append(part)
    if len(literal) == len(parts) - 1:  # no wildcard at all: one path
        literal.pop()
    rest = "/".join(parts[1 + len(literal) :])
    return "/" + "/".join(literal), rest if rest.startswith("**") else "/" + rest


class _Search(BaseTool):
    """What glob and grep share: a title of their pattern and path. Both run on the sandbox's
    :class:`~refagent.sandbox.seams.Search` (``ToolContext.search``)."""

    kind = "search"
    verb: ClassVar[str]

    def title(self, args: dict[str, Any]) -> str:
        where = args.get("path")
        return f"{self.verb} `{shown(args.get('pattern', ''))}`" + (f" in {shown(where)}" if where else "")


EVERY_FILE = frozenset({"*", "**", "**/*"})
"""Glob patterns that match every file (a pattern without a slash matches names at any depth)."""


class Glob(_Search):
    name = "glob"
    description = (
        "Find files by name with a glob pattern, e.g. `**/*.py`, `*.{ts,tsx}`, `src/**/test_*.py`. A pattern "
        "without a slash matches file names at any depth; one with a slash is matched from `path`. Skips .git "
        "and what .gitignore ignores (never entering an ignored directory, though an ignored file the pattern "
        "names by its extension or name is listed); includes hidden files. Returns paths relative to the "
        f"working directory, sorted by path, at most {MAX_GLOB_RESULTS}."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. `**/*.py`."},
            "path": {"type": "string", "description": "Directory to search (default: the working directory)."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    verb = "Find"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        base, pattern = _split_absolute_glob(_pattern_arg(args, "pattern").strip())
        pattern = pattern.removeprefix("./")
        if pattern.startswith("!"):
            raise ToolError("The pattern must say which files to find; it cannot start with '!'.")
        if not pattern:
            raise ToolError("The pattern names a directory: add a file pattern such as `**/*`.")
        check_glob(pattern)  # a malformed pattern fails here, before any work
        resolved = ctx.policy.resolve(arg_str(args, "path", required=False, kind="name") or base or ".")
        if await ctx.disk.kind(resolved.path) != "dir":
            raise ToolError(f"{resolved.display} is not a directory.")
        prefix = _prefix(resolved)
        title = f"{self.verb} `{shown(pattern)}`" + (f" in {resolved.display}" if prefix else "")

        async def execute() -> ToolResult:
            # A pattern that matches every file is sent as no glob at all: a glob is an override in rg's rules,
            # which lists what it matches even where .gitignore ignores it (node_modules whole, for `**`), and
            # costs a match for each file on a large tree. Without it, the ignored stay out, as said above.
            everything = pattern in EVERY_FILE
            globs = [*([] if everything else [pattern]), *private_globs(ctx.policy, resolved.path)]
            paths, complete = await ctx.search.files(globs, resolved.path, roots=ctx.roots)
            paths.sort()
            listed = [prefix + p for p in paths[:MAX_GLOB_RESULTS]]
            where = f" in {resolved.display}" if prefix else ""
            output = "\n".join(listed) if listed else f"No files match `{pattern}`{where}."
            if len(paths) > MAX_GLOB_RESULTS:
                total = f"{len(paths)}" if complete else f"more than {len(paths)}"
                output += (
                    f"\n\n(Showing the first {MAX_GLOB_RESULTS} of {total} files, by path. "
                    "Use a narrower pattern or path.)"
                )
            return ToolResult(output, raw_output={"files": listed, "total": len(paths), "complete": complete})

        return _outside(Plan(title, execute, locations=[location(resolved.path)]), resolved, tree=True)


class Grep(_Search):
    name = "grep"
    description = (
        "Search file contents with a regular expression (ripgrep syntax, matched line by line). Skips .git, "
        "binary files and what .gitignore ignores. `output_mode`: `content` (matching lines as "
        "`path:line:text`, the default), `files` (paths only) or `count` (matching lines per file). Results "
        "are sorted by path, relative to the working directory, and capped by `max_results`."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression (or plain text, with `literal`)."},
            "path": {"type": "string", "description": "File or directory to search (default: working directory)."},
            "glob": {"type": "string", "description": "Only files matching this glob, e.g. `*.py` or `*.{ts,tsx}`."},
            "output_mode": {"type": "string", "enum": ["content", "files", "count"]},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."},
            "literal": {"type": "boolean", "description": "Search for `pattern` as plain text, not a regex."},
            "context": {"type": "integer", "description": "Lines of context around each match (content mode, 0-10)."},
            "max_results": {
                "type": "integer",
                "description": f"Most lines (content) or files shown (default {DEFAULT_GREP_RESULTS}, at most "
                f"{MAX_GREP_RESULTS}).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    verb = "Search for"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        query = _query(args)
        limit = arg_int(args, "max_results", DEFAULT_GREP_RESULTS, minimum=1, maximum=MAX_GREP_RESULTS)
        resolved = ctx.policy.resolve(arg_str(args, "path", required=False, kind="name") or ".")
        kind = await ctx.disk.kind(resolved.path)
        if kind is None:
            raise ToolError(f"Not found: {resolved.display}")
        if kind == "other":  # reading a FIFO waits for a writer forever; a device may never end
            raise ToolError(
                f"{resolved.display} is not a regular file or a directory (a named pipe, socket or device): "
                "grep searches only files and directories."
            )
        if kind == "dir":
            directory, target, prefix = resolved.path, ".", _prefix(resolved)
        else:  # one file: searched even if .gitignore'd, and the glob does not apply (as in ripgrep)
            directory, target = os.path.split(resolved.path)
            parent = os.path.dirname(resolved.display)
            prefix = parent + "/" if parent else ""
        title = f"{self.verb} `{shown(query.pattern)}`" + (f" in {resolved.display}" if _prefix(resolved) else "")

        async def execute() -> ToolResult:
            excluded = dataclasses.replace(query, globs=[*query.globs, *private_globs(ctx.policy, directory)])
            hits = await ctx.search.grep(excluded, directory, target, roots=ctx.roots)
            raw = {"matches": hits.matches, "files": len(hits.counts), "complete": hits.complete}
            return ToolResult(render(hits, query, limit, prefix), raw_output=raw)

        plan = Plan(title, execute, locations=[location(resolved.path)])
        return _outside(plan, resolved, tree=kind == "dir")


def private_globs(policy: PathPolicy, directory: str) -> list[str]:
    """Globs that keep a search of ``directory`` out of the policy's private paths (the agent's own files
    and the user's credentials, when a root holds them: :attr:`refagent.sandbox.disk.policy.RootPolicy.private`),
    anchored at ``directory``; they come after the model's globs, which cannot bring them back."""
    globs = []
    for path in policy.private:
        if path != directory and within(path, directory):
            relative = os.path.relpath(path, directory)
            globs.append("!/" + "".join("\\" + char if char in "*?[]{}\\!" else char for char in relative))
    return globs


def _query(args: dict[str, Any]) -> Query:
    pattern = _pattern_arg(args, "pattern")
    glob = _pattern_arg(args, "glob", required=False).strip().removeprefix("./")
    if glob:
        check_glob(glob)
    modes: dict[Any, OutputMode] = {None: "content", "content": "content", "files": "files", "count": "count"}
    mode = modes.get(args.get("output_mode"))
    if mode is None:
        raise ToolError("output_mode must be one of content, files, count.")
    return Query(
        pattern=pattern,
        literal=arg_bool(args, "literal"),
        case_insensitive=arg_bool(args, "case_insensitive"),
        context=arg_int(args, "context", 0, minimum=0, maximum=10),
        mode=mode,
        globs=[glob] if glob else [],
    )


def render(hits: Hits, query: Query, limit: int, prefix: str) -> str:
    """The model's view of ``hits``: sorted by path, capped at ``limit`` lines or files."""
    paths = sorted(hits.counts)
    if not paths:
        return f"No matches for `{query.pattern}`."
    total = f"{hits.matches}" if hits.complete else f"more than {hits.matches}"
    files = plural(len(paths), "file")
    if query.mode == "files":
        shown_paths = paths[:limit]
        out = [prefix + p for p in shown_paths]
        if len(paths) > limit or not hits.complete:
            out.append(
                f"\n(Showing {len(shown_paths)} of {files}{'' if hits.complete else ' or more'}. Narrow the search.)"
            )
        return "\n".join(out)
    if query.mode == "count":
        out = [f"{prefix}{p}:{hits.counts[p]}" for p in paths[:limit]]
        out.append(f"\n({total} matching {'line' if total == '1' else 'lines'} in {files}.)")
        return "\n".join(out)
    out = []
    shown_matches = 0
    previous: tuple[str, int] | None = None
    for path in paths:
        for number, is_match, text in hits.lines.get(path, []):
            if is_match:
                if shown_matches == limit:
                    break
                shown_matches += 1
            if query.context and previous is not None and previous != (path, number - 1):
                out.append("--")
            cut = text if len(text) <= MAX_GREP_LINE_CHARS else text[:MAX_GREP_LINE_CHARS] + "… [line cut]"
            out.append(f"{prefix}{path}{':' if is_match else '-'}{number}{':' if is_match else '-'}{cut}")
            previous = (path, number)
        if shown_matches == limit:
            break
    if shown_matches < hits.matches or not hits.complete:
        out.append(
            f"\n(Showing {shown_matches} of {total} matching lines in {files}. Narrow the search with path "
            "or glob, or use output_mode files or count.)"
        )
    return "\n".join(out)
