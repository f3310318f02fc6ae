"""Slash commands of the user's own: prompt files, expanded with their arguments into an ordinary turn.

Where they come from (the first of a name wins; a built-in command's name is never taken):

1. the user's: ``commands/`` in the config directory (``~/.config/refagent/commands/NAME.md`` on Linux);
2. the project's: ``.refagent/commands/NAME.md`` under the session's directory, **only** when the user
   trusts the project (``trusted_projects`` in the config file lists it, or a directory above it): a
   repository cannot give itself commands the user did not choose to run.

A command file is a prompt, never code: its text is sent to the model as the user's message (nothing in it
runs). It may start with a front matter of ``description:`` and ``argument-hint:`` lines between ``---``
lines; without a description, its first line is one. In its text, ``$ARGUMENTS`` is what the user typed
after the command, and ``$1`` ... ``$9`` its words; a text with neither gets the arguments appended.

A command's name is its file's name without ``.md``, in lower case, of letters, digits, ``-`` and ``_``;
other files are skipped, and so are files over :data:`MAX_BYTES` and those past the first :data:`MAX_COMMANDS`.
The editor hears them in ``available_commands_update`` with the built-in ones; when one runs, the thread
shows one line saying which file it came from and how it begins, so that what the model was sent is never
hidden from the user.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["MAX_BYTES", "MAX_COMMANDS", "PROJECT_DIR", "PromptCommand", "expand", "load", "trusted"]

PROJECT_DIR = os.path.join(".refagent", "commands")
"""A project's command files, under the session's directory (read only for a trusted project)."""
MAX_BYTES = 64 * 1024
MAX_COMMANDS = 100
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_WORD = re.compile(r"\$([1-9])")


@dataclass(frozen=True, slots=True)
class PromptCommand:
    name: str
    text: str
    """The prompt, front matter left out."""
    description: str
    hint: str
    """What the arguments are (the editor shows it as the input hint); empty: none expected."""
    source: str
    """The file it came from, as the user reads it (``~`` for the home directory)."""


def trusted(cwd: str, trusted_projects: Iterable[str]) -> bool:
    """Whether ``cwd`` is one of ``trusted_projects`` or under one (real paths compared)."""
    here = os.path.realpath(cwd)
    for project in trusted_projects:
        root = os.path.realpath(os.path.expanduser(project))
        if here == root or here.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


def load(directories: Sequence[str], reserved: Iterable[str]) -> list[PromptCommand]:
    """The commands of ``directories``, in order (the first of a name wins), none named as ``reserved``
    (the built-in commands'). A directory that does not exist has none; a file that cannot be read is skipped."""
    taken = set(reserved)
    commands: list[PromptCommand] = []
    for directory in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in names:
            name = entry[: -len(".md")].lower() if entry.endswith(".md") else ""
            if not _NAME.match(name) or name in taken or len(commands) >= MAX_COMMANDS:
                continue
            text = _read(os.path.join(directory, entry))
            if text is None:
                continue
            taken.add(name)
            commands.append(_parsed(name, text, _shown(os.path.join(directory, entry))))
    return commands


def expand(command: PromptCommand, arguments: str) -> str:
    """The prompt ``command`` sends for ``arguments`` (see the module docstring)."""
    words = arguments.split()
    text = command.text
    if "$ARGUMENTS" not in text and not _WORD.search(text):
        return f"{text}\n\n{arguments}" if arguments else text
    text = _WORD.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text)
    return text.replace("$ARGUMENTS", arguments)


def _read(path: str) -> str | None:
    """A regular file's text (not through a link: a project's link could point anywhere), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # a FIFO or a device: nothing to read
            return None
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return None
    return data.decode("utf-8", "replace")


def _parsed(name: str, raw: str, source: str) -> PromptCommand:
    text, fields = raw.replace("\r\n", "\n"), {}
    if text.startswith("---\n") and "\n---" in text[3:]:
        head, _, text = text[4:].partition("\n---")
        text = text.partition("\n")[2]
        for line in head.splitlines():
            key, colon, value = line.partition(":")
            if colon:
                fields[key.strip().lower()] = value.strip().strip("\"'")
    text = text.strip()
    first = next((line.strip("# ").strip() for line in text.splitlines() if line.strip()), "")
    description = fields.get("description") or first[:100] or f"/{name}"
    return PromptCommand(name, text, description, fields.get("argument-hint", ""), source)


def _shown(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home != "~" and path.startswith(home + os.sep) else path
