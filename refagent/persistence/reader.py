"""Reading one session's files (their format: :mod:`refagent.persistence.records`): what they say, as a
:class:`StoredSession`.

Contract: reads only, never writes (the repair of a crash's leftovers is the writer's:
:func:`refagent.persistence.writer.repair`). :func:`read_session` reads the replay file whole and of the
record file only its first line and, found from its end, its last ``meta`` records and the updates held
since an unreleased ``hold``; the conversation is parsed when it is first asked for
(:meth:`StoredSession.model_state`). What cannot be read is skipped with one log line per file, as the
format's docstring says; an unreadable record file or one that does not start with a session record
reads as None.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from refagent.acp import jsonrpc
from refagent.acp.text import one_line
from refagent.persistence.records import replay_head

log = logging.getLogger(__name__)

_HOLD = b'\n{"kind":"hold",'
_RELEASE = b'\n{"kind":"release"'
_META = b'\n{"kind":"meta",'
_RECORD = b'{"kind":"'
PLAN = b'"sessionUpdate":"plan'
"""In every line of a replay file that holds a plan update (``plan``, ``plan_update``, ``plan_removed``), and no
other (the text of a message holds its quotes escaped)."""
_STATE = {"title": str, "modeId": str, "profileId": str, "updatedAt": str, "turns": int}
"""The fields of a ``meta`` record written whole, and their types (newer records hold ``reasoningEffort`` and
``systemPrompt`` too, read from the whole record only)."""
_MODEL_PREFIXES = tuple(b'{"kind":"%s",' % kind for kind in (b"message", b"history", b"change", b"undo", b"start"))


class ModelState(NamedTuple):
    """What a record file says for the model: the conversation, the changes ``/undo`` and ``/rewind`` can
    restore, and where each prompt turn began in the conversation."""

    messages: list[dict[str, Any]]
    changes: list[dict[str, Any]]
    starts: dict[int, int]


@dataclass
class StoredSession:
    """What a session's files say. ``shown`` is its visible history as ``session/load`` sends it; ``held``
    the updates still to be folded after it (a session cut short while it held some: see
    :mod:`refagent.persistence.records`). The model-facing conversation and the ``/undo`` records are parsed
    on first use (:meth:`model_state`): ``session/load`` answers without them."""

    session_id: str
    cwd: str
    additional_directories: list[str] = field(default_factory=list)
    created_at: str = ""
    title: str | None = None
    updated_at: str | None = None
    mode_id: str | None = None
    profile_id: str | None = None
    reasoning_effort: str | None = None
    """The session's ``thought_level``, if its model takes a reasoning effort (newer files only)."""
    system_prompt: tuple[str, str] | None = None
    """The client's system prompt, ``(mode, text)``, if it sent one (newer files only)."""
    turns: int = 0
    archived: bool = False
    """Whether it is archived (``session/archive``, unstable: hidden from ``session/list`` unless asked for;
    newer files only)."""
    shown: bytes = b""
    held: list[dict[str, Any]] = field(default_factory=list)
    replayed: int | None = None
    """The size of the replay file at the unreleased ``hold`` (None: every hold was released)."""
    source: str = ""
    data: bytes | None = field(default=None, repr=False)
    """The record file's bytes, for :meth:`model_state`, if they were read whole (else it reads ``source``)."""
    _model: ModelState | None = field(default=None, repr=False)

    @property
    def updates(self) -> list[dict[str, Any]]:
        """The visible history as updates: ``shown`` parsed, then ``held`` (what
        :func:`refagent.persistence.recorder.replay` folds into what a load sends)."""
        shown = [json.loads(line)["params"]["update"] for line in self.shown.splitlines()]
        return [*shown, *self.held]

    def plan_updates(self) -> list[dict[str, Any]]:
        """The plan updates of the visible history, in order (``plan``, ``plan_update``, ``plan_removed``):
        what a loaded session's plans start from. Only their lines of ``shown`` are parsed."""
        shown = [json.loads(line)["params"]["update"] for line in self.shown.splitlines() if PLAN in line]
        return [u for u in (*shown, *self.held) if str(u.get("sessionUpdate")).startswith("plan")]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.model_state()[0]

    @property
    def changes(self) -> list[dict[str, Any]]:
        return self.model_state()[1]

    def model_state(self) -> ModelState:
        """The model-facing conversation and the changes ``/undo`` can restore, parsed once (the bulk of a
        long session's file: call it off the event loop)."""
        if self._model is None:
            data = self.data
            if data is None:
                try:
                    data = Path(self.source).read_bytes()
                except OSError as exc:
                    log.warning("cannot read the conversation of %s: %s", self.source, exc)
                    data = b""
            self._model = _fold_model(data, self.source)
        return self._model

    def summary(self) -> dict[str, Any]:
        """The ``SessionInfo`` of ``session/list``."""
        info: dict[str, Any] = {"sessionId": self.session_id, "cwd": self.cwd}
        if self.additional_directories:
            info["additionalDirectories"] = self.additional_directories
        if self.title:
            info["title"] = one_line(self.title)  # saved by any version, or edited: shown to a person
        if self.updated_at or self.created_at:
            info["updatedAt"] = self.updated_at or self.created_at
        if self.archived:
            info["archived"] = True
        return info


