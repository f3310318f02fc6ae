"""Reading request params: strict where the schema requires, lenient where it does not.

Required fields that are missing or of the wrong type raise :class:`InvalidParams` naming the field
(``-32602``). Optional fields follow the schema's ``x-deserialize-default-on-error`` hint: ``null``, absent
or malformed all read as the default, so a client with a slightly different idea of an optional field
still works.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from refagent.acp.errors import InvalidParams

T = TypeVar("T")

_TYPE_NAMES = {str: "a string", list: "an array", dict: "an object", bool: "a boolean", int: "an integer"}


def required(params: Mapping[str, Any], name: str, kind: type[T]) -> T:
    """The value of a required field, checked against ``kind``."""
    if name not in params or params[name] is None:
        raise InvalidParams(f"Invalid params: missing required field '{name}'")
    value = params[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidParams(f"Invalid params: '{name}' must be {_TYPE_NAMES.get(kind, kind.__name__)}")
    return value


def optional(params: Mapping[str, Any], name: str, kind: type[T], default: T) -> T:
    """The value of an optional field, or ``default`` when it is absent, null or of the wrong type."""
    value = params.get(name)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    return default


def absolute_path(params: Mapping[str, Any], name: str) -> str:
    """A required absolute path (ACP: "All file paths MUST be absolute")."""
    path = required(params, name, str)
    if not os.path.isabs(path):
        raise InvalidParams(f"Invalid params: '{name}' must be an absolute path, got {path!r}")
    if "\0" in path:
        raise InvalidParams(f"Invalid params: '{name}' contains a NUL byte")
    return path


def absolute_paths(params: Mapping[str, Any], name: str) -> list[str]:
    """An optional list of absolute paths; any relative entry is an error (it would widen the sandbox)."""
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidParams(f"Invalid params: '{name}' must be an array of absolute paths")
    paths: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not os.path.isabs(item) or "\0" in item:
            raise InvalidParams(f"Invalid params: '{name}[{index}]' must be an absolute path")
        paths.append(item)
    return paths
