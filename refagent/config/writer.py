"""Writing the config file that :func:`refagent.config.load` reads: what ``refagent login`` saves
(:func:`set_profile`) and what ``refagent logout``, or the agent's ACP ``logout``, removes (:func:`forget_keys`).
Only they import this module (the agent itself, only when asked to ``logout``).

The standard library reads TOML (:mod:`tomllib`) but does not write it: :func:`dumps` writes everything
:mod:`tomllib` returns (tables, arrays of tables, strings, integers, floats, booleans, dates and times,
arrays, inline tables), and ``tomllib.loads(dumps(data)) == data``.

A change keeps the rest of the file. It is made twice: on the data (what the file means), and as a
line-level edit of the text that keeps its comments and layout. The edit is written only if :mod:`tomllib`
reads it back as exactly the changed data; otherwise (a file laid out in a way the edit does not follow:
inline tables, dotted keys, multi-line values where the change falls) the file is written again from the
data by :func:`dumps`, with the same content and without its comments.

Writes are atomic (a temporary file in the same directory, flushed, then renamed over the file; a symlink is
followed, so the file it points to is the one replaced) and leave the file readable by its owner only
(0600): it may hold API keys. A directory that has to be made is made 0700.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from refagent.config.file import config_path as named_path
from refagent.errors import ConfigError

__all__ = ["DIR_MODE", "FILE_MODE", "config_path", "dumps", "forget_keys", "read", "set_profile", "write"]


def config_path(flag: str | None, env: Mapping[str, str]) -> Path | None:
    """The config file ``refagent login`` writes for ``flag`` (``--config``) and ``env``
    (:func:`refagent.config.file.config_path`, as a path); None when there is nowhere to write one."""
    found = named_path(flag, env)
    return Path(found) if found is not None else None


FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
PROFILES: Final = "profiles"
DEFAULT_PROFILE: Final = "default_profile"

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_MUST_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


# -- the serializer -----------------------------------------------------------------------------------


def dumps(data: Mapping[str, Any]) -> str:
    """``data`` as a TOML document. Raises :class:`TypeError` for a value TOML has no type for, and
    :class:`ValueError` for one it cannot hold (a lone surrogate, a time of day with a time zone)."""
    out: list[str] = []
    _table(out, (), data, header=None)
    return "".join(out)


def _table(out: list[str], path: tuple[str, ...], table: Mapping[str, Any], header: str | None) -> None:
    """Write ``table`` at ``path``: its header (``"[]"`` a table, ``"[[]]"`` an element of an array of
    tables, ``None`` the document itself), its key/value pairs, then its tables."""
    plain = [(k, v) for k, v in table.items() if not isinstance(v, Mapping) and not _is_table_array(v)]
    nested = len(plain) < len(table)
    if header == "[[]]" or (header == "[]" and (plain or not nested)):  # else the sub-tables define it
        if out:
            out.append("\n")
        dotted = ".".join(_key(k) for k in path)
        out.append(f"[[{dotted}]]\n" if header == "[[]]" else f"[{dotted}]\n")
    out.extend(f"{_key(k)} = {_value(v)}\n" for k, v in plain)
    for k, v in table.items():
        if isinstance(v, Mapping):
            _table(out, (*path, k), v, "[]")
        elif _is_table_array(v):
            for item in v:
                _table(out, (*path, k), item, "[[]]")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, Mapping) for item in value)


def _key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a TOML key must be a string, not {key!r}")
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    if _SURROGATE.search(text):
        raise ValueError(f"a lone surrogate cannot be written to TOML: {text!r}")
    escaped = _MUST_ESCAPE.sub(lambda m: _ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04X}", text)
    return f'"{escaped}"'


def _value(value: Any) -> str:
    if isinstance(value, bool):  # before int: a bool is an int
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # always has a "." or an exponent: it reads back as a float, the same one
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        offset = value.utcoffset()
        if offset is not None and offset % dt.timedelta(minutes=1):
            raise ValueError(f"a TOML time offset is whole minutes, not {offset}")
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise ValueError(f"a TOML time of day has no time zone: {value!r}")
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"TOML has no type for {value!r}")


# -- reading and writing --------------------------------------------------------------------------------


def read(path: Path) -> dict[str, Any]:
    """The config file's data (empty if there is no file). Raises :class:`ConfigError` if it cannot be read."""
    return _parse(path, _text(path))


