"""Sessions on disk: one append-only record file per session, and an index for listing.

Layout under ``root`` (``platformdirs.user_data_dir("refagent")/sessions`` by default)::

    <session id>.jsonl     one JSON record per line, appended and flushed per record
    index.json             {session id: summary}, rewritten atomically; rebuilt from the record files
                           when it is missing or unreadable, and brought in step with them when a
                           listing starts (several agents share the directory: each editor window
                           runs its own, and a crash can fall between a record file and the index)

Files are private to the user (0600, the directory 0700): conversations hold file contents.

Record kinds (``kind``; unknown kinds are skipped, so older agents can read newer files):

- ``session``: the first record: ``sessionId``, ``cwd``, ``additionalDirectories``, ``createdAt``.
- ``update``: a ``session/update`` the client saw, replayed by ``session/load``. Written by
  :class:`~refagent.history.Recorder` as a line that can be replayed without parsing it (see below);
  older files hold ``{"kind":"update","update":...}`` and each tool call's updates as separate
  ``tool_call_update`` records, and still load.
- ``message``: one model-facing message (Chat Completions format), appended as the conversation grows.
- ``history``: the model-facing conversation replaced whole (after compaction or undo).
- ``meta``: ``title``, ``modeId``, ``profileId``, ``updatedAt`` changes; the last value wins.
- ``change``: a file the agent changed in turn ``turn``: ``path``, ``before`` (None: it did not exist),
  ``after`` (None: deleted). The first of a turn for a path holds its state before the turn (``/undo``).
- ``turn``: a prompt turn began (``turn``: its number).
- ``undo``: the changes of turn ``turn`` were undone.

Update records (:func:`update_line`) have a fixed prefix, then the update's JSON, then ``}``::

    {"kind":"update","sessionUpdate":"<kind>","id":<messageId or toolCallId, or null>,"whole":<bool>,
     "size":<characters of the update's JSON>,"update":<the update's JSON, ASCII only>}

so that ``session/load`` finds what it needs with a regular expression on the prefix and sends the
update's bytes as they are (:meth:`refagent.acp.connection.Connection.notify_many`): ``size`` tells a
complete line from one a crash cut short, and the update is written with ``ensure_ascii``, so it holds
no line break of any kind and goes to the client 7-bit clean. A tool call is recorded as it is announced,
then its updates as they come, and when it ends (``completed``, ``failed``) its whole state at once: a
``tool_call_update`` with every field of the folded call (``"whole":true``), which is what a replay shows
(an older agent folds it into the announcement and gets the same). A line that does not match the prefix
is parsed, as every record was before. Records other than updates are plain JSON objects whose first
key is ``kind``; the ``message``, ``history``, ``change`` and ``undo`` records (the bulk of a file, and
not needed to answer ``session/load``) are parsed only when asked for (:meth:`StoredSession.model_state`).

Robustness: a truncated last line (a crash mid-write) and corrupt lines are skipped with one log line
per file, and the next record starts on a line of its own; a record file that cannot be read is left
out of listings; a broken index is rebuilt; an unwritable directory is warned about once and the
session goes on unsaved. Nothing here can keep the agent from starting.

Longer than most modules (~440 lines) because the record format, its writer, its reader and the index
over the files are one contract: apart, each would only make sense next to the others.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import json
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from refagent.acp.errors import InvalidParams

log = logging.getLogger(__name__)

PAGE_SIZE = 50
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def now() -> str:
    """ISO 8601, UTC, millisecond precision: sortable as text."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_root() -> Path | None:
    """``sessions`` in the user data directory, or None when there is none (a trimmed environment)."""
    from refagent.settings import sessions_root

    return sessions_root()


_FAST_UPDATE = re.compile(
    rb'\{"kind":"update","sessionUpdate":"([a-z_]{1,40})","id":(null|"[^"\\]{0,1024}"),'
    rb'"whole":(true|false),"size":([0-9]{1,12}),"update":'
)
_UPDATE_KINDS = {
    kind.encode(): kind
    for kind in (
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
    )
}
_FAST_PREFIX = b'{"kind":"update","sessionUpdate":"'
_MODEL_PREFIXES = tuple(b'{"kind":"%s",' % kind for kind in (b"message", b"history", b"change", b"undo"))


def id_key(value: object) -> bytes | None:
    """How an update's ``messageId`` or ``toolCallId`` is compared in replay: its JSON (None: none)."""
    return None if value is None else json.dumps(value, ensure_ascii=True).encode("ascii")


