"""``glob`` and ``grep``: finding files and text on the local disk.

Both run ripgrep (``rg``) when it can be found, and a pure-Python walker otherwise; the two give the same
results for the same tree (the tests run both on one tree), so the fallback is a real implementation, not
a degraded mode. The rules, all ripgrep's (``rg --hidden --no-ignore-dot --no-ignore-exclude
--no-ignore-global -g '!.git'``):

- ``.git`` is never entered; other hidden files and directories are searched; symlinks are not followed.
- ``.gitignore`` files are respected inside a git repository (a directory with ``.git``), from the
  repository's top down, as git does; a nested repository starts afresh. Outside any repository they are
  not (ripgrep's default). ``.ignore``, ``.git/info/exclude`` and global excludes are not used. Their
  lines, and ``glob``, are read as ripgrep reads them: :mod:`refagent.sandbox.gitignore`'s ``rg`` dialect.
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

The tree being searched is untrusted (a cloned repository), and so is the pattern (the model's):

- Only regular files are ever opened: not FIFOs, sockets or devices, which could block a read forever
  or never end. The walker sees each entry's type before opening it and checks it again with ``fstat``
  after a non-blocking open; ripgrep skips them when it walks, and a file named as the target is opened
  here and given to ripgrep on its standard input. ripgrep reads every ``.gitignore`` on its way
  (ancestors too) by following links and without a size limit, so a tree where one is not a plain
  regular file within :data:`~refagent.sandbox.gitignore.MAX_IGNORE_BYTES` (a FIFO, a link to ``/dev/zero``)
  is searched by the Python engine instead, which reads only those (and a linked one only when it
  leads inside the roots).
- Nothing outside the searched directory is read through a link swapped in after the path was
  checked: the Python engine walks with directory descriptors (``O_NOFOLLOW``), ripgrep starts in the
  directory reached the same way (``/proc/self/fd/N``) and every file it reports is checked afterwards
  to be where it says (a real path inside the directory, not a link), else dropped.
- ripgrep's regex engine runs in linear time. Python's backtracks, and a pattern such as ``(a+)+$``
  takes exponential time (with the GIL held): the Python engine runs in a child process that is
  killed at a time limit, and the model is told to simplify the pattern. Glob matching is linear
  (:class:`refagent.sandbox.gitignore.GlobMatcher`).

The module is long (~1150 lines) on purpose: the walker, the ripgrep driver and the Python engine must
agree line for line, and are easiest to check against each other in one place.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio

from refagent.errors import ToolError
from refagent.sandbox.gitignore import MAX_IGNORE_BYTES, Rules, Stack, glob_regex, ignored_by, open_directory
from refagent.sandbox.local_fs import TEMP_PREFIX, TEMP_SUFFIX
from refagent.tools.base import BaseTool, Plan, ResolvedPath, ToolContext, ToolResult, outside_read_scope
from refagent.tools.files import arg_bool, arg_int, arg_str, location, plural, shown

log = logging.getLogger(__name__)

MAX_GLOB_RESULTS = 500
DEFAULT_GREP_RESULTS = 200
MAX_GREP_RESULTS = 2000
MAX_GREP_LINE_CHARS = 500
HARD_LIMIT = 20_000
"""Stop reading matches (and kill rg) past this many: the answer is "narrow your search" anyway."""
PYTHON_GREP_SECONDS = 10.0
"""The Python engine's time limit. With ripgrep at hand, that engine runs only the patterns ripgrep
rejects (look-around, back-references); Python searches a typical repository in well under a second,
so past this a pattern is backtracking catastrophically (or the tree is too big for this engine), and
the model is better told so than kept waiting."""
PYTHON_GREP_MEMORY = 2 << 30
"""The Python engine's address-space limit (it reads each file whole): a huge file is skipped there."""

