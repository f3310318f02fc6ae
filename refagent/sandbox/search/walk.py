"""Which files a search visits, by the package's rules (:mod:`refagent.sandbox.search`), and opening them.

- :func:`walk` and :func:`walk_entries`: the files under a directory as ripgrep lists them (its ``-g``
  globs as :class:`Overrides`, ``.gitignore`` lines in the ``rg`` dialect of
  :mod:`refagent.sandbox.disk.gitignore`), in no order. Only regular files are listed: never ``.git``, a
  link, a FIFO, socket or device, nor one of the agent's own temporary files. Every directory is opened
  from its parent's descriptor with ``O_NOFOLLOW``, so one swapped for a link mid-walk is not entered.
- :func:`rg_can_walk`: whether ripgrep may walk a tree itself, i.e. every ``.gitignore`` it would read
  on its way is a plain regular file within :data:`~refagent.sandbox.disk.gitignore.MAX_IGNORE_BYTES`.
- :func:`one_file`, :func:`read_file` and :func:`open_text_file`: a listed or named file opened without
  following a link and without blocking, and checked again on the descriptor (it may have been swapped).
- :func:`in_thread`: blocking work (a walk) in a thread, told to stop when the caller is cancelled.
- :func:`check_glob`: a glob ripgrep would reject raises :class:`~refagent.errors.ToolError`, before any
  work.
"""

from __future__ import annotations

import codecs
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from refagent.errors import ToolError
from refagent.sandbox.disk.gitignore import MAX_IGNORE_BYTES, Rules, Stack, ignored_by
from refagent.sandbox.disk.globs import glob_regex
from refagent.sandbox.disk.safe_open import open_directory
from refagent.sandbox.disk.write import TEMP_PREFIX, TEMP_SUFFIX

log = logging.getLogger(__name__)

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
"""For a file the walker listed as regular: not through a link, and never waiting (a FIFO swapped in)."""

# -- the walker (ripgrep's rules; the globs and .gitignore lines are read by refagent.sandbox.disk.gitignore) ---


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
    seen: list[Seen] | None = None
    """When asked for (a list): each directory the walk listed or looked above the root into, and each
    ``.gitignore`` it found, with what :func:`looked` said of it then (see
    :mod:`refagent.sandbox.search.clearance`). Above the root, a directory counts for which one it is
    (the rest of the machine makes and removes files there all day), so its ``.gitignore`` and ``.git``
    are noted even when there is none: making one is what changes the answer."""
    watch: Callable[[str, int | None, os.stat_result], object] | None = None
    """When given: called with each of those directories (path, its descriptor or None above the root,
    its ``lstat``) before the walk reads it."""

    def saw(self, path: str, info: os.stat_result | None, *, whole: bool = True) -> None:
        """Note ``path`` as ``info`` says it is (None: there is no such entry)."""
        if self.seen is not None:
            self.seen.append((path, _identity(info, whole), whole))

    def directory(self, path: str, fd: int | None) -> None:
        """Note the directory ``path`` (open as ``fd``; by path above the root) before it is read."""
        if self.seen is None and self.watch is None:
            return
        try:
            info = os.fstat(fd) if fd is not None else os.stat(path, follow_symlinks=False)
        except OSError:  # unreadable now: any change is one
            if self.seen is not None:
                self.seen.append((path, UNKNOWN, True))
            return
        self.saw(path, info, whole=fd is not None)
        if self.watch is not None:
            self.watch(path, fd, info)


Identity = tuple[int, int, int, int, int, int]
"""What a path's ``lstat`` says of it that any change to it changes: device, inode, type and mode,
size, modification and change times (the change time no program can set back)."""

MISSING: Identity = (-1, -1, -1, -1, -1, -1)
"""No entry by that name."""

UNKNOWN: Identity = (0, 0, 0, 0, 0, 0)
"""Could not be looked at (never what :func:`looked` says later)."""