def read_session(path: Path, session_id: str) -> StoredSession | None:
    """A session's state and its visible history from its files (``path``: its record file); None if the
    record file cannot be read, is not ``session_id``'s, or does not start with a session record. Reads
    the replay file whole, the record file's start and end only, and parses neither whole."""
    replay_path = path.with_suffix(".replay")
    replayable = True
    try:
        shown = replay_path.read_bytes()
    except FileNotFoundError:
        shown, replayable = b"", False
    except OSError as exc:
        log.warning("cannot read %s (its history is not replayed): %s", replay_path, exc)
        shown = b""
    stored = read_records(path, replayable=replayable)
    if stored is None or stored.session_id != session_id:
        return None
    if stored.replayed is not None:  # what a crash left after the hold is among the held updates
        shown = shown[: stored.replayed]
    if shown and not shown.endswith(b"\n"):
        shown = shown[: shown.rfind(b"\n") + 1]  # a last line cut short
    stored.shown = _sendable(_checked(shown, replay_head(session_id), str(replay_path)))
    return stored


def _sendable(shown: bytes) -> bytes:
    """``shown`` with its lines that may hold a lone surrogate escape (written before the agent cleaned
    what it sends: a strict client rejects such a line) encoded again, cleaned; ``shown`` itself when
    none may (one scan)."""
    if b"\\ud" not in shown:
        return shown
    lines = shown.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if b"\\ud" in line:
            with contextlib.suppress(ValueError):  # damaged inside: sent as it is (see refagent.persistence.records)
                lines[index] = jsonrpc.encode(json.loads(line))
    return b"".join(lines)


def fold(lines: Sequence[bytes | str], source: str = "", *, replayable: bool = True) -> StoredSession | None:
    """Fold record lines into a :class:`StoredSession` (:func:`fold_bytes` on them joined)."""
    data = b"\n".join(s.encode("utf-8", errors="surrogatepass") if isinstance(s, str) else s for s in lines)
    return fold_bytes(data, source, replayable=replayable)


def fold_bytes(data: bytes, source: str = "", *, replayable: bool = True) -> StoredSession | None:
    """What a record file's bytes say (:func:`read_records`)."""
    return _fold(Tail(data), source, replayable)


def read_records(path: Path, *, replayable: bool = True) -> StoredSession | None:
    """What a record file says, its replay file aside: the session record, the last ``meta``, and the
    updates held since an unreleased ``hold``, read from the start and the end of the file, as far back
    as those records are (no record's JSON holds a raw line break, so ``\n{"kind":`` starts a record).
    With ``replayable`` False (the session has no replay file: an older agent's), every record is read,
    every update held. Bad lines are skipped (a crash can cut the last). Lines end at ``\n`` only: records
    hold text with U+2028 or U+0085 unescaped, where ``str.splitlines`` would cut them. None if the file
    cannot be read or does not start with a session record."""
    try:
        with path.open("rb") as file:
            if not replayable:
                return fold_bytes(file.read(), str(path), replayable=False)
            return _fold(Tail(b"", file), str(path), replayable)
    except FileNotFoundError:  # no such session (a load of an unknown id): nothing to warn about
        return None
    except OSError as exc:
        log.warning("skipping unreadable session file %s: %s", path, exc)
        return None


