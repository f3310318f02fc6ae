"""Running ripgrep: :func:`rg_grep` (grep) and :func:`rg_files` (a listing) ask ``rg`` for what the
package's rules (:mod:`refagent.sandbox.search`) say, and read what it prints into
:class:`~refagent.sandbox.seams.Hits` or a list of paths; :func:`find_rg` finds the binary.

Contract: a file named as the target is opened here (:func:`~refagent.sandbox.search.walk.open_text_file`:
regular, not binary, not through a link) and fed to ``rg`` on its standard input, so ``rg`` opens no
path that could have changed since it was checked. A directory is searched from a working directory
held by descriptor (``/proc/self/fd/N``), but ``rg`` walks it by path: the caller
(:mod:`~refagent.sandbox.search.dispatch`) lets it walk only a tree
:func:`~refagent.sandbox.search.walk.rg_can_walk` cleared, and keeps only what :func:`where_it_says`
passes. Binary files are dropped (rg may print matches found before the NUL). A pattern ``rg`` rejects
raises :class:`RgPatternError` (the Python engine may accept it); any other failure of ``rg`` is a
:class:`~refagent.errors.ToolError`. Past :data:`~refagent.sandbox.search.limits.HARD_LIMIT` matches or
files (five times that many paths for a listing) ``rg`` is killed and the answer marked incomplete.
Paths are relative to the searched directory, in no order.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence

import anyio

from refagent.errors import ToolError
from refagent.sandbox.disk.write import TEMP_PREFIX, TEMP_SUFFIX
from refagent.sandbox.seams import Hits, Query
from refagent.sandbox.search.limits import HARD_LIMIT
from refagent.sandbox.search.walk import in_thread, join, open_root, open_text_file


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
"""Every run's flags: the package's rules (hidden files searched; no ``.ignore``, ``.git/info/exclude`` or
global excludes), no user configuration, nothing on stderr but a rejected pattern or glob, no colour."""


def _rg_globs(globs: list[str], *, ours: bool = True) -> list[str]:
    """``globs`` as rg's arguments, then ``!.git`` and (``ours``) our own temporary files: later globs
    win, so no user glob can bring them back."""
    last = ["!.git", f"!{TEMP_PREFIX}*{TEMP_SUFFIX}"] if ours else ["!.git"]
    return [arg for g in [*globs, *last] for arg in ("--glob", g)]


class RgPatternError(Exception):
    """ripgrep rejected the pattern (the Python engine may accept it)."""


_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


@contextlib.asynccontextmanager
async def _held_directory(directory: str) -> AsyncIterator[str]:
    """A working directory for a child process that is ``directory`` as it is now, whatever happens to the
    path later: ``/proc/self/fd/N`` of a descriptor reached without following links (the child changes
    into it between fork and exec, while it still has the descriptor). Without ``/proc``, the path."""
    fd: int = await anyio.to_thread.run_sync(open_root, directory)
    try:
        yield f"/proc/self/fd/{fd}" if _PROC_FD else directory
    finally:
        os.close(fd)


async def _run_rg(
    argv: list[str],
    cwd: str,
    on_lines: Callable[[bytes], bool],
    stdin: int = subprocess.DEVNULL,
    end: bytes = b"\n",
) -> None:
    """Run rg, feeding its stdout to ``on_lines`` in blocks of whole records (each ending with ``end``)
    until it returns False (then rg is killed). Blocks, not records: the parsing runs in C
    (``re.findall``, ``split``). Cancelling kills rg."""
    process = await anyio.open_process(argv, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stopped = False
    errors = b""
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        pending = b""
        async for chunk in process.stdout:
            cut = chunk.rfind(end) + 1
            if not cut:
                pending += chunk
                continue
            block, pending = pending + chunk[:cut], chunk[cut:]
            if not on_lines(block):
                stopped = True
                break
        if stopped:
            process.kill()
        else:
            if pending:
                on_lines(pending + end)
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
        fd = await in_thread(lambda stop: open_text_file(directory, target, stop))
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


async def rg_files(
    rg: str, globs: list[str], directory: str, folders: set[str] | None = None
) -> tuple[list[str], bool]:
    """The files under ``directory`` by the package's rules and ``globs``, as ``rg --files`` lists them (not
    yet checked: see :func:`where_it_says`), and whether that is all of them. In no order, though in
    sorted runs (a block at a time, while rg still runs), which a sort then merges in a tenth of the time.
    ``folders``: filled with the directory of each (relative, ``""`` for ``directory`` itself), also as
    the names arrive."""
    paths: list[str] = []

    def on_names(block: bytes) -> bool:
        # One decode and one split a block: rg given no path lists its working directory by names as they
        # are (no "./"), NUL-ended (--null: a name may hold a newline). Our own temporary files are dropped
        # here, not by a glob: rg would match every name against one; here a block that holds none is
        # passed over in one search.
        text = block.decode("utf-8", "surrogateescape")
        names = text.split("\0")
        names.pop()  # after the last NUL
        if TEMP_PREFIX in text:
            names = [name for name in names if not _temporary(name)]
        names.sort()
        paths.extend(names)
        if folders is not None:
            folders.update({name.rpartition("/")[0] for name in names})
        return len(paths) <= HARD_LIMIT * 5

    async with _held_directory(directory) as cwd:
        argv = [rg, *RG_BASE, "--files", "--null", *_rg_globs(globs, ours=False)]
        await _run_rg(argv, cwd, on_names, end=b"\0")
    return paths, len(paths) <= HARD_LIMIT * 5


def _temporary(path: str) -> bool:
    """``path`` is, or is in, one of the agent's own temporary files (as the glob ``!.~refagent-*.tmp``)."""
    return any(part.startswith(TEMP_PREFIX) and part.endswith(TEMP_SUFFIX) for part in path.split("/"))


def where_it_says(directory: str, paths: Sequence[str], *, files: bool) -> list[str]:
    """The ``paths`` (relative to ``directory``) that are where they say, now: ``directory`` is still its
    own real path, every directory on the way below it is a directory and not a link (so the path leads
    nowhere but inside ``directory``), and, with ``files``, a regular file at the end. ripgrep walks by
    path, so a directory swapped for a link while it ran would have led it out; what it found there is
    dropped. Each directory is looked at once (``lstat``), however many paths pass through it."""
    plain: dict[str, bool] = {"": os.path.realpath(directory) == directory}

    def plain_directory(folder: str) -> bool:
        """``folder`` (relative; ``""`` is ``directory``) and each directory above it are plain directories."""
        below: list[str] = []
        while folder not in plain:  # up to the nearest one already known, then down again
            below.append(folder)
            folder = folder.rpartition("/")[0]
        ok = plain[folder]
        for name in reversed(below):
            if ok:
                try:
                    ok = stat.S_ISDIR(os.lstat(join(directory, name)).st_mode)
                except OSError:
                    ok = False
            plain[name] = ok
        return ok

    if not files:  # a listing: its directories are what is checked, each once, and the paths kept as they are
        folders = {path.rpartition("/")[0] for path in paths}
        if all([plain_directory(folder) for folder in folders]):  # every one looked at (a list, not lazy)
            return list(paths)
    kept = []
    for path in paths:
        folder = path.rpartition("/")[0]
        ok = plain.get(folder)
        if ok is None:
            ok = plain_directory(folder)
        if ok and files:
            try:
                ok = stat.S_ISREG(os.lstat(join(directory, path)).st_mode)
            except OSError:
                ok = False
        if ok:
            kept.append(path)
    return kept
