"""Sessions on disk: the directory of session files, and an index for listing.

Layout under ``root`` (``platformdirs.user_data_dir("refagent")/sessions`` by default)::

    <session id>.jsonl     a session's records  } its files: refagent.persistence.records
    <session id>.replay    its replay file      }
    index.json             {session id: summary}, rewritten atomically; rebuilt from the record files
                           when it is missing or unreadable, and brought in step with them when a
                           listing starts (several agents share the directory: each editor window
                           runs its own, and a crash can fall between a record file and the index)

Files are private to the user (0600, the directory 0700): conversations hold file contents.

Robustness: a record file that cannot be read is left out of listings; a broken index is rebuilt; an
unwritable directory is warned about once and the session goes on unsaved. Nothing here can keep the
agent from starting.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refagent.acp.errors import InvalidParams
from refagent.acp.text import one_line
from refagent.persistence.reader import StoredSession, read_records, read_session
from refagent.persistence.writer import SessionLog, repair

if TYPE_CHECKING:
    from refagent.acp.requests import ArchiveFilter

log = logging.getLogger(__name__)

PAGE_SIZE = 50
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def now() -> str:
    """ISO 8601, UTC, millisecond precision: sortable as text (``2025-01-31T09:15:00.123Z``).

    Made with :mod:`time`, not :mod:`datetime`, which the way to the first ``session/new`` response
    would otherwise import for this alone."""
    seconds, milliseconds = divmod(time.time_ns() // 1_000_000, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{milliseconds:03d}Z"


class SessionStore:
    """The record files and the index. All methods are quick, blocking file operations."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._index: dict[str, dict[str, Any]] | None = None
        self._index_stat: tuple[int, int, int] | None = None
        """The index file as it was when ``_index`` was read or written: other agents write it too."""
        self._warned = False
        self._unindexed: dict[str, dict[str, Any]] = {}
        """The index entries of sessions created with ``listed=False``, until :meth:`list_created`."""
        self._unlisted: dict[str, tuple[int, int]] = {}
        """Record files that could not be folded (by name), with their ``(mtime, size)``: not read again
        until they change."""

    # -- writing ------------------------------------------------------------------------------

    def create(self, session_id: str, cwd: str, additional: list[str], *, listed: bool = True) -> SessionLog:
        """A new session's files (its first record, an empty replay file) and, if ``listed``, its entry in
        the index. With ``listed=False`` the caller enters it later with :meth:`list_created` (the index
        is rewritten whole, which need not delay the ``session/new`` response); a listing meanwhile finds
        the session from its record file."""
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # the session goes on unsaved
            self._warn("cannot create the sessions directory %s: %s", self.root, exc)
        created = now()
        log_ = SessionLog(self._path(session_id), session_id, create=True)
        log_.append(
            {
                "kind": "session",
                "sessionId": session_id,
                "cwd": cwd,
                "additionalDirectories": additional,
                "createdAt": created,
            }
        )
        with contextlib.suppress(OSError):  # and its replay file, empty (failing, the warning was given)
            self._path(session_id).with_suffix(".replay").touch(mode=0o600)
        info: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "updatedAt": created}
        if additional:
            info["additionalDirectories"] = additional
        if listed:
            self._put(info)
        else:
            self._unindexed[session_id] = info
        return log_

    def list_created(self, session_id: str) -> None:
        """Enter a session made with ``create(..., listed=False)`` in the index: nothing if it is there
        already (a listing found it), or if it was deleted meanwhile."""
        info = self._unindexed.pop(session_id, None)
        if info is None or not self._path(session_id).exists():
            return
        index = self._load_index()
        if session_id not in index:
            index[session_id] = info
            self._save_index(index)

    def reopen(self, session_id: str) -> SessionLog:
        return SessionLog(self._path(session_id), session_id)

    def touch(self, session_id: str, *, title: str | None = None, updated_at: str | None = None) -> None:
        """Keep the index current after a turn or a new title."""
        index = self._load_index()
        info = index.get(session_id)
        if info is None:
            return
        if title is not None:
            info["title"] = title
        info["updatedAt"] = updated_at or now()
        self._save_index(index)

    def mark_archived(self, session_id: str, archived: bool) -> None:
        """Keep the index's archived mark in step with the session's records (its ``meta``)."""
        index = self._load_index()
        info = index.get(session_id)
        if info is None:
            return
        if archived:
            info["archived"] = True
        else:
            info.pop("archived", None)
        self._save_index(index)

    def delete(self, session_id: str) -> None:
        """Remove a session; an unknown id is not an error."""
        if not _ID.match(session_id):
            return
        for path in (self._path(session_id), self._path(session_id).with_suffix(".replay")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        index = self._load_index()
        if index.pop(session_id, None) is not None:
            self._save_index(index)

    # -- reading ------------------------------------------------------------------------------

    def load(self, session_id: str) -> StoredSession | None:
        """A session's state and its visible history (:func:`refagent.persistence.reader.read_session`); None if there
        is no such session (or it is unreadable)."""
        if not _ID.match(session_id):
            return None
        return read_session(self._path(session_id), session_id)

    def repair(self, stored: StoredSession, lines: list[bytes]) -> None:
        """:func:`refagent.persistence.writer.repair` (warned about, once, if it cannot be written)."""
        try:
            repair(self._path(stored.session_id), stored, lines)
        except OSError as exc:
            self._warn("could not repair session %s: %s", stored.session_id, exc)

    def exists(self, session_id: str) -> bool:
        """Whether a session of that id is saved here (its record file)."""
        return bool(_ID.match(session_id)) and self._path(session_id).is_file()

    def list(
        self,
        cwd: str | None = None,
        cursor: str | None = None,
        page_size: int = PAGE_SIZE,
        archived: ArchiveFilter = "exclude",
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of sessions, newest first, and the cursor of the next page (None: no more). Each says
        whether it is ``archived``; ``archived`` filters them by it (before the page is cut).

        The cursor is opaque to clients: the sort key of the last entry shown, so a page does not shift
        when sessions are added meanwhile. An invalid cursor is ``-32602``.
        """
        after = _decode_cursor(cursor) if cursor is not None else None
        index = self._load_index()
        if after is None:  # a new listing looks at the directory too; its later pages follow the index
            index = self._reconcile(index)
        entries = [
            i
            for i in index.values()
            if (cwd is None or i.get("cwd") == cwd) and (archived == "include" or (archived == "only") == _archived(i))
        ]
        entries.sort(key=_sort_key, reverse=True)
        if after is not None:
            entries = [e for e in entries if _sort_key(e) < after]
        page = [_listed(e) for e in entries[:page_size]]
        more = len(entries) > page_size
        return page, (_encode_cursor(_sort_key(page[-1])) if more and page else None)

    # -- the index ----------------------------------------------------------------------------

    def _warn(self, message: str, *args: object) -> None:
        """A warning the first time, then debug: a broken data directory fails at every write, and a line
        each time would fill a stderr pipe that nobody reads (Toad, for one, reads it only after the agent
        has failed)."""
        log.log(logging.DEBUG if self._warned else logging.WARNING, message, *args)
        self._warned = True

    def _path(self, session_id: str) -> Path:
        if not _ID.match(session_id):
            raise InvalidParams(f"Invalid params: malformed session id {session_id!r}")
        return self.root / f"{session_id}.jsonl"

    def _put(self, info: dict[str, Any]) -> None:
        index = self._load_index()
        index[info["sessionId"]] = info
        self._save_index(index)

    def _load_index(self) -> dict[str, dict[str, Any]]:
        path = self.root / "index.json"
        stat = _stat(path)
        if self._index is not None and stat is not None and stat == self._index_stat:
            return self._index
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
            self._index = {k: v for k, v in data.items() if isinstance(v, dict) and "cwd" in v}
            self._index_stat = stat
        except FileNotFoundError:
            self._index = self._rebuild()
        except (OSError, ValueError) as exc:
            self._warn("the session index is unreadable (%s); rebuilding it", exc)
            self._index = self._rebuild()
        return self._index

    def _rebuild(self) -> dict[str, dict[str, Any]]:
        index: dict[str, dict[str, Any]] = {}
        self._unlisted.clear()
        self._reconcile(index, save=False)
        if index:
            self._save_index(index)
        return index

    def _reconcile(self, index: dict[str, dict[str, Any]], *, save: bool = True) -> dict[str, dict[str, Any]]:
        """Bring ``index`` in step with the record files: another agent, or a crash between writing a record
        file and the index, can leave files it does not list, and files can be removed by hand."""
        files: dict[str, os.DirEntry[str]] = {}
        try:
            with os.scandir(self.root) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl") and _ID.match(entry.name[:-6]):
                        files[entry.name[:-6]] = entry
        except OSError:
            return index
        gone = [session_id for session_id in index if session_id not in files]
        changed = bool(gone)
        for session_id in gone:
            del index[session_id]
        for session_id, entry in files.items():
            if session_id in index:
                continue
            try:
                stat = entry.stat()
            except OSError as exc:
                log.warning("skipping unreadable session file %s: %s", entry.path, exc)
                continue
            mark = (stat.st_mtime_ns, stat.st_size)
            if self._unlisted.get(session_id) == mark:
                continue
            stored = read_records(Path(entry.path), replayable=os.path.exists(entry.path[:-6] + ".replay"))
            if stored is None or stored.session_id != session_id:
                self._unlisted[session_id] = mark
                continue
            index[session_id] = stored.summary()
            changed = True
        if changed and save:
            self._save_index(index)
        return index

    def _save_index(self, index: dict[str, dict[str, Any]]) -> None:
        self._index = index
        temp: str | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.root, prefix=".index-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(index, file, separators=(",", ":"), ensure_ascii=False)
            os.replace(temp, self.root / "index.json")
            temp = None
            self._index_stat = _stat(self.root / "index.json")
        except (OSError, ValueError) as exc:  # ValueError: text UTF-8 cannot hold (a lone surrogate)
            self._warn("could not save the session index: %s", exc)
        finally:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _archived(info: dict[str, Any]) -> bool:
    return info.get("archived") is True


def _listed(info: dict[str, Any]) -> dict[str, Any]:
    """An index entry as ``session/list`` shows it: its archived mark always (the ``archive`` capability
    requires it), its title on one visible line (it came from a user's prompt, saved by any version, or was
    edited by hand)."""
    listed = {**info, "archived": _archived(info)}
    if isinstance(info.get("title"), str):
        listed["title"] = one_line(info["title"])
    return listed


def _sort_key(info: dict[str, Any]) -> tuple[str, str]:
    """Listings sort by this, descending: newest first (ISO 8601 UTC stamps sort as text)."""
    return str(info.get("updatedAt") or ""), str(info.get("sessionId"))


def _encode_cursor(key: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key):
            return key[0], key[1]
    except (ValueError, binascii.Error):
        pass
    raise InvalidParams("Invalid params: 'cursor' is not a cursor this agent gave out")