class Tail:
    """A record file (or its bytes), read from its end as far back as searches need: ``data`` holds its
    bytes from ``start`` to its end. Positions are the file's."""

    def __init__(self, data: bytes, file: IO[bytes] | None = None) -> None:
        self._file = file
        self.data = data
        self.start = file.seek(0, os.SEEK_END) if file is not None else 0

    @property
    def whole(self) -> bool:
        """Whether ``data`` is all of it, given rather than read."""
        return self._file is None

    def rfind(self, pattern: bytes, end: int | None = None) -> int:
        """Where ``pattern`` last begins before ``end`` (None: the end of the file); -1 if nowhere."""
        while True:
            stop = len(self.data) if end is None else end - self.start
            if stop > 0:
                at = self.data.rfind(pattern, 0, stop)
                if at >= 0:
                    return self.start + at
            if not self._extend():
                return -1

    def find(self, pattern: bytes, start: int) -> int:
        """Where ``pattern`` first begins at or after ``start`` (which is in ``data``); -1 if nowhere."""
        at = self.data.find(pattern, start - self.start)
        return at if at < 0 else self.start + at

    def line(self, at: int) -> bytes:
        """The line after the line break at ``at``."""
        begin = at + 1 - self.start
        end = self.data.find(b"\n", begin)
        return self.data[begin : len(self.data) if end < 0 else end]

    def head(self) -> bytes:
        """The file's first line."""
        if self._file is None or self.start == 0:
            return self.line(-1)
        self._file.seek(0)
        first = b""
        while b"\n" not in first and len(first) < self.start:
            block = self._file.read(1 << 16)
            if not block:
                break
            first += block
        return first.split(b"\n", 1)[0]

    def _extend(self) -> bool:
        if self._file is None or self.start == 0:
            return False
        start = max(0, self.start - max(1 << 16, len(self.data)))  # doubling: the whole file read at most twice
        self._file.seek(start)
        self.data = self._file.read(self.start - start) + self.data
        self.start = start
        return True


def _parse(line: bytes | memoryview) -> Any:
    """One record line as JSON; raises ValueError. Invalid UTF-8 is replaced, as a text read would."""
    return json.loads(str(line, "utf-8", "replace"))


def _fold(tail: Tail, source: str, replayable: bool) -> StoredSession | None:
    try:
        record = _parse(tail.head())
    except ValueError:
        record = None
    if (
        not isinstance(record, dict)
        or record.get("kind") != "session"
        or not isinstance(record.get("sessionId"), str)
        or not isinstance(record.get("cwd"), str)
    ):
        log.warning("%s: does not start with a session record; skipping the file", source)
        return None
    stored = StoredSession(
        session_id=record["sessionId"],
        cwd=record["cwd"],
        additional_directories=[d for d in _list(record.get("additionalDirectories")) if isinstance(d, str)],
        created_at=str(record.get("createdAt", "")),
        source=source,
        data=tail.data if tail.whole else None,
    )
    corrupt: list[int] = []
    try:
        if replayable:
            _last_state(tail, stored, corrupt)
            hold = tail.rfind(_HOLD)
            if hold < 0 or tail.find(_RELEASE, hold) >= 0:
                return stored  # every update is in the replay file
        else:
            hold = 0  # an older agent's file: every record is read, every update held
        stored.replayed = 0
        for record in _records(tail.data, hold - tail.start, corrupt):
            kind = record.get("kind")
            if kind == "hold" and isinstance(record.get("replayed"), int):
                stored.replayed = record["replayed"]
            elif kind == "update" and isinstance(record.get("update"), dict):
                stored.held.append(record["update"])
            elif kind == "meta" and not replayable:  # older files: each holds what changed, in any JSON form
                stored.title = _text(record, "title", stored.title)
                stored.mode_id = _text(record, "modeId", stored.mode_id)
                stored.profile_id = _text(record, "profileId", stored.profile_id)
                stored.updated_at = _text(record, "updatedAt", stored.updated_at)
            elif kind == "turn" and isinstance(record.get("turn"), int):  # older files count turns so
                stored.turns = max(stored.turns, record["turn"])
        return stored
    finally:
        if corrupt:  # one line per file, however many records are bad
            log.warning("%s: skipped %d corrupt record(s), the first at byte %d", source, len(corrupt), corrupt[0])


def _records(
    data: bytes, start: int, corrupt: list[int], only: tuple[bytes, ...] | None = None
) -> Iterator[dict[str, Any]]:
    """The records of ``data`` from the line at ``start`` (or the line break before it) on. A line that is
    not a JSON object is skipped, and its position added to ``corrupt`` if it is not JSON at all. With
    ``only`` (record prefixes), a line this agent wrote (``{"kind":"`` first) of another kind is skipped
    without being parsed: the quick way through the bulk of a file."""
    find, starts, size = data.find, data.startswith, len(data)
    pos = start + 1 if data[start : start + 1] == b"\n" else start
    while pos < size:
        end = find(b"\n", pos)
        if end < 0:
            end = size
        begin, pos = pos, end + 1
        if only is not None and starts(_RECORD, begin, end) and not starts(only, begin, end):
            continue
        line = data[begin:end]
        if not line or line.isspace():
            continue
        try:
            record = _parse(line)
        except ValueError:
            corrupt.append(begin)
            continue
        if isinstance(record, dict):
            yield record


