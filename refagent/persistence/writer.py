"""Writing one session's files (their format: :mod:`refagent.persistence.records`): :class:`SessionLog`
appends to them as the session goes on, and :func:`repair` mends what a crash left held.

Contract: each record is one line, written and flushed as it is appended, and each replay line is whole
and final when written (the caller folds it first); a crash can cut only the last line of either file,
and the next write starts a line of its own (a record file's cut line is ended, a replay file's cut off).
The record file is created only for a new session, never again after it is deleted; files are private
to their user (0600). A write that fails (a full disk, a record that is not JSON) is warned about once
and the session goes on unsaved.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from refagent.persistence.reader import StoredSession, Tail
from refagent.persistence.records import replay_line

log = logging.getLogger(__name__)


class SessionLog:
    """Appends to the files of one session: records (:meth:`append`), each one line flushed as it is
    written, and lines of the replay file (:meth:`show`).

    ``create``: whether appending may create the record file (only for a new session); the replay file is
    created when the record file exists. After :meth:`close`, writes still reach the files (a turn
    cancelled by ``session/close`` finishes writing its last ones), each opening and closing them, and
    only while the record file exists: after ``session/delete`` they are dropped rather than starting a
    new file without its session record.
    """

    def __init__(self, path: Path, session_id: str, *, create: bool = False) -> None:
        self.path = path
        self.replay_path = path.with_suffix(".replay")
        self.session_id = session_id
        self._create = create
        self._records = _Appender(self._open)
        self._replay = _Appender(self._open_replay)
        self._replayed = 0
        """The replay file's size when last written or measured."""
        self._warned = False

    @property
    def replayed(self) -> int:
        """The replay file's size (its whole lines): what a ``hold`` record holds. Opens the file to know it
        (a reopened session's first item may be held before anything was shown)."""
        self._put(self._replay, b"")
        return self._replayed

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line. A string with a lone surrogate in it (a file name that is not
        UTF-8, as ``surrogateescape`` gives it) has no UTF-8 form: that record is written as ASCII JSON,
        the surrogate as its ``\\udcff`` escape, which reads back as it was (``/undo`` needs the exact name).
        A record that is not JSON at all is left out, with a warning."""
        try:
            try:
                line = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
            except UnicodeEncodeError:
                line = json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode("ascii") + b"\n"
        except (ValueError, TypeError, RecursionError) as exc:  # not JSON
            self._failed(exc)
            return
        self._put(self._records, line)

    def show(self, update: dict[str, Any]) -> None:
        """Append ``update`` to the replay file (folded already: it is sent as it is)."""
        try:
            line = replay_line(self.session_id, update)
        except (ValueError, TypeError) as exc:
            self._failed(exc)
            return
        self._put(self._replay, line)

    def close(self) -> None:
        self._records.close()
        self._replay.close()

    def _put(self, file: _Appender, line: bytes) -> None:
        try:
            size = file.write(line)
        except FileNotFoundError:
            log.debug("%s is gone (deleted); not saving to it", self.path)
        except (OSError, ValueError) as exc:  # a full disk must not end the session
            self._failed(exc)
        else:
            if file is self._replay:
                self._replayed = size

    def _failed(self, exc: Exception) -> None:
        # Once as a warning: a line per record would fill a stderr pipe nobody reads (Toad, for one, reads
        # an agent's stderr only after the agent has failed).
        log.log(logging.DEBUG if self._warned else logging.WARNING, "could not save to %s: %s", self.path, exc)
        self._warned = True

    def _open(self) -> IO[bytes]:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if self._create else 0)
        # Conversations hold file contents and maybe secrets: readable by their owner only.
        file = os.fdopen(os.open(self.path, flags, 0o600), "ab")
        self._create = False  # once created, a missing file means it was deleted
        if os.fstat(file.fileno()).st_size > 0:
            # A crash can leave a partial last line: start a new one, or the next record is glued to it and lost.
            with self.path.open("rb") as raw:
                raw.seek(-1, os.SEEK_END)
                if raw.read(1) != b"\n":
                    file.write(b"\n")
        return file

    def _open_replay(self) -> IO[bytes]:
        """The replay file, for appending whole lines, at its end: a line a crash cut short is cut off first
        (it is sent as it is, so it must not stay in the middle)."""
        if not self._create and not self.path.exists():
            raise FileNotFoundError(self.path)  # deleted: not to be started again
        file = os.fdopen(os.open(self.replay_path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
        try:
            size = Tail(b"", file).rfind(b"\n") + 1
            file.truncate(size)
            file.seek(size)
        except BaseException:
            file.close()
            raise
        return file


class _Appender:
    """A file written a line at a time, each line flushed: opened (by ``opener``, at its end) when first
    written, and kept open until :meth:`close`; after that, opened and closed for each line."""

    def __init__(self, opener: Callable[[], IO[bytes]]) -> None:
        self._opener = opener
        self._file: IO[bytes] | None = None
        self._closed = False

    def write(self, line: bytes) -> int:
        """Append ``line`` (``b""``: nothing, to measure the file); return the file's size after it."""
        if self._closed:
            with self._opener() as file:
                file.write(line)
                return file.tell()
        if self._file is None:
            self._file = self._opener()
        self._file.write(line)
        self._file.flush()
        return self._file.tell()

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def repair(path: Path, stored: StoredSession, lines: list[bytes]) -> None:
    """After a crash while updates were held: the replay file becomes ``stored.shown`` and then ``lines``
    (the held updates, folded), and a ``release`` record says so. Run before the session writes again;
    done twice (a crash during this), it gives the same files. Raises OSError if it cannot be written
    (then ``stored`` is as it was)."""
    temp: str | None = None
    try:  # rewritten whole and replaced: a crash now leaves the old file, and the hold, as they were
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".replay-", suffix=".tmp")
        with os.fdopen(fd, "wb") as file:
            file.write(stored.shown)
            file.writelines(lines)
        os.replace(temp, path.with_suffix(".replay"))
        temp = None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    log_ = SessionLog(path, stored.session_id)
    log_.append({"kind": "release"})
    log_.close()
    stored.shown += b"".join(lines)
    stored.held, stored.replayed = [], None
