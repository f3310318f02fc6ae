"""Checking the model's arguments, and naming them in titles: shared by every tool module.

Contract: the runner (:mod:`refagent.tools.runner`) checks top-level types, enums and required names
against a tool's JSON schema; the ``arg_*`` functions re-check what a schema cannot say (non-empty,
ranges) and keep ``prepare()`` safe when it is called directly. A bad argument is a
:class:`~refagent.errors.ToolError` naming it, for the model to fix. :func:`shown` and :func:`plural`
make the words of titles and summaries.
"""

from __future__ import annotations

from typing import Any

from refagent.errors import ToolError


def arg_str(args: dict[str, Any], name: str, *, required: bool = True, empty: bool = False) -> str:
    value = args.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ToolError(f"Argument {name!r} must be a string.")
    if not empty and not value:
        raise ToolError(f"Argument {name!r} must not be empty.")
    return value


def arg_int(args: dict[str, Any], name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    # JSON has one number type; models send 10.0 for 10.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"Argument {name!r} must be an integer.")
    if not minimum <= value <= maximum:
        raise ToolError(f"Argument {name!r} must be between {minimum} and {maximum}, got {value}.")
    return value


def arg_bool(args: dict[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"Argument {name!r} must be true or false.")
    return value


def plural(count: int, noun: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def shown(value: Any, limit: int = 60) -> str:
    """A model-given string for a title: one line, shortened."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