OutputMode = Literal["content", "files", "count"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
"""For a file the walker listed as regular: not through a link, and never waiting (a FIFO swapped in)."""

# -- the walker (ripgrep's rules; the globs and .gitignore lines are read by refagent.sandbox.gitignore) ------


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


@dataclass
class _Audit:
    """What the walker saw that ripgrep must not be left to read itself."""

    unsafe: str | None = None
    """A ``.gitignore`` that is not a plain regular file within the cap (ripgrep would wait on it, or
    read it whole, or follow its link anywhere)."""


def _audit_ignore_file(directory: str, dir_fd: int | None, audit: _Audit | None) -> os.stat_result | None:
    """``directory``'s ``.gitignore`` as it is (not followed), noted in ``audit`` when ripgrep must not read it."""
    try:
        info = os.stat(
            ".gitignore" if dir_fd is not None else _join(directory, ".gitignore"), dir_fd=dir_fd, follow_symlinks=False
        )
    except OSError:
        return None
    plain = stat.S_ISREG(info.st_mode) and info.st_size <= MAX_IGNORE_BYTES
    if audit is not None and not plain and not stat.S_ISDIR(info.st_mode):  # rg cannot read a directory
        audit.unsafe = audit.unsafe or _join(directory, ".gitignore")
    return info


def _ignore_rules(directory: str, dir_fd: int | None, confine: Sequence[str], audit: _Audit | None) -> Rules | None:
    """The rules of ``directory``'s ``.gitignore`` (found from ``dir_fd`` when given): a regular file within
    the cap, or a link to one inside ``confine``. ripgrep follows any link; this reads no further than
    the roots, although the lines are only rules (never shown), because nothing outside them is read
    without asking."""
    info = _audit_ignore_file(directory, dir_fd, audit)
    if info is None:
        return None
    name = ".gitignore" if dir_fd is not None else _join(directory, ".gitignore")
    if stat.S_ISLNK(info.st_mode):
        return Rules.read(name, "rg", dir_fd=dir_fd, follow_symlinks=True, within=confine)
    return Rules.read(name, "rg", dir_fd=dir_fd)  # not a link: if one is swapped in now, it is not followed


def _has_git(directory: str, dir_fd: int | None = None) -> bool:
    try:
        os.stat(".git" if dir_fd is not None else _join(directory, ".git"), dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _join(directory: str, name: str) -> str:
    return (directory if directory.endswith("/") else directory + "/") + name


def _cut(directory: str) -> int:
    return len(directory) if directory.endswith("/") else len(directory) + 1


def walk(
    root: str, globs: list[str], stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> Iterator[str]:
    """Files under ``root`` (paths relative to it, ``/``-separated) by the module's rules, in no order.

    ``confine``: where a ``.gitignore`` that is a link may lead (default: ``root``)."""
    for relative, _, _ in _entries(root, globs, stop, confine):
        yield relative


def _open_root(directory: str) -> int:
    """A descriptor of the directory to search, reached without following links (ToolError if it cannot be)."""
    try:
        return open_directory(directory)
    except OSError as exc:
        raise ToolError(
            f"{directory} is not the directory that was checked any more (it is gone, or a directory on its "
            f"path is now a symbolic link or a file: {exc.strerror}); nothing was searched."
        ) from None


def _ancestors(root: str, confine: Sequence[str], audit: _Audit | None) -> tuple[Stack, bool]:
    """The ignore files above ``root`` that apply (those up to the repository's top; none outside one)."""
    stack: Stack = []
    in_repo = _has_git(root)
    ancestors: list[str] = []
    current = root
    while os.path.dirname(current) != current:
        current = os.path.dirname(current)
        ancestors.append(current)
    top = 0 if in_repo else next((i + 1 for i, a in enumerate(ancestors) if _has_git(a)), 0)
    for ancestor in ancestors[top:]:
        _audit_ignore_file(ancestor, None, audit)  # ripgrep reads these too, up to "/", and applies none
    for ancestor in reversed(ancestors[:top]):
        rules = _ignore_rules(ancestor, None, confine, audit)
        if rules is not None:
            stack.append((_cut(ancestor), rules))
    return stack, in_repo or top > 0


_Listing = tuple[list[tuple[str, str]], list[tuple[str, str, str]], Stack, bool]
"""A directory's (files: (relative, name)), (subdirectories: (relative, name, path)), rules and repo state."""


def _entries(
    root: str,
    globs: list[str],
    stop: threading.Event | None,
    confine: Sequence[str],
    audit: _Audit | None = None,
    *,
    files: bool = True,
) -> Iterator[tuple[str, int, str]]:
    """(path relative to ``root``, descriptor of its directory, name) of each file by the module's rules.

    The descriptor is valid until the next item is asked for. Every directory is opened from its parent's
    descriptor with ``O_NOFOLLOW``, so a directory swapped for a link mid-walk is not entered. With
    ``files`` False, only the directories are walked (to fill ``audit``); it stops at the first finding.
    """
    confine = confine or [root]
    overrides = Overrides(globs)
    stack, in_repo = _ancestors(root, confine, audit)
    root_fd = _open_root(root)

    def listing(fd: int, prefix: str, path: str, stack: Stack, in_repo: bool) -> _Listing:
        if prefix and _has_git(path, fd):
            stack, in_repo = [], True  # a nested repository: the outer one's rules end at its top
        rules = _ignore_rules(path, fd, confine, audit)
        if rules is not None:
            stack = [*stack, (_cut(path), rules)]
        found: list[tuple[str, str]] = []
        below: list[tuple[str, str, str]] = []
        try:
            with os.scandir(fd) as listed:
                entries = list(listed)
        except OSError:
            return found, below, stack, in_repo
        for entry in entries:
            name = entry.name
            if name == ".git" or _ours(name):
                continue
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                # Not a FIFO, socket or device: reading one could block forever, or never end.
                if not is_dir and not (files and entry.is_file(follow_symlinks=False)):
                    continue
            except OSError:
                continue
            relative = prefix + name
            include = overrides.match(relative, is_dir)
            if include is None:
                include = not (in_repo and ignored_by(stack, _join(path, name), is_dir))
            if not include:
                continue
            if is_dir:
                below.append((relative, name, _join(path, name)))
            else:
                found.append((relative, name))
        return found, below, stack, in_repo

    # Depth first, holding one descriptor per level: (descriptor, subdirectories left, rules, in a repository).
    fd = root_fd
    frames: list[tuple[int, list[tuple[str, str, str]], Stack, bool]] = [(fd, [], stack, in_repo)]
    try:
        found, below, stack, in_repo = listing(fd, "", root, stack, in_repo)
        frames[-1] = (fd, below, stack, in_repo)
        while True:
            for relative, name in found:
                yield relative, fd, name
            found = []
            while frames and not frames[-1][1]:
                os.close(frames.pop()[0])
            if not frames or (stop is not None and stop.is_set()) or (audit is not None and audit.unsafe):
                return
            parent, below, stack, in_repo = frames[-1]
            relative, name, path = below.pop()
            try:
                fd = open_directory(name, dir_fd=parent)
            except OSError:
                continue  # swapped for a link or a file since it was listed, gone, or too deep for our descriptors
            frames.append((fd, [], stack, in_repo))
            found, below, stack, in_repo = listing(fd, relative + "/", path, stack, in_repo)
            frames[-1] = (fd, below, stack, in_repo)
    finally:
        for frame in frames:
            os.close(frame[0])


def rg_can_walk(
    directory: str, globs: list[str], confine: Sequence[str] = (), stop: threading.Event | None = None
) -> bool:
    """Whether ripgrep may walk ``directory`` itself: every ``.gitignore`` it would read on the way (the
    ancestors' too) is a plain regular file within the cap. Costs a walk of the directories alone."""
    audit = _Audit()
    for _ in _entries(directory, globs, stop, confine, audit, files=False):
        pass
    if audit.unsafe is not None:
        log.info("searching %s without ripgrep: %s is not a plain regular file within the cap", directory, audit.unsafe)
    return audit.unsafe is None


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
    # "!.git" and our own temporary files last: later globs win, so no user glob can bring them back.
    return [arg for g in [*globs, "!.git", f"!{TEMP_PREFIX}*{TEMP_SUFFIX}"] for arg in ("--glob", g)]


def _ours(name: str) -> bool:
    """One of the agent's own temporary files (an atomic write's, left behind if the agent was killed
    during it): half a file, never shown to the model as if it were the user's."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


class RgPatternError(Exception):
    """ripgrep rejected the pattern (the Python engine may accept it)."""


_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


@contextlib.asynccontextmanager
async def _held_directory(directory: str) -> AsyncIterator[str]:
    """A working directory for a child process that is ``directory`` as it is now, whatever happens to the
    path later: ``/proc/self/fd/N`` of a descriptor reached without following links (the child changes
    into it between fork and exec, while it still has the descriptor). Without ``/proc``, the path."""
    fd: int = await anyio.to_thread.run_sync(_open_root, directory)
    try:
        yield f"/proc/self/fd/{fd}" if _PROC_FD else directory
    finally:
        os.close(fd)


async def _run_rg(
    argv: list[str], cwd: str, on_lines: Callable[[bytes], bool], stdin: int = subprocess.DEVNULL
) -> None:
    """Run rg, feeding its stdout to ``on_lines`` in blocks of whole lines (each ending with ``\n``) until
    it returns False (then rg is killed). Blocks, not lines: the parsing runs in C (``re.findall``).
    Cancelling kills rg."""
    process = await anyio.open_process(argv, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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

    def drop(self, path: str) -> None:
        self.matches -= self.counts.pop(path, 0)
        self.lines.pop(path, None)


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
    """Search ``target`` (``.`` or a file name) in ``directory`` with ripgrep.

    A named file is opened here (a regular file, not through a link) and given to rg on its standard
    input, so rg never opens a path that could have become a FIFO or a link since it was checked; a
    file that is not regular is not searched. A binary one is not either (rg would search it)."""
    if target != ".":
        fd = await in_thread(lambda stop: _open_text_file(directory, target, stop))
        if fd is None:
            return Hits()
        try:
            return await _rg_grep(rg, query, "/", "-", fd, target)
        finally:
            os.close(fd)
    async with _held_directory(directory) as cwd:
        return await _rg_grep(rg, query, cwd, ".", subprocess.DEVNULL, None)


async def _rg_grep(rg: str, query: Query, cwd: str, target: str, stdin: int, label: str | None) -> Hits:
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
    if label is not None:
        names[b"<stdin>"] = label  # rg 14.1 has no --label

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

    await _run_rg(argv, cwd, on_lines if query.mode == "content" else on_counts, stdin)
    hits.complete = hits.matches <= HARD_LIMIT and len(hits.counts) <= HARD_LIMIT
    for path in binary:
        hits.drop(path)
    return hits


async def rg_files(rg: str, globs: list[str], directory: str) -> tuple[list[str], bool]:
    paths: list[str] = []

    def on_lines(block: bytes) -> bool:
        paths.extend(_strip_dot(raw.decode("utf-8", "surrogateescape")) for raw in block.split(b"\n") if raw)
        return len(paths) <= HARD_LIMIT * 5

    async with _held_directory(directory) as cwd:
        await _run_rg([rg, *RG_BASE, "--files", *_rg_globs(globs), "--", "."], cwd, on_lines)
    return paths, len(paths) <= HARD_LIMIT * 5


def _where_it_says(directory: str, paths: Sequence[str], *, files: bool) -> list[str]:
    """The ``paths`` (relative to ``directory``) that are where they say, now: no link on the way, each
    directory's real path is what it is called (and so inside ``directory``), and, with ``files``, a
    regular file at the end. ripgrep walks by path, so a directory swapped for a link while it ran
    would have led it out; what it found there is dropped."""
    real: dict[str, bool] = {}
    kept = []
    for path in paths:
        parent, _, name = path.rpartition("/")
        folder = _join(directory, parent) if parent else directory
        ok = real.get(folder)
        if ok is None:
            ok = real[folder] = os.path.realpath(folder) == folder
        if ok and files:
            try:
                ok = stat.S_ISREG(os.lstat(_join(folder, name)).st_mode)
            except OSError:
                ok = False
        if ok:
            kept.append(path)
    return kept


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


def python_grep(
    query: Query, directory: str, target: str, stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> Hits:
    """The fallback engine: same inputs and results as :func:`rg_grep`. It backtracks: run it through
    :func:`python_grep_in_process` on anything but trusted patterns."""
    regex = python_regex(query.pattern, query.literal, query.case_insensitive)
    hits = Hits()
    if target != ".":
        items: Iterator[tuple[str, int, str]] = _one_file(directory, target)
    else:
        items = _entries(directory, query.globs, stop, confine)
    for relative, dir_fd, name in items:
        if stop is not None and stop.is_set():
            break
        data = _read_file(dir_fd, name)
        text = None if data is None else _decode(data)
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


def _one_file(directory: str, name: str) -> Iterator[tuple[str, int, str]]:
    fd = _open_root(directory)
    try:
        if _is_regular(name, fd):
            yield name, fd, name
    finally:
        os.close(fd)


def _is_regular(name: str, dir_fd: int) -> bool:
    """Whether ``name`` is a regular file (not followed): checked before opening a file nobody listed, so
    that a FIFO or a device is not even opened (the descriptor is checked again after the open)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_file(dir_fd: int, name: str) -> bytes | None:
    """All of the regular file ``name`` in ``dir_fd``; None for anything else (checked on the descriptor:
    the walker saw a regular file, but it may have been swapped since)."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(fd, "rb", closefd=False) as handle:
            return handle.read()
    except (OSError, MemoryError):  # MemoryError: bigger than PYTHON_GREP_MEMORY
        return None
    finally:
        os.close(fd)


def _open_text_file(directory: str, name: str, stop: threading.Event) -> int | None:
    """A descriptor of the regular, non-binary file ``name`` in ``directory`` (reached without links),
    at its start; None when it is anything else."""
    dir_fd = _open_root(directory)
    try:
        if not _is_regular(name, dir_fd):
            return None
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and not _is_binary(fd, stop):
            os.lseek(fd, 0, os.SEEK_SET)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _is_binary(fd: int, stop: threading.Event) -> bool:
    """A NUL byte anywhere (after a UTF-16 BOM: never), as the rules say; ripgrep would search a named file."""
    head = os.read(fd, 1 << 20)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    while head and not stop.is_set():
        if b"\0" in head:
            return True
        head = os.read(fd, 1 << 20)
    return False


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


def python_files(
    globs: list[str], directory: str, stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> tuple[list[str], bool]:
    paths: list[str] = []
    for path in walk(directory, globs, stop, confine=confine):
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


# -- the Python engine in a child process --------------------------------------------------------------

_WORKER = (
    "import json, sys\n"
    "request = json.load(sys.stdin)\n"
    "sys.path[:] = request['path']\n"
    "from refagent.tools.search import serve_python_grep\n"
    "serve_python_grep(request)\n"
)


async def python_grep_in_process(
    query: Query, directory: str, target: str, *, confine: Sequence[str] = (), seconds: float = PYTHON_GREP_SECONDS
) -> Hits:
    """:func:`python_grep` in a child process, killed after ``seconds`` (ToolError: simplify the pattern)
    or when cancelled.

    Python's ``re`` backtracks, and holds the GIL while it does: a pattern such as ``(a+)+$`` on a long
    line would take exponential time and stop the event loop (every session) with it. A thread cannot
    be stopped, a process can. It costs a Python start (~0.15 s), on the fallback engine only.
    """
    python_regex(query.pattern, query.literal, query.case_insensitive)  # a bad pattern fails here, at no cost
    request = {
        "path": _child_path(),
        "query": dataclasses.asdict(query),
        "directory": directory,
        "target": target,
        "confine": list(confine),
        "seconds": seconds,
    }
    output = bytearray()
    errors = bytearray()
    with anyio.move_on_after(seconds) as deadline:
        # Isolated (-I: no environment, no script directory; -S: no site hooks; it gets our sys.path)
        # and in "/": the child must not import modules from the searched tree, or wherever we are.
        process = await anyio.open_process(
            [sys.executable, "-I", "-S", "-c", _WORKER],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(json.dumps(request).encode())
            await process.stdin.aclose()

            async def drain_errors() -> None:
                assert process.stderr is not None
                async for chunk in process.stderr:
                    errors.extend(chunk)
                    del errors[:-4096]

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(drain_errors)
                async for chunk in process.stdout:
                    output.extend(chunk)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
    if deadline.cancelled_caught:
        raise ToolError(
            f"The search took longer than {seconds:g} s and was stopped: the pattern took too long. It probably "
            "backtracks catastrophically on some lines (nested or repeated quantifiers such as `(a+)+` or "
            "`(a|aa)*`, often inside a look-around): simplify it, or narrow the search with path or glob."
        )
    try:
        answer = json.loads(output)
    except ValueError:
        log.warning("the Python grep engine failed: %s", errors.decode("utf-8", "replace").strip())
        raise ToolError("The search failed (the Python search engine stopped unexpectedly).") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    hits = Hits(counts=answer["counts"], complete=answer["complete"], matches=answer["matches"])
    hits.lines = {path: [(n, m, t) for n, m, t in lines] for path, lines in answer["lines"].items()}
    return hits


def _child_path() -> list[str]:
    """The child's ``sys.path``: ours, without relative entries (``""`` is the working directory, which
    may be the tree being searched), and with the directory refagent itself was imported from."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return list(dict.fromkeys([here, *(entry for entry in sys.path if os.path.isabs(entry))]))


def serve_python_grep(request: dict[str, Any]) -> None:
    """The child's side of :func:`python_grep_in_process`: run the request, print the hits as JSON."""
    seconds = float(request["seconds"])
    # The parent kills us at the deadline; the alarm (default action: terminate) covers a parent that died.
    signal.alarm(math.ceil(seconds) + 2)
    with contextlib.suppress(ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft > PYTHON_GREP_MEMORY:  # never loosen a stricter limit
            resource.setrlimit(resource.RLIMIT_AS, (PYTHON_GREP_MEMORY, hard))
    query = Query(**request["query"])
    try:
        hits = python_grep(query, request["directory"], request["target"], confine=request["confine"])
    except ToolError as exc:
        answer: dict[str, Any] = {"error": str(exc)}
    else:
        cut = MAX_GREP_LINE_CHARS + 1  # render() cuts at MAX_GREP_LINE_CHARS: no need to send more
        answer = {
            "counts": hits.counts,
            "complete": hits.complete,
            "matches": hits.matches,
            "lines": {path: [(n, m, t[:cut]) for n, m, t in lines] for path, lines in hits.lines.items()},
        }
    sys.stdout.write(json.dumps(answer))  # ASCII: names that are not UTF-8 travel as \udcxx escapes
    sys.stdout.flush()


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

    def __init__(
        self, rg: str | Literal["auto"] | None = "auto", *, python_seconds: float = PYTHON_GREP_SECONDS
    ) -> None:
        """``rg``: the ripgrep binary, None for the Python engine, ``auto`` to look for it.
        ``python_seconds``: the Python grep engine's time limit."""
        self.rg = find_rg() if rg == "auto" else rg
        self.python_seconds = python_seconds

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
            paths, complete = await list_files([pattern], resolved.path, self.rg, roots=ctx.roots)
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
            hits = await search(query, directory, target, self.rg, roots=ctx.roots, python_seconds=self.python_seconds)
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


def _confine(directory: str, roots: Sequence[str]) -> list[str]:
    """Where a linked ``.gitignore`` may lead: the roots, and the searched directory (which may be outside
    them, with the user's leave)."""
    return list(dict.fromkeys([*roots, directory]))


async def search(
    query: Query,
    directory: str,
    target: str,
    rg: str | None,
    *,
    roots: Sequence[str] = (),
    python_seconds: float = PYTHON_GREP_SECONDS,
) -> Hits:
    """Search ``target`` (``.`` for all of ``directory``, else a file name in it): ripgrep when there is
    one, it accepts the pattern and the tree's ignore files are safe for it to read, else the Python
    engine (in a child process, within ``python_seconds``). ``directory`` is absolute and resolved."""
    confine = _confine(directory, roots)
    if (
        rg is not None
        and target == "."
        and not await in_thread(lambda stop: rg_can_walk(directory, query.globs, confine, stop))
    ):
        rg = None
    if rg is not None:
        try:
            hits = await rg_grep(rg, query, directory, target)
        except RgPatternError as exc:
            try:
                python_regex(query.pattern, query.literal, query.case_insensitive)
            except ToolError:
                raise ToolError(f"Invalid regular expression {query.pattern!r}: {_rg_message(str(exc))}") from None
        else:
            if target == ".":
                kept = set(
                    await anyio.to_thread.run_sync(lambda: _where_it_says(directory, list(hits.counts), files=True))
                )
                for path in [path for path in hits.counts if path not in kept]:
                    hits.drop(path)
            return hits
    return await python_grep_in_process(query, directory, target, confine=confine, seconds=python_seconds)


async def list_files(
    globs: list[str], directory: str, rg: str | None, *, roots: Sequence[str] = ()
) -> tuple[list[str], bool]:
    """The files under ``directory`` by the module's rules (and ``globs``), in no order, and whether that
    is all of them: ripgrep when there is one and the tree's ignore files are safe for it to read."""
    confine = _confine(directory, roots)
    if rg is not None and await in_thread(lambda stop: rg_can_walk(directory, globs, confine, stop)):
        paths, complete = await rg_files(rg, globs, directory)
        # A listing reads no file, so its directories are what must be checked (file names can leak too).
        kept: list[str] = await anyio.to_thread.run_sync(lambda: _where_it_says(directory, paths, files=False))
        return kept, complete
    found: tuple[list[str], bool] = await in_thread(lambda stop: python_files(globs, directory, stop, confine=confine))
    return found


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