Seen = tuple[str, Identity, bool]
"""A path the walk read, what :func:`looked` said of it, and ``whole``: whether its times count, or only
which file it is (device, inode, type and mode)."""


def identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _identity(info: os.stat_result | None, whole: bool) -> Identity:
    if info is None:
        return MISSING
    return identity(info) if whole else (info.st_dev, info.st_ino, info.st_mode, 0, 0, 0)


def looked(path: str, whole: bool) -> Identity:
    """``path``'s :data:`Identity` by ``lstat`` (only which file it is unless ``whole``), or
    :data:`MISSING`. OSError when it cannot be looked at."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return MISSING
    return _identity(info, whole)


def _audit_ignore_file(directory: str, dir_fd: int | None, audit: _Audit | None) -> os.stat_result | None:
    """``directory``'s ``.gitignore`` as it is (not followed), noted in ``audit`` when ripgrep must not read it."""
    try:
        info = os.stat(
            ".gitignore" if dir_fd is not None else join(directory, ".gitignore"), dir_fd=dir_fd, follow_symlinks=False
        )
    except OSError as exc:
        if audit is not None and dir_fd is None and isinstance(exc, FileNotFoundError):
            audit.saw(join(directory, ".gitignore"), None)  # above the root: made later, it changes the answer
        return None
    if audit is not None:
        audit.saw(join(directory, ".gitignore"), info)
    plain = stat.S_ISREG(info.st_mode) and info.st_size <= MAX_IGNORE_BYTES
    if audit is not None and not plain and not stat.S_ISDIR(info.st_mode):  # rg cannot read a directory
        audit.unsafe = audit.unsafe or join(directory, ".gitignore")
    return info


def _ignore_rules(directory: str, dir_fd: int | None, confine: Sequence[str], audit: _Audit | None) -> Rules | None:
    """The rules of ``directory``'s ``.gitignore`` (found from ``dir_fd`` when given): a regular file within
    the cap, or a link to one inside ``confine``. ripgrep follows any link; this reads no further than
    the roots, although the lines are only rules (never shown), because nothing outside them is read
    without asking."""
    info = _audit_ignore_file(directory, dir_fd, audit)
    if info is None:
        return None
    name = ".gitignore" if dir_fd is not None else join(directory, ".gitignore")
    if stat.S_ISLNK(info.st_mode):
        return Rules.read(name, "rg", dir_fd=dir_fd, follow_symlinks=True, within=confine)
    return Rules.read(name, "rg", dir_fd=dir_fd)  # not a link: if one is swapped in now, it is not followed


def _has_git(directory: str, dir_fd: int | None = None, audit: _Audit | None = None) -> bool:
    """Whether ``directory`` holds a ``.git`` (noted in ``audit`` by which one it is: git changes it all day)."""
    name = ".git" if dir_fd is not None else join(directory, ".git")
    if audit is not None:
        try:
            audit.saw(join(directory, ".git"), os.stat(name, dir_fd=dir_fd, follow_symlinks=False), whole=False)
        except FileNotFoundError:
            audit.saw(join(directory, ".git"), None)
        except OSError:
            pass
    try:
        os.stat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def join(directory: str, name: str) -> str:
    """``name`` in ``directory`` (which may be ``/``, or end with one)."""
    return (directory if directory.endswith("/") else directory + "/") + name


def _cut(directory: str) -> int:
    return len(directory) if directory.endswith("/") else len(directory) + 1