def write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, atomically, readable by its owner only (see the module docstring)."""
    target = Path(os.path.realpath(path))
    try:
        _make_directories(target.parent)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
                os.fchmod(file.fileno(), FILE_MODE)
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the config file: {exc.strerror or exc}") from None
    with contextlib.suppress(OSError):  # the rename itself survives a crash
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _make_directories(directory: Path) -> None:
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(made, DIR_MODE)  # whatever the umask


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: it is not UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


# -- the changes ----------------------------------------------------------------------------------------


def set_profile(path: Path, profile_id: str, values: Mapping[str, Any], *, default: bool = True) -> None:
    """Set ``values`` in the profile ``profile_id`` of the config file at ``path`` (a value of ``None``
    removes that key), making the profile if there is none, and make it the ``default_profile`` if
    ``default``. Everything else in the file stays. Raises :class:`ConfigError` if the file cannot be read
    (or is not TOML), if ``profiles`` or the profile is not a table there, or if it cannot be written."""
    text = _text(path)
    expected = _parse(path, text)
    profiles = expected.setdefault(PROFILES, {})
    entry = profiles.setdefault(profile_id, {}) if isinstance(profiles, dict) else None
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: profiles.{profile_id} is not a table; fix the file first")
    for key, value in values.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    if default:
        expected[DEFAULT_PROFILE] = profile_id

    document = _Document(text)
    section = document.section((PROFILES, profile_id))
    if section is None:
        new = {k: v for k, v in values.items() if v is not None}
        document.append(dumps({PROFILES: {profile_id: new}}))
    else:
        for key, value in values.items():
            section.set(key, value)
    if default:
        document.set_top(DEFAULT_PROFILE, profile_id)
    write(path, document.text_for(expected))


def forget_keys(path: Path | str) -> list[str]:
    """Remove the stored API keys (``api_key``) from the profiles of the config file at ``path``; return
    the ids of the profiles that had one, in the file's order (the keys themselves are never returned).

    Everything else stays, ``api_key = ""`` too ("this endpoint needs no key" is not a key). No file, or no
    key in it: nothing is written. Raises :class:`ConfigError` if the file cannot be read or written.
    """
    path = Path(path)
    text = _text(path)
    if not text:
        return []
    data = _parse(path, text)
    profiles = data.get(PROFILES)
    if not isinstance(profiles, dict):
        return []
    removed = [
        profile_id
        for profile_id, entry in profiles.items()
        if isinstance(entry, dict) and entry.get("api_key") not in (None, "")
    ]
    if not removed:
        return []
    expected = copy.deepcopy(data)
    document = _Document(text)
    for profile_id in removed:
        del expected[PROFILES][profile_id]["api_key"]
        section = document.section((PROFILES, profile_id))
        if section is not None:
            section.set("api_key", None)
    write(path, document.text_for(expected))
    return removed


# -- the line-level edit --------------------------------------------------------------------------------


@dataclass
class _Section:
    """The lines of one table: its header line first (none for the preamble), up to the next header."""

    lines: list[str]
    path: tuple[str, ...] | None
    """The header's key path; ``None`` for the preamble, the lines before the first header."""
    array: bool
    newline: str

    def set(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` on the line that holds it alone, or add a line (``None``: remove it)."""
        start = 0 if self.path is None else 1
        for i in range(start, len(self.lines)):
            if list(_pair(self.lines[i]) or ()) != [key]:
                continue
            if value is None:
                del self.lines[i]
            else:
                self.lines[i] = _replace_value(self.lines[i], key, value, self.newline)
            return
        if value is None:
            return
        content = [i for i in range(start, len(self.lines)) if _is_content(self.lines[i])]
        at = content[-1] + 1 if content else start
        if at and not self.lines[at - 1].endswith("\n"):
            self.lines[at - 1] += self.newline
        self.lines.insert(at, f"{_key(key)} = {_value(value)}{self.newline}")


class _Document:
    """A TOML text cut into sections at its table headers, to edit line by line."""

    def __init__(self, text: str) -> None:
        first, newline, _ = text.partition("\n")
        self.newline = "\r\n" if newline and first.endswith("\r") else "\n"
        self.preamble = _Section([], None, False, self.newline)
        self.sections = [self.preamble]
        self._add(text)

    def _add(self, text: str) -> None:
        for line in _lines(text):
            header = _header(line)
            if header is not None:
                self.sections.append(_Section([line], header[0], header[1], self.newline))
            else:
                self.sections[-1].lines.append(line)

    def section(self, path: tuple[str, ...]) -> _Section | None:
        """The table ``[path]``, if it has a header of its own (exactly one)."""
        found = [s for s in self.sections if s.path == path and not s.array]
        return found[0] if len(found) == 1 else None

    def append(self, text: str) -> None:
        """Add ``text`` (whole tables) at the end, after a blank line."""
        last = self.sections[-1].lines
        if last and not last[-1].endswith("\n"):
            last[-1] += self.newline
        if last and last[-1].strip():
            last.append(self.newline)
        self._add(text.replace("\n", self.newline))

    def set_top(self, key: str, value: Any) -> None:
        """Set a key of the document itself (in the preamble), a blank line before the first table."""
        self.preamble.set(key, value)
        lines = self.preamble.lines
        if len(self.sections) > 1 and lines and lines[-1].strip():
            lines.append(self.newline)

    def text_for(self, expected: Mapping[str, Any]) -> str:
        """The edited text if it reads back as ``expected``, else ``expected`` written anew."""
        text = "".join(line for section in self.sections for line in section.lines)
        try:
            if tomllib.loads(text) == expected:
                return text
        except tomllib.TOMLDecodeError:
            pass
        return dumps(expected)


def _lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` (only there: other line breaks may sit inside TOML strings)."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def _header(line: str) -> tuple[tuple[str, ...], bool] | None:
    """``(key path, is an array of tables)`` if ``line`` is a table header on its own, else ``None``."""
    if not line.lstrip().startswith("["):
        return None
    try:
        node: Any = tomllib.loads(line)
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        path.append(key)
    if node == {}:
        return tuple(path), False
    if node == [{}]:
        return tuple(path), True
    return None


def _pair(line: str) -> dict[str, Any] | None:
    """The data of ``line`` if it is a key/value pair complete on its own line, else ``None``."""
    if not _is_content(line) or line.lstrip().startswith("["):
        return None
    try:
        return tomllib.loads(line)
    except tomllib.TOMLDecodeError:
        return None


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _replace_value(line: str, key: str, value: Any, newline: str) -> str:
    """``line`` with ``key = value``, keeping its indentation and its comment."""
    indent = line[: len(line) - len(line.lstrip())]
    body = line.rstrip("\r\n")
    comment = ""
    old = tomllib.loads(line)
    for match in re.finditer("#", body):  # the comment starts at the first "#" outside the value
        before = body[: match.start()]
        with contextlib.suppress(tomllib.TOMLDecodeError):
            if tomllib.loads(before) == old:
                comment = body[len(before.rstrip()) :]
                break
    return f"{indent}{_key(key)} = {_value(value)}{comment}{newline}"