def update_line(update: dict[str, Any], *, key: str | None, whole: bool = False) -> str:
    """The record of one update, in the form replayed without parsing (the module's docstring)."""
    body = json.dumps(update, separators=(",", ":"), ensure_ascii=True)
    kind = update["sessionUpdate"]
    if not re.fullmatch("[a-z_]{1,40}", kind):
        raise ValueError(f"not an update kind: {kind!r}")
    head = json.dumps(key, ensure_ascii=True)
    return (
        f'{{"kind":"update","sessionUpdate":"{kind}","id":{head},"whole":{"true" if whole else "false"},'
        f'"size":{len(body)},"update":{body}}}'
    )


@dataclass(slots=True)
class UpdateRecord:
    """One recorded update, as replay needs it: its kind, the id it is merged or folded by (:func:`id_key`),
    whether it is a tool call's whole state, and either ``raw``, its JSON as written (ASCII, one line,
    not parsed: a view of the file's bytes), or ``parsed`` (a record in the older form, or one that had to be read)."""

    kind: str
    key: bytes | None
    whole: bool = False
    raw: memoryview | bytes | None = None
    parsed: dict[str, Any] | None = None

    @classmethod
    def of(cls, update: dict[str, Any]) -> UpdateRecord:
        kind = update.get("sessionUpdate")
        ident = update.get("toolCallId") if kind in ("tool_call", "tool_call_update") else update.get("messageId")
        return cls(kind if isinstance(kind, str) else "", id_key(ident), parsed=update)

    def update(self) -> dict[str, Any] | None:
        """The update as a dict (a new one each time for a raw record); None if it is not JSON (a line
        corrupted on disk without changing its length)."""
        if self.raw is None:
            return self.parsed
        try:
            value = json.loads(bytes(self.raw))
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


