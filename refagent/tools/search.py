"""``glob`` and ``grep``: finding files and text on the local disk.

Both run ripgrep (``rg``) when it can be found, and a pure-Python walker otherwise; the two give the same
results for the same tree (the tests run both on one tree), so the fallback is a real implementation, not
a degraded mode. The rules, all ripgrep's (``rg --hidden --no-ignore-dot --no-ignore-exclude
--no-ignore-global -g '!.git'``):

- ``.git`` is never entered; other hidden files and directories are searched; symlinks are not followed.
- ``.gitignore`` files are respected inside a git repository (a directory with ``.git``), from the
  repository's top down, as git does; a nested repository starts afresh. Outside any repository they are
  not (ripgrep's default). ``.ignore``, ``.git/info/exclude`` and global excludes are not used. Their
  lines, and ``glob``, are read as ripgrep reads them: :mod:`refagent.gitignore`'s ``rg`` dialect.
- A ``glob`` is gitignore-style: without a slash it matches a file name at any depth (``*.py``), with one
  it is anchored at the searched directory (``src/**/*.ts``); ``{a,b}`` alternatives work. As in ripgrep,
  a file a glob names is included even if ``.gitignore`` lists it, but ignored directories stay pruned.
- grep treats a file with a NUL byte as binary and skips it (ripgrep may print matches found before the
  NUL; those are dropped so both engines agree).
- Results are sorted by path (ripgrep searches in parallel, so its order varies), shown relative to the
  session's cwd, and capped with a note saying so.

The regex dialect is Rust's (``regex`` crate) with ripgrep and Python's ``re`` in the fallback. They agree
on the common syntax (classes, ``\\d\\w\\s\\b``, groups, ``(?i)``, lazy quantifiers). ``\\z`` and ``(?<name>``
are translated for Python. A pattern ripgrep rejects but Python accepts (look-around, back-references)
is run by the fallback engine, so the model gets results rather than a dialect error. Matching is per
line: a pattern cannot match across lines. Bytes that are not UTF-8 are shown as U+FFFD by both; ripgrep
matches them with nothing (not even ``.``), Python with what matches U+FFFD.

The module is long (~700 lines) on purpose: the walker, the ripgrep driver and the Python engine must
agree line for line, and are easiest to check against each other in one place.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio

from refagent.errors import ToolError
from refagent.gitignore import Rules, Stack, glob_regex, ignored_by
from refagent.tools.base import BaseTool, Plan, ResolvedPath, ToolContext, ToolResult, outside_read_scope
from refagent.tools.files import arg_bool, arg_int, arg_str, location, plural, shown

MAX_GLOB_RESULTS = 500
DEFAULT_GREP_RESULTS = 200
MAX_GREP_RESULTS = 2000
MAX_GREP_LINE_CHARS = 500
HARD_LIMIT = 20_000
"""Stop reading matches (and kill rg) past this many: the answer is "narrow your search" anyway."""

OutputMode = Literal["content", "files", "count"]

# -- the walker (ripgrep's rules; the globs and .gitignore lines are read by refagent.gitignore) ------


def check_glob(glob: str) -> None:
    """Raise ToolError if ripgrep would reject ``glob``."""
    try:
        glob_regex(glob, "rg")
    except ValueError as exc:
        raise ToolError(str(exc)) from None


class Overrides:
    """ripgrep's ``-g`` globs: a match includes (or, with ``!``, excludes) regardless of .gitignore; with any
    including glob, files that match none are excluded (directories are still entered)."""

    def __init__(self, globs: list[str]) -> None:
        self.rules = Rules([*globs, "!.git"], "rg")
        self.whitelists = any(not g.startswith("!") for g in globs)

    def match(self, relative: str, is_dir: bool) -> bool | None:
        """True: include; False: exclude; None: no opinion (the ignore files decide)."""
        verdict = self.rules.match(relative, is_dir)
        if verdict is None:
            return False if self.whitelists and not is_dir else None
        return verdict


def _load_rules(directory: str) -> Rules | None:
    return Rules.read(os.path.join(directory, ".gitignore"), "rg")


def _has_git(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, ".git"))


def _cut(directory: str) -> int:
    return len(directory) if directory.endswith("/") else len(directory) + 1


def walk(root: str, globs: list[str], stop: threading.Event | None = None) -> Iterator[str]:
    """Files under ``root`` (paths relative to it, ``/``-separated) by the module's rules, in no order."""
    # From above, the ignore files of the ancestors up to the repository's top apply (none outside one).
    stack: Stack = []
    in_repo = _has_git(root)
    if not in_repo:
        ancestors: list[str] = []
        current = root
        while os.path.dirname(current) != current:
            current = os.path.dirname(current)
            ancestors.append(current)
            if _has_git(current):
                in_repo = True
                break
        if in_repo:
            for ancestor in reversed(ancestors):
                rules = _load_rules(ancestor)
                if rules is not None:
                    stack.append((_cut(ancestor), rules))
    yield from _walk_dir(root, "", stack, in_repo, Overrides(globs), stop)


