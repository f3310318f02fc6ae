"""The config file: where it is, reading its TOML, and taking values out of it checked.

Where (:func:`choose_path`): ``--config PATH``, else ``$REFAGENT_CONFIG``, else ``config.toml`` in
``refagent.dirs.user_dir("config")`` (``~/.config/refagent/config.toml`` on Linux). A missing default
file is fine (:func:`read_table` returns None); a missing file that was named explicitly is an error.

Works with a trimmed environment (no ``HOME``, as some ACP clients start agents): without a usable config
directory there is simply no default file, and a ``~`` that cannot be expanded is left as it is.

Every failure is a :class:`~refagent.errors.ConfigError` that names the file (and the table) and says what
is wrong, for the user to read: the agent shows it at the first prompt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from refagent.dirs import user_dir
from refagent.errors import ConfigError
from refagent.logs import logger

__all__ = ["CONFIG_ENV", "choose_path", "config_path", "default_config_path", "read_table", "strings", "typed"]

CONFIG_ENV = "REFAGENT_CONFIG"
"""The environment variable that names the config file (below ``--config``, above the default one)."""


def default_config_path() -> str | None:
    """``config.toml`` in the user config directory, or ``None`` when there is no usable one."""
    try:
        directory = user_dir("config")
    except Exception as exc:  # a trimmed environment: no HOME, no passwd entry...
        logger(__name__).debug("no user config directory: %s", exc)
        return None
    # Without HOME, expanduser() can leave "~" in place: a relative path would depend on the cwd.
    return os.path.join(directory, "config.toml") if os.path.isabs(directory) else None


def choose_path(flag: str | None, env: Mapping[str, str]) -> tuple[str | None, bool]:
    """The config file for ``flag`` (``--config``) and ``env``, and whether it was named (by the flag or
    ``$REFAGENT_CONFIG``, blank values counting as unset) rather than the default one; ``(None, False)``
    when nothing names one and there is no user config directory. A ``~`` is expanded (left as it is
    without a home directory)."""
    named = (flag or "").strip() or env.get(CONFIG_ENV, "").strip()
    if not named:
        return default_config_path(), False
    return os.path.expanduser(named), True


def config_path(flag: str | None, env: Mapping[str, str]) -> str | None:
    """The config file :func:`refagent.config.load` reads for ``flag`` and ``env`` (it may not exist yet:
    ``refagent login`` writes it); ``None`` when there is no user config directory and none was named."""
    return choose_path(flag, env)[0]


def read_table(path: str, explicit: bool) -> dict[str, Any] | None:
    """The file's TOML as a table; ``None`` when it does not exist and was not named (``explicit``).
    Raises :class:`ConfigError` for a named file that does not exist, one that cannot be read, or one that
    is not valid UTF-8 TOML."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such config file") from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    import tomllib  # here: only when there is a file: not before the first answer without one (3.4 ms)

    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def typed(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    """``table[key]`` checked against ``kind`` (``str``, ``int``, ``float`` or ``bool``; an int is a fine
    float, a bool is no int); ``None`` when missing. Raises :class:`ConfigError` naming ``where``."""
    value = table.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: {key} must be {KIND_NAMES[kind]}, not {value!r}")
    return value


KIND_NAMES = {
    str: "a string",
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "a table",
}
"""How :func:`typed` names each kind of value in its errors."""


def strings(table: Mapping[str, Any], key: str, where: str) -> list[str]:
    """``table[key]`` checked to be a list of strings (missing: empty). Raises :class:`ConfigError`."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: {key} must be a list of strings, not {value!r}")
    return value