@dataclass
class StoredSession:
    """What a record file says, folded. The model-facing conversation and the ``/undo`` records are
    parsed on first use (:meth:`model_state`): ``session/load`` answers without them."""

    session_id: str
    cwd: str
    additional_directories: list[str] = field(default_factory=list)
    created_at: str = ""
    title: str | None = None
    updated_at: str | None = None
    mode_id: str | None = None
    profile_id: str | None = None
    update_records: list[UpdateRecord] = field(default_factory=list)
    model_records: list[memoryview | dict[str, Any]] = field(default_factory=list)
    """The ``message``, ``history``, ``change`` and ``undo`` records in order: lines, or parsed records."""
    turns: int = 0
    source: str = ""
    _model: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = field(default=None, repr=False)

    @property
    def updates(self) -> list[dict[str, Any]]:
        """The recorded updates as dicts, in order (what :func:`refagent.history.replay` takes)."""
        return [u for u in (r.update() for r in self.update_records) if u is not None]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.model_state()[0]

    @property
    def changes(self) -> list[dict[str, Any]]:
        return self.model_state()[1]

    def model_state(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The model-facing conversation and the changes ``/undo`` can restore, parsed once (quick, but
        the bulk of a long session's file: call it off the event loop)."""
        if self._model is None:
            self._model = _fold_model(self.model_records, self.source)
        return self._model

    def summary(self) -> dict[str, Any]:
        """The ``SessionInfo`` of ``session/list``."""
        info: dict[str, Any] = {"sessionId": self.session_id, "cwd": self.cwd}
        if self.additional_directories:
            info["additionalDirectories"] = self.additional_directories
        if self.title:
            info["title"] = self.title
        if self.updated_at or self.created_at:
            info["updatedAt"] = self.updated_at or self.created_at
        return info


class SessionLog:
    """Appends the records of one session. Each record is one line, flushed as it is written.

    ``create``: whether appending may create the file (only for a new session). After :meth:`close`,
    records still go to the file (a turn cancelled by ``session/close`` finishes writing its last ones),
    each opening and closing it, and only while it exists: after ``session/delete`` they are dropped
    rather than starting a new file without its session record.
    """

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        self._create = create
        self._file: IO[str] | None = None
        self._closed = False
        self._warned = False

    def append(self, record: dict[str, Any]) -> None:
        try:
            self._write(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
        except (ValueError, TypeError) as exc:
            self._failed(exc)

    def append_update(self, update: dict[str, Any], *, key: str | None, whole: bool = False) -> None:
        """An ``update`` record in the form replayed without parsing (:func:`update_line`)."""
        try:
            self._write(update_line(update, key=key, whole=whole))
        except (ValueError, TypeError) as exc:
            self._failed(exc)

    def _write(self, record: str) -> None:
        try:
            line = record + "\n"
            if self._closed:
                with self._open() as file:
                    file.write(line)
                return
            if self._file is None:
                self._file = self._open()
            self._file.write(line)
            self._file.flush()
        except FileNotFoundError:
            log.debug("%s is gone (deleted); not saving to it", self.path)
        except (OSError, ValueError) as exc:  # a full disk must not end the session
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        # Once as a warning: a line per record would fill a stderr pipe nobody reads (design.md).
        log.log(logging.DEBUG if self._warned else logging.WARNING, "could not save to %s: %s", self.path, exc)
        self._warned = True

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _open(self) -> IO[str]:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if self._create else 0)
        # Conversations hold file contents and maybe secrets: readable by their owner only.
        file = os.fdopen(os.open(self.path, flags, 0o600), "a", encoding="utf-8")
        self._create = False  # once created, a missing file means it was deleted
        if os.fstat(file.fileno()).st_size > 0:
            # A crash can leave a partial last line: start a new one, or the next record is glued to it and lost.
            with self.path.open("rb") as raw:
                raw.seek(-1, os.SEEK_END)
                if raw.read(1) != b"\n":
                    file.write("\n")
        return file


class SessionStore:
    """The record files and the index. All methods are quick, blocking file operations."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._index: dict[str, dict[str, Any]] | None = None
        self._index_stat: tuple[int, int, int] | None = None
        """The index file as it was when ``_index`` was read or written: other agents write it too."""
        self._warned = False
        self._unlisted: dict[str, tuple[int, int]] = {}
        """Record files that could not be folded (by name), with their ``(mtime, size)``: not read again
        until they change."""

    # -- writing ------------------------------------------------------------------------------

    def create(self, session_id: str, cwd: str, additional: list[str]) -> SessionLog:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # the session goes on unsaved
            self._warn("cannot create the sessions directory %s: %s", self.root, exc)
        created = now()
        log_ = SessionLog(self._path(session_id), create=True)
        log_.append(
            {
                "kind": "session",
                "sessionId": session_id,
                "cwd": cwd,
                "additionalDirectories": additional,
                "createdAt": created,
            }
        )
        info: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "updatedAt": created}
        if additional:
            info["additionalDirectories"] = additional
        self._put(info)
        return log_

    def reopen(self, session_id: str) -> SessionLog:
        return SessionLog(self._path(session_id))

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

    def delete(self, session_id: str) -> None:
        """Remove a session; an unknown id is not an error."""
        if not _ID.match(session_id):
            return
        with contextlib.suppress(FileNotFoundError):
            self._path(session_id).unlink()
        index = self._load_index()
        if index.pop(session_id, None) is not None:
            self._save_index(index)

    # -- reading ------------------------------------------------------------------------------

    def load(self, session_id: str) -> StoredSession | None:
        """Fold a session's records; None if there is no such session (or it is unreadable)."""
        if not _ID.match(session_id):
            return None
        try:
            data = self._path(session_id).read_bytes()
        except OSError:
            return None
        return fold_bytes(data, str(self._path(session_id)))

    def list(
        self, cwd: str | None = None, cursor: str | None = None, page_size: int = PAGE_SIZE
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of sessions, newest first, and the cursor of the next page (None: no more).

        The cursor is opaque to clients: the sort key of the last entry shown, so a page does not shift
        when sessions are added meanwhile. An invalid cursor is ``-32602``.
        """
        after = _decode_cursor(cursor) if cursor is not None else None
        index = self._load_index()
        if after is None:  # a new listing looks at the directory too; its later pages follow the index
            index = self._reconcile(index)
        entries = [i for i in index.values() if cwd is None or i.get("cwd") == cwd]
        entries.sort(key=_sort_key, reverse=True)
        if after is not None:
            entries = [e for e in entries if _sort_key(e) < after]
        page = entries[:page_size]
        more = len(entries) > page_size
        return page, (_encode_cursor(_sort_key(page[-1])) if more and page else None)

    # -- the index ----------------------------------------------------------------------------

    def _warn(self, message: str, *args: object) -> None:
        """A warning the first time, then debug: a broken data directory fails at every write, and a line
        each time would fill a stderr pipe that nobody reads (design.md)."""
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
                mark = (stat.st_mtime_ns, stat.st_size)
                if self._unlisted.get(session_id) == mark:
                    continue
                data = Path(entry.path).read_bytes()
            except OSError as exc:
                log.warning("skipping unreadable session file %s: %s", entry.path, exc)
                continue
            stored = fold_bytes(data, entry.path)
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
        except OSError as exc:
            self._warn("could not save the session index: %s", exc)
        finally:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)


def fold(lines: Sequence[bytes | str], source: str = "") -> StoredSession | None:
    """Fold record lines into a :class:`StoredSession` (:func:`fold_bytes` on them joined)."""
    return fold_bytes(
        b"\n".join(s.encode("utf-8", errors="surrogatepass") if isinstance(s, str) else s for s in lines), source
    )


def fold_bytes(data: bytes, source: str = "") -> StoredSession | None:
    """Fold a record file's bytes into a :class:`StoredSession`. Bad lines are skipped (a crash can cut
    the last). Lines end at ``\n`` only: records hold text with U+2028 or U+0085 unescaped, where
    ``str.splitlines`` would cut them. Nothing is copied or decoded but what is parsed: update and
    conversation records are kept as views of ``data``."""
    corrupt: list[int] = []
    try:
        return _fold(data, source, corrupt)
    finally:
        if corrupt:  # one line per file, however many records are bad
            log.warning("%s: skipped %d corrupt record(s), the first at line %d", source, len(corrupt), corrupt[0])


def _parse(line: bytes | memoryview) -> Any:
    """One record line as JSON; raises ValueError. Invalid UTF-8 is replaced, as a text read would."""
    return json.loads(str(line, "utf-8", "replace"))


def _fold(data: bytes, source: str, corrupt: list[int]) -> StoredSession | None:
    view = memoryview(data)
    ascii_only = data.isascii()  # then no update record needs a look of its own (a quick pass)
    fast_update, find, starts = _FAST_UPDATE.match, data.find, data.startswith
    kinds = _UPDATE_KINDS
    updates: list[UpdateRecord] | None = None  # the session's, once its record has been read
    model: list[memoryview | dict[str, Any]] = []
    stored: StoredSession | None = None
    number, pos, size = 0, 0, len(data)
    while pos < size:
        end = find(b"\n", pos)
        if end < 0:
            end = size
        number += 1
        start, pos = pos, end + 1
        if updates is not None:  # the quick paths, once the session record has been read
            if starts(_FAST_PREFIX, start, end):
                match = fast_update(data, start, end)
                if match is not None:
                    head = match.end()
                    # whole (size, then "}"), not cut short by a crash (and maybe continued by another record)
                    complete = end - head == int(match[4]) + 1 and data[end - 1] == 0x7D and data[head] == 0x7B
                    if complete and (ascii_only or data[head : end - 1].isascii()):
                        key = None if match[2] == b"null" else match[2]
                        kind = kinds.get(match[1]) or match[1].decode("ascii")
                        updates.append(UpdateRecord(kind, key, match[3] == b"true", view[head : end - 1]))
                        continue
                # else parsed below (and skipped if it was cut short)
            elif starts(_MODEL_PREFIXES, start, end):
                model.append(view[start:end])  # parsed by model_state(), if ever
                continue
        line = view[start:end]
        if not line or data[start:end].isspace():
            continue
        try:
            record = _parse(line)
        except ValueError:
            corrupt.append(number)
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get("kind")
        if kind == "session":
            if stored is None and isinstance(record.get("sessionId"), str) and isinstance(record.get("cwd"), str):
                stored = StoredSession(
                    session_id=record["sessionId"],
                    cwd=record["cwd"],
                    additional_directories=[
                        d for d in _list(record.get("additionalDirectories")) if isinstance(d, str)
                    ],
                    created_at=str(record.get("createdAt", "")),
                    source=source,
                )
                updates, model = stored.update_records, stored.model_records
            continue
        if stored is None:
            log.warning("%s: records before the session record; skipping the file", source)
            return None
        if kind == "update" and isinstance(record.get("update"), dict):
            stored.update_records.append(UpdateRecord.of(record["update"]))
        elif kind in ("message", "history", "change", "undo"):
            stored.model_records.append(record)
        elif kind == "meta":
            stored.title = _text(record, "title", stored.title)
            stored.mode_id = _text(record, "modeId", stored.mode_id)
            stored.profile_id = _text(record, "profileId", stored.profile_id)
            stored.updated_at = _text(record, "updatedAt", stored.updated_at)
        elif kind == "turn" and isinstance(record.get("turn"), int):
            stored.turns = max(stored.turns, record["turn"])
    return stored


def _fold_model(
    records: list[memoryview | dict[str, Any]], source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation and the changes from the ``message``, ``history``, ``change``, ``undo`` records."""
    messages: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    corrupt = 0
    for item in records:
        if isinstance(item, memoryview):
            try:
                record = _parse(item)
            except ValueError:
                corrupt += 1
                continue
            if not isinstance(record, dict):
                continue
        else:
            record = item
        kind = record.get("kind")
        if kind == "message" and isinstance(record.get("message"), dict):
            messages.append(record["message"])
        elif kind == "history" and isinstance(record.get("messages"), list):
            messages = [m for m in record["messages"] if isinstance(m, dict)]
        elif kind == "change" and isinstance(record.get("path"), str) and isinstance(record.get("turn"), int):
            changes.append(record)
        elif kind == "undo":
            changes = [c for c in changes if c.get("turn") != record.get("turn")]
    if corrupt:  # one line per file (a cut line is the usual one)
        log.warning("%s: skipped %d corrupt conversation record(s)", source, corrupt)
    return messages, changes


def _text(record: dict[str, Any], key: str, default: str | None) -> str | None:
    value = record.get(key, default)
    return value if isinstance(value, str) else default


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


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