def _walk_dir(
    directory: str, prefix: str, stack: Stack, in_repo: bool, overrides: Overrides, stop: threading.Event | None
) -> Iterator[str]:
    if stop is not None and stop.is_set():
        return
    if prefix and _has_git(directory):
        stack, in_repo = [], True  # a nested repository: the outer one's rules end at its top
    rules = _load_rules(directory)
    if rules is not None:
        stack = [*stack, (_cut(directory), rules)]
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name == ".git":
            continue
        try:
            if entry.is_symlink():
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        relative = prefix + entry.name
        include = overrides.match(relative, is_dir)
        if include is None:
            include = not (in_repo and ignored_by(stack, entry.path, is_dir))
        if not include:
            continue
        if is_dir:
            yield from _walk_dir(entry.path, relative + "/", stack, in_repo, overrides, stop)
        elif entry.is_file(follow_symlinks=False):  # not a socket or FIFO (reading one would block)
            yield relative


# -- ripgrep ----------------------------------------------------------------------------------------


def find_rg() -> str | None:
    """ripgrep: on PATH, next to the running Python (a venv's bin, where the ``ripgrep`` wheel puts it)."""
    found = shutil.which("rg")
    if found:
        return found
    candidate = os.path.join(os.path.dirname(sys.executable), "rg")
    return candidate if os.access(candidate, os.X_OK) else None


RG_BASE = [
    "--no-config",
    "--hidden",
    "--no-ignore-dot",
    "--no-ignore-exclude",
    "--no-ignore-global",
    "--no-messages",
    "--color=never",
]


def _rg_globs(globs: list[str]) -> list[str]:
    # "!.git" last: later globs win, so no user glob can bring .git back.
    return [arg for g in [*globs, "!.git"] for arg in ("--glob", g)]


class RgPatternError(Exception):
    """ripgrep rejected the pattern (the Python engine may accept it)."""


