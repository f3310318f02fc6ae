"""Checking the model's arguments, and naming them in titles: shared by every tool module.

Contract: the runner (:mod:`refagent.tools.runner`) checks top-level types, enums and required names
against a tool's JSON schema; the ``arg_*`` functions re-check what a schema cannot say (non-empty,
ranges, valid text) and keep ``prepare()`` safe when it is called directly. A bad argument is a
:class:`~refagent.errors.ToolError` naming it, for the model to fix. :func:`shown` and :func:`plural`
make the words of titles and summaries.

Valid text (:func:`check_text`, which :func:`arg_str` applies, by the :data:`TextKind` of the argument):
a NUL byte or a lone surrogate (a JSON ``\\ud800`` escape decodes to one) would reach the operating system
as a path, a glob, a ripgrep regex or a command line and make it raise (``ValueError: embedded null
byte``, ``UnicodeEncodeError``), or be changed on its way to the editor (a surrogate is sent as U+FFFD).
Refused here, once, they are a failed call the model can correct. The exception is how Python spells a
byte of a file name that is not UTF-8 (``surrogateescape``: the byte 0xff is ``\\udcff``): in a path or a
command line it names that file, as the system takes it.
"""

from __future__ import annotations

from typing import Any, Literal

from refagent.acp.text import one_line
from refagent.errors import ToolError

TextKind = Literal["text", "name", "content"]
"""What a string argument is, for :func:`check_text`:

- ``text``: a pattern, a question, anything else (custom tools' arguments): no NUL byte, no surrogate;
- ``name``: a path or a command line, which the system takes as bytes: no NUL byte, and no surrogate but
  the ``surrogateescape`` bytes U+DC80..U+DCFF (a name that is not UTF-8 needs them);
- ``content``: the text of a file (``write_file``'s ``content``, an edit's strings, a patch): a NUL byte is
  a character like any other; no surrogate (a file's text is written as UTF-8, which has none).
"""


def arg_str(
    args: dict[str, Any], name: str, *, required: bool = True, empty: bool = False, kind: TextKind = "text"
) -> str:
    """The string argument ``name`` (``""`` when absent and not ``required``); ToolError unless it is a
    string, non-empty unless ``empty``, and valid text of its ``kind`` (:func:`check_text`)."""
    value = args.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ToolError(f"Argument {name!r} must be a string.")
    if not empty and not value:
        raise ToolError(f"Argument {name!r} must not be empty.")
    check_text(name, value, kind)
    return value


def check_text(name: str, value: str, kind: TextKind = "text") -> None:
    """ToolError naming the argument ``name`` unless ``value`` is valid text of its ``kind`` (:data:`TextKind`)."""
    if not value.isascii():
        for index, char in enumerate(value):
            if "\ud800" <= char <= "\udfff" and not (kind == "name" and "\udc80" <= char <= "\udcff"):
                raise ToolError(
                    f"Argument {name!r} holds an unpaired surrogate (\\u{ord(char):04x} at character {index}), "
                    "which is not text: it has no UTF-8 form. Send valid Unicode."
                )
    nul = -1 if kind == "content" else value.find("\x00")
    if nul >= 0:
        raise ToolError(
            f"Argument {name!r} contains a NUL byte (at character {nul}), which no file name, pattern or "
            "command line can hold. Leave it out."
        )


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
    """A model-given string for a title: one line, its control characters made visible (an ESC shows as
    ``\\x1b``: :func:`~refagent.acp.text.one_line`), shortened to ``limit`` characters."""
    text = one_line(str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"