def _ours(name: str) -> bool:
    """One of the agent's own temporary files (an atomic write's, left behind if the agent was killed
    during it): half a file, never shown to the model as if it were the user's."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


def walk(
    root: str, globs: list[str], stop: threading.Event | None = None, *, confine: Sequence[str] = ()
) -> Iterator[str]:
    """Files under ``root`` (paths relative to it, ``/``-separated) by the package's rules, in no order.

    ``confine``: where a ``.gitignore`` that is a link may lead (default: ``root``)."""
    for relative, _, _ in walk_entries(root, globs, stop, confine):
        yield relative


def open_root(directory: str) -> int:
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
    if audit is not None:  # a .gitignore or .git made in one changes it
        for ancestor in reversed(ancestors):  # from "/" down: each watched before what is in it is read
            audit.directory(ancestor, None)
    top = 0 if in_repo else next((i + 1 for i, a in enumerate(ancestors) if _has_git(a, audit=audit)), 0)
    for ancestor in ancestors[top:]:
        _audit_ignore_file(ancestor, None, audit)  # ripgrep reads these too, up to "/", and applies none
    for ancestor in reversed(ancestors[:top]):
        rules = _ignore_rules(ancestor, None, confine, audit)
        if rules is not None:
            stack.append((_cut(ancestor), rules))
    return stack, in_repo or top > 0


_Listing = tuple[list[tuple[str, str]], list[tuple[str, str, str]], Stack, bool]
"""A directory's (files: (relative, name)), (subdirectories: (relative, name, path)), rules and repo state."""


def walk_entries(
    root: str,
    globs: list[str],
    stop: threading.Event | None,
    confine: Sequence[str],
    audit: _Audit | None = None,
    *,
    files: bool = True,
) -> Iterator[tuple[str, int, str]]:
    """(path relative to ``root``, descriptor of its directory, name) of each file by the package's rules.

    The descriptor is valid until the next item is asked for. Every directory is opened from its parent's
    descriptor with ``O_NOFOLLOW``, so a directory swapped for a link mid-walk is not entered. With
    ``files`` False, only the directories are walked (to fill ``audit``); it stops at the first finding.
    """
    confine = confine or [root]
    overrides = Overrides(globs)
    stack, in_repo = _ancestors(root, confine, audit)
    root_fd = open_root(root)

    def listing(fd: int, prefix: str, path: str, stack: Stack, in_repo: bool) -> _Listing:
        if audit is not None:
            audit.directory(path, fd)
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
                include = not (in_repo and ignored_by(stack, join(path, name), is_dir))
            if not include:
                continue
            if is_dir:
                below.append((relative, name, join(path, name)))
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
    directory: str,
    globs: list[str],
    confine: Sequence[str] = (),
    stop: threading.Event | None = None,
    seen: list[Seen] | None = None,
    watch: Callable[[str, int | None, os.stat_result], object] | None = None,
) -> bool:
    """Whether ripgrep may walk ``directory`` itself: every ``.gitignore`` it would read on the way (the
    ancestors' too) is a plain regular file within the cap. Costs a walk of the directories alone.
    ``seen``: filled with what the walk read (:attr:`_Audit.seen`); ``watch``: see :attr:`_Audit.watch`."""
    audit = _Audit(seen=seen, watch=watch)
    for _ in walk_entries(directory, globs, stop, confine, audit, files=False):
        pass
    if audit.unsafe is not None:
        log.info("searching %s without ripgrep: %s is not a plain regular file within the cap", directory, audit.unsafe)
    return audit.unsafe is None


# -- opening what the walker lists ------------------------------------------------------------------


def one_file(directory: str, name: str) -> Iterator[tuple[str, int, str]]:
    """The file ``name`` in ``directory`` as :func:`walk_entries` gives files, if it is a regular file."""
    fd = open_root(directory)
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


def read_file(dir_fd: int, name: str) -> bytes | None:
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


def open_text_file(directory: str, name: str, stop: threading.Event) -> int | None:
    """A descriptor of the regular, non-binary file ``name`` in ``directory`` (reached without links),
    at its start; None when it is anything else."""
    dir_fd = open_root(directory)
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


# -- blocking work off the event loop --------------------------------------------------------------


async def in_thread(work: Callable[[threading.Event], Any]) -> Any:
    """Run blocking work in a thread; on cancellation tell it to stop (it checks the event)."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(work, stop, abandon_on_cancel=True)
    finally:
        stop.set()