async def _run_rg(argv: list[str], cwd: str, on_lines: Callable[[bytes], bool]) -> None:
    """Run rg, feeding its stdout to ``on_lines`` in blocks of whole lines (each ending with ``\n``) until
    it returns False (then rg is killed). Blocks, not lines: the parsing runs in C (``re.findall``)."""
    process = await anyio.open_process(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stopped = False
    errors = b""
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        pending = b""
        async for chunk in process.stdout:
            end = chunk.rfind(b"\n") + 1
            if not end:
                pending += chunk
                continue
            block, pending = pending + chunk[:end], chunk[end:]
            if not on_lines(block):
                stopped = True
                break
        if stopped:
            process.kill()
        else:
            if pending:
                on_lines(pending + b"\n")
            # With --no-messages rg writes to stderr only for a bad pattern or glob: a few lines.
            async for chunk in process.stderr:
                errors += chunk
        code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()
    if not stopped and code == 2 and errors:
        message = errors.decode("utf-8", "replace").strip()
        if "regex" in message:
            raise RgPatternError(message)
        raise ToolError(f"ripgrep failed: {message}")


# -- results ----------------------------------------------------------------------------------------


@dataclass
class Hits:
    """What a search found, by path relative to the searched directory."""

    lines: dict[str, list[tuple[int, bool, str]]] = field(default_factory=dict)
    """Content mode: (line number, is a match, text) per file, in line order."""
    counts: dict[str, int] = field(default_factory=dict)
    """Matching lines per file (every mode)."""
    complete: bool = True
    """False: the search stopped at :data:`HARD_LIMIT`."""
    matches: int = 0


@dataclass(frozen=True, slots=True)
class Query:
    pattern: str
    literal: bool
    case_insensitive: bool
    context: int
    mode: OutputMode
    globs: list[str]


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


_LINE_RECORD = re.compile(rb"([^\0\n]*)\0(\d+)([:-])([^\n]*)\n")
"""``path NUL number : text`` (a match) or ``path NUL number - text`` (context), as ``--null`` prints them."""
_COUNT_RECORD = re.compile(rb"([^\0\n]*)\0(\d+)\r?\n")  # --crlf ends these lines with CRLF
_BINARY_WARNING = b": WARNING: stopped searching binary file"


async def rg_grep(rg: str, query: Query, directory: str, target: str) -> Hits:
    """Search ``target`` (``.`` or a file name) in ``directory`` with ripgrep."""
    hits = Hits()
    argv = [rg, *RG_BASE, "--crlf", "--null"]
    if query.literal:
        argv.append("--fixed-strings")
    if query.case_insensitive:
        argv.append("--ignore-case")
    if query.mode == "content":
        argv += ["--line-number", "--with-filename", "--no-heading"]
        if query.context:
            argv += ["--context", str(query.context)]
    else:
        # --count, not --files-with-matches, for "files" too: rg drops binary files from counts, which
        # is how the fallback treats them.
        argv += ["--count", "--with-filename"]
    argv += [*_rg_globs(query.globs), "--regexp", query.pattern, "--", target]
    binary: set[str] = set()
    names: dict[bytes, str] = {}

    def path_of(name: bytes) -> str:
        path = names.get(name)
        if path is None:
            path = names[name] = _strip_dot(name.decode("utf-8", "surrogateescape"))
        return path

    def on_counts(block: bytes) -> bool:
        for name, count in _COUNT_RECORD.findall(block):
            hits.counts[path_of(name)] = int(count)
            hits.matches += int(count)
        return len(hits.counts) <= HARD_LIMIT

    def on_lines(block: bytes) -> bool:
        if _BINARY_WARNING in block:  # "path: WARNING: stopped searching binary file after match (...)"
            for line in block.split(b"\n"):
                if b"\0" not in line and _BINARY_WARNING in line:
                    binary.add(path_of(line.split(_BINARY_WARNING, 1)[0]))
        current: list[tuple[int, bool, str]] = []
        current_name = None
        counts = hits.counts
        for name, number, kind, raw in _LINE_RECORD.findall(block):
            if name != current_name:
                current_name, path = name, path_of(name)
                current = hits.lines.setdefault(path, [])
            text = raw.decode("utf-8", "replace")
            is_match = kind == b":"
            current.append((int(number), is_match, text[:-1] if text.endswith("\r") else text))
            if is_match:
                counts[path] = counts.get(path, 0) + 1
                hits.matches += 1
        return hits.matches <= HARD_LIMIT

    await _run_rg(argv, directory, on_lines if query.mode == "content" else on_counts)
    hits.complete = hits.matches <= HARD_LIMIT and len(hits.counts) <= HARD_LIMIT
    for path in binary:
        hits.matches -= hits.counts.pop(path, 0)
        hits.lines.pop(path, None)
    return hits


async def rg_files(rg: str, globs: list[str], directory: str) -> tuple[list[str], bool]:
    paths: list[str] = []

    def on_lines(block: bytes) -> bool:
        paths.extend(_strip_dot(raw.decode("utf-8", "surrogateescape")) for raw in block.split(b"\n") if raw)
        return len(paths) <= HARD_LIMIT * 5

    await _run_rg([rg, *RG_BASE, "--files", *_rg_globs(globs), "--", "."], directory, on_lines)
    return paths, len(paths) <= HARD_LIMIT * 5


# -- the pure-Python engine -------------------------------------------------------------------------

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _decode(data: bytes) -> str | None:
    """The text ripgrep would search (BOM-sniffed as ``--encoding auto`` does), or None for binary."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, "replace")
    if b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def python_regex(pattern: str, literal: bool, case_insensitive: bool) -> re.Pattern[str]:
    """Compile for Python's ``re``, translating the Rust-only syntax models use most."""
    flags = re.IGNORECASE if case_insensitive else 0
    if literal:
        return re.compile(re.escape(pattern), flags)
    translated = re.sub(r"\\\\|\\z|\(\?<(?![=!])", _rust_to_python, pattern)
    try:
        return re.compile(translated, flags)
    except re.error as exc:
        raise ToolError(
            f"Invalid regular expression {pattern!r}: {exc}. Escape special characters such as ( [ {{ . * + ? "
            "with a backslash, or set literal to true to search for the text as it is."
        ) from None


def _rust_to_python(found: re.Match[str]) -> str:
    return {"\\\\": "\\\\", "\\z": "\\Z", "(?<": "(?P<"}[found.group(0)]


def python_grep(query: Query, directory: str, target: str, stop: threading.Event | None = None) -> Hits:
    """The fallback engine: same inputs and results as :func:`rg_grep`."""
    regex = python_regex(query.pattern, query.literal, query.case_insensitive)
    hits = Hits()
    paths = [target] if target != "." else walk(directory, query.globs, stop)
    for relative in paths:
        if stop is not None and stop.is_set():
            break
        try:
            with open(os.path.join(directory, relative), "rb") as handle:
                text = _decode(handle.read())
        except OSError:
            continue
        if text is None:
            continue
        found = _search_text(regex, text, query)
        if found is None:
            continue
        count, lines = found
        hits.counts[relative] = count
        hits.matches += count
        if lines:
            hits.lines[relative] = lines
        if hits.matches > HARD_LIMIT or len(hits.counts) > HARD_LIMIT:
            hits.complete = False
            break
    return hits


def _search_text(regex: re.Pattern[str], text: str, query: Query) -> tuple[int, list[tuple[int, bool, str]]] | None:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    search = regex.search
    matched = [i for i, line in enumerate(lines) if search(line[:-1] if line.endswith("\r") else line)]
    if not matched:
        return None
    if query.mode != "content":
        return len(matched), []
    keep: dict[int, bool] = {}
    for index in matched:
        for near in range(max(0, index - query.context), min(len(lines), index + query.context + 1)):
            keep.setdefault(near, False)
        keep[index] = True
    shown_lines = []
    for index in sorted(keep):
        line = lines[index]
        shown_lines.append((index + 1, keep[index], line[:-1] if line.endswith("\r") else line))
    return len(matched), shown_lines


def python_files(globs: list[str], directory: str, stop: threading.Event | None = None) -> tuple[list[str], bool]:
    paths: list[str] = []
    for path in walk(directory, globs, stop):
        paths.append(path)
        if len(paths) > HARD_LIMIT * 5:
            return paths, False
    return paths, True


async def in_thread(work: Callable[[threading.Event], Any]) -> Any:
    """Run blocking work in a thread; on cancellation tell it to stop (it checks the event)."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(work, stop, abandon_on_cancel=True)
    finally:
        stop.set()


# -- shared by both tools ---------------------------------------------------------------------------


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
    """What glob and grep share: ripgrep, or the Python engine; a title of their pattern and path."""

    kind = "search"
    verb: ClassVar[str]

    def __init__(self, rg: str | Literal["auto"] | None = "auto") -> None:
        """``rg``: the ripgrep binary, None for the Python engine, ``auto`` to look for it."""
        self.rg = find_rg() if rg == "auto" else rg

    def title(self, args: dict[str, Any]) -> str:
        where = args.get("path")
        return f"{self.verb} `{shown(args.get('pattern', ''))}`" + (f" in {shown(where)}" if where else "")


class Glob(_Search):
    name = "glob"
    description = (
        "Find files by name with a glob pattern, e.g. `**/*.py`, `*.{ts,tsx}`, `src/**/test_*.py`. A pattern "
        "without a slash matches file names at any depth; one with a slash is matched from `path`. Skips .git "
        "and what .gitignore ignores; includes hidden files. Returns paths relative to the working directory, "
        f"sorted by path, at most {MAX_GLOB_RESULTS}."
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
        base, pattern = _split_absolute_glob(arg_str(args, "pattern").strip())
        pattern = pattern.removeprefix("./")
        if pattern.startswith("!"):
            raise ToolError("The pattern must say which files to find; it cannot start with '!'.")
        if not pattern:
            raise ToolError("The pattern names a directory: add a file pattern such as `**/*`.")
        check_glob(pattern)  # a malformed pattern fails here, before any work
        resolved = ctx.policy.resolve(arg_str(args, "path", required=False) or base or ".")
        if await ctx.disk.kind(resolved.path) != "dir":
            raise ToolError(f"{resolved.display} is not a directory.")
        prefix = _prefix(resolved)
        title = f"{self.verb} `{shown(pattern)}`" + (f" in {resolved.display}" if prefix else "")

        async def execute() -> ToolResult:
            if self.rg is not None:
                paths, complete = await rg_files(self.rg, [pattern], resolved.path)
            else:
                paths, complete = await in_thread(lambda stop: python_files([pattern], resolved.path, stop))
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
        resolved = ctx.policy.resolve(arg_str(args, "path", required=False) or ".")
        kind = await ctx.disk.kind(resolved.path)
        if kind is None:
            raise ToolError(f"Not found: {resolved.display}")
        if kind == "dir":
            directory, target, prefix = resolved.path, ".", _prefix(resolved)
        else:  # one file: searched even if .gitignore'd, and the glob does not apply (as in ripgrep)
            directory, target = os.path.split(resolved.path)
            parent = os.path.dirname(resolved.display)
            prefix = parent + "/" if parent else ""
        title = f"{self.verb} `{shown(query.pattern)}`" + (f" in {resolved.display}" if _prefix(resolved) else "")

        async def execute() -> ToolResult:
            hits = await search(query, directory, target, self.rg)
            raw = {"matches": hits.matches, "files": len(hits.counts), "complete": hits.complete}
            return ToolResult(render(hits, query, limit, prefix), raw_output=raw)

        plan = Plan(title, execute, locations=[location(resolved.path)])
        return _outside(plan, resolved, tree=kind == "dir")


def _query(args: dict[str, Any]) -> Query:
    pattern = arg_str(args, "pattern")
    glob = arg_str(args, "glob", required=False).strip().removeprefix("./")
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


async def search(query: Query, directory: str, target: str, rg: str | None) -> Hits:
    """Search ``target`` (``.`` for all of ``directory``, else a file name in it): ripgrep when there is
    one and it accepts the pattern, else the Python engine."""
    if rg is not None:
        if target != "." and await anyio.to_thread.run_sync(_is_binary, os.path.join(directory, target)):
            return Hits()  # rg would search a named binary file; the rules say binary files are skipped
        try:
            return await rg_grep(rg, query, directory, target)
        except RgPatternError as exc:
            try:
                python_regex(query.pattern, query.literal, query.case_insensitive)
            except ToolError:
                raise ToolError(f"Invalid regular expression {query.pattern!r}: {_rg_message(str(exc))}") from None
    result: Hits = await in_thread(lambda stop: python_grep(query, directory, target, stop))
    return result


def _is_binary(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(1 << 20)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                return False
            while head:
                if b"\0" in head:
                    return True
                head = handle.read(1 << 20)
    except OSError:
        return False
    return False


def _rg_message(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return " ".join(lines[-3:]) if lines else "ripgrep rejected it"


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
