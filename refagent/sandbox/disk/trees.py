"""Walking a directory tree on the local disk through descriptors, never following a link: surveying it
before a delete or a move (:func:`survey_tree`), removing it (:class:`Removal`) and copying it
(:func:`copy_entry`); and the one name no tree operation takes along, ``.git`` (:data:`PROTECTED_NAME`).

Contract: every walk starts at a directory descriptor from :mod:`refagent.sandbox.disk.walk` and opens each
entry relative to its directory with ``O_NOFOLLOW``: a link is unlinked or copied as a link, never
descended into, so a subdirectory swapped for a link mid-way cannot lead a walk out of the tree. The
functions block and raise ``OSError`` as it comes (the callers in :mod:`refagent.sandbox.disk.delete_move`
turn it into words for the model), :class:`Appeared` when a ``.git`` turns up in a tree that had none
when it was surveyed, ``RecursionError`` for a tree deeper than Python's stack, and a
:class:`~refagent.errors.ToolError` for an entry that cannot be copied.

The survey is advisory, made so that a delete or a move can refuse *before* it changes anything; the
removal and the copy check every directory again for a ``.git`` right before they act in it, so one made
in between is never deleted or copied away.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from refagent.errors import ToolError
from refagent.sandbox.disk.walk import FILE_READ_FLAGS, O_CLOEXEC, kind_name, lstat_at

PROTECTED_NAME = ".git"
"""A recursive delete or a move never takes an entry of this name (in any case) along: a git repository's
``.git`` directory, or a submodule's or worktree's ``.git`` file, at any depth. The path policy keeps the
file tools out of ``.git`` itself; this keeps a tree operation from taking one with it."""


def is_protected(name: str) -> bool:
    """``name`` is :data:`PROTECTED_NAME` in any case (``.GIT`` *is* ``.git`` on a case-insensitive file system)."""
    return name.lower() == PROTECTED_NAME


def _join(relative: str, name: str) -> str:
    return f"{relative}/{name}" if relative else name


def under(path: str, relative: str) -> str:
    """The entry ``relative`` (to the top of a walk) of the tree at ``path``, for a message."""
    return f"{path}/{relative}" if relative not in ("", ".") else path


def _count(number: int, noun: str, nouns: str) -> str:
    return f"{number} {noun if number == 1 else nouns}"


@dataclass
class Survey:
    """What a directory tree holds, walked through descriptors before a delete or a move touches it."""

    protected: str | None = None
    """The first entry named ``.git`` (relative to the top; the shallowest in its directory): the walk
    stopped there."""
    blocked: str | None = None
    """The first directory (relative, ``.`` for the top) whose entries we may not remove."""
    special: str | None = None
    """The first entry that is not a file, a directory or a link (a FIFO, a socket, a device)."""


def survey_tree(dir_fd: int, name: str, survey: Survey, relative: str = "") -> None:
    """Walk the tree ``name`` in ``dir_fd`` without following links, filling in ``survey``."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise
        return  # no longer a directory: the caller's removal or rename acts on the entry itself
    try:
        entries = sorted(os.listdir(fd))
        # Every name of a directory first: a .git here is reported before any deeper one.
        protected = next((entry for entry in entries if is_protected(entry)), None)
        if protected is not None:
            survey.protected = _join(relative, protected)
            return
        # Advisory (the removal itself is what counts), but it turns "half deleted" into "refused" for the
        # common cases: a read-only directory (a Go module cache) or a read-only file system.
        if entries and survey.blocked is None and not os.access(name, os.W_OK | os.X_OK, dir_fd=dir_fd):
            survey.blocked = relative or "."
        for entry in entries:
            info = lstat_at(fd, entry)
            if info is None:
                continue
            if stat.S_ISDIR(info.st_mode):
                survey_tree(fd, entry, survey, _join(relative, entry))
                if survey.protected is not None:
                    return
            elif survey.special is None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                survey.special = _join(relative, entry)
    finally:
        os.close(fd)


class Appeared(Exception):
    """A ``.git`` is in a tree that had none when it was surveyed: stop before touching that directory."""

    def __init__(self, relative: str) -> None:
        super().__init__(relative)
        self.relative = relative


class Removal:
    """``rm -r`` through descriptors: links are unlinked, never followed; a directory that holds a ``.git``
    is left alone; and it can say how far it got."""

    def __init__(self) -> None:
        self.files = 0
        self.dirs = 0
        self.at = ""
        """Where it is (relative to the top): where it stopped, when it fails."""

    def done(self) -> str:
        if not self.files and not self.dirs:
            return "nothing"
        return f"{_count(self.files, 'file', 'files')} and {_count(self.dirs, 'directory', 'directories')}"

    def remove(self, dir_fd: int, name: str, relative: str = "") -> None:
        self.at = relative
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            os.unlink(name, dir_fd=dir_fd)  # it became a link or a file since the lstat: remove just the entry
            self.files += 1
            return
        try:
            entries = os.listdir(fd)
            # Checked again right before anything in this directory goes: a .git made since the survey stays.
            protected = next((entry for entry in sorted(entries) if is_protected(entry)), None)
            if protected is not None:
                raise Appeared(_join(relative, protected))
            for entry in entries:
                info = lstat_at(fd, entry)
                if info is None:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    self.remove(fd, entry, _join(relative, entry))
                else:
                    self.at = _join(relative, entry)
                    os.unlink(entry, dir_fd=fd)
                    self.files += 1
        finally:
            os.close(fd)
        self.at = relative
        os.rmdir(name, dir_fd=dir_fd)
        self.dirs += 1


def copy_entry(src_fd: int, name: str, dst_fd: int, new_name: str, relative: str = "") -> None:
    """Copy the entry ``name`` of ``src_fd`` to ``new_name`` in ``dst_fd`` through descriptors: a link as a
    link, a file with its permission bits and times (fsynced), a directory with everything in it. Hard
    links become separate files. ToolError for a special file; :class:`Appeared` for a ``.git``."""
    info = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    mode = stat.S_IMODE(info.st_mode) & 0o777
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=src_fd), new_name, dir_fd=dst_fd)
    elif stat.S_ISREG(info.st_mode):
        source = os.open(name, FILE_READ_FLAGS, dir_fd=src_fd)
        try:
            if not stat.S_ISREG(os.fstat(source).st_mode):
                raise ToolError(f"'{relative or name}' changed while it was being copied.")
            target = os.open(
                new_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC, 0o600, dir_fd=dst_fd
            )
            try:
                while chunk := os.read(source, 1024 * 1024):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(target, view) :]
                os.fchmod(target, mode)
                os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
                os.fsync(target)  # the source is deleted next: the copy must be on disk first
            finally:
                os.close(target)
        finally:
            os.close(source)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(new_name, 0o700, dir_fd=dst_fd)  # ours to fill; its own bits are set once it is full
        source = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=src_fd)
        try:
            target = os.open(new_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dst_fd)
            try:
                for entry in sorted(os.listdir(source)):
                    if is_protected(entry):
                        raise Appeared(_join(relative, entry))
                    copy_entry(source, entry, target, entry, _join(relative, entry))
                os.fchmod(target, mode)
                os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            finally:
                os.close(target)
        finally:
            os.close(source)
    else:
        raise ToolError(f"'{relative or name}' is {kind_name(info.st_mode)}, which cannot be copied.")