def _last_state(tail: Tail, stored: StoredSession, corrupt: list[int]) -> None:
    """The session's state from its ``meta`` records, read from the last back to one written whole (the
    first read, unless some hold only what changed): the last value of each field wins."""
    found: dict[str, Any] = {}
    end: int | None = None
    while len(found) < len(_STATE):
        at = tail.rfind(_META, end)
        if at < 0:
            break
        end = at
        try:
            record = _parse(tail.line(at))
        except ValueError:
            corrupt.append(at)
            continue
        for key, kind in _STATE.items():
            if key not in found and isinstance(record.get(key), kind):
                found[key] = record[key]
        if record.keys() >= _STATE.keys():
            # Written whole: those before it are older. The reasoning effort, the client's system prompt and
            # the archived mark are only in newer, whole records.
            found["archived"] = record.get("archived") is True
            effort = record.get("reasoningEffort")
            if isinstance(effort, str):
                found["reasoningEffort"] = effort
            prompt = record.get("systemPrompt")
            if isinstance(prompt, dict) and isinstance(prompt.get("mode"), str) and isinstance(prompt.get("text"), str):
                found["systemPrompt"] = (prompt["mode"], prompt["text"])
            break
    stored.title, stored.mode_id = found.get("title"), found.get("modeId")
    stored.profile_id, stored.updated_at = found.get("profileId"), found.get("updatedAt")
    stored.turns = found.get("turns", 0)
    stored.reasoning_effort = found.get("reasoningEffort")
    stored.system_prompt = found.get("systemPrompt")
    stored.archived = found.get("archived", False)


def _checked(shown: bytes, head: bytes, source: str) -> bytes:
    """``shown`` if each of its lines is one of the session's notifications, as far as a quick look can
    tell: each begins with ``head`` and ends with ``}}``, for each line break but the last is one of
    ``}}\n`` + ``head`` (``count`` of a pattern that long, and ``find`` of the line breaks, are fast; more
    than a line of Python per line is not). Else the lines that are, each parsed to make sure."""
    lines, pos, find = 0, 0, shown.find
    while (pos := find(b"\n", pos) + 1) > 0:
        lines += 1
    if not shown or (shown.startswith(head) and shown.endswith(b"}}\n") and shown.count(b"}}\n" + head) == lines - 1):
        return shown
    kept = []
    for line in shown.splitlines(keepends=True):
        try:
            valid = line.startswith(head) and line.endswith(b"}}\n") and line.isascii() and json.loads(line)
        except ValueError:
            valid = False
        if valid:
            kept.append(line)
    log.warning("%s: skipped %d line(s) that are not this session's updates", source, shown.count(b"\n") - len(kept))
    return b"".join(kept)


def _fold_model(data: bytes, source: str) -> ModelState:
    """The conversation, the changes and the turns' starts from a record file's ``message``, ``history``,
    ``change``, ``undo`` and ``start`` records."""
    messages: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    starts: dict[int, int] = {}
    corrupt: list[int] = []
    for record in _records(data, 0, corrupt, only=_MODEL_PREFIXES):
        kind = record.get("kind")
        if kind == "message" and isinstance(record.get("message"), dict):
            messages.append(record["message"])
        elif kind == "history" and isinstance(record.get("messages"), list):
            messages = [m for m in record["messages"] if isinstance(m, dict)]
            starts = {}
        elif kind == "start" and isinstance(record.get("turn"), int) and isinstance(record.get("at"), int):
            if 0 <= record["at"] <= len(messages):
                starts[record["turn"]] = record["at"]
        elif kind == "change" and isinstance(record.get("path"), str) and isinstance(record.get("turn"), int):
            changes.append(record)
        elif kind == "undo":
            changes = [c for c in changes if c.get("turn") != record.get("turn")]
    if corrupt:  # one line per file (a cut line is the usual one)
        log.warning("%s: skipped %d corrupt conversation record(s)", source, len(corrupt))
    return ModelState(messages, changes, starts)


def _text(record: dict[str, Any], key: str, default: str | None) -> str | None:
    value = record.get(key, default)
    return value if isinstance(value, str) else default


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
