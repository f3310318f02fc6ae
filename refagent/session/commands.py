"""Slash commands (ACP "Slash Commands"): advertised with ``available_commands_update`` after
``session/new``, ``load`` and ``resume``, and recognised at the start of a prompt's first text block.

- ``/init``: write or improve ``AGENTS.md``: an ordinary turn with a prepared instruction, so its edits go
  through the usual permission-gated path.
- ``/compact [focus]``: summarise the older conversation, keep the recent turns.
- ``/undo``: restore the files the last turn changed, unless someone changed them since.
- ``/mode <id>``, ``/model <id>``: shortcuts for the config options.

Anything else that starts with ``/`` goes to the model as ordinary text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from refagent.acp.types import AvailableCommand
from refagent.errors import ToolError
from refagent.session.state import Session, text_digest
from refagent.tools.modes import MODES

_COMMAND = re.compile(r"^/([a-z][a-z0-9_-]*)(?:\s+(.*))?$", re.DOTALL)
NAMES = frozenset({"init", "compact", "undo", "mode", "model"})


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    argument: str


def available_commands(session: Session) -> list[AvailableCommand]:
    modes = " | ".join(mode.id for mode in MODES)
    models = " | ".join(p.id for p in session.profiles)
    return [
        {"name": "init", "description": "Write or improve AGENTS.md, the project's instructions for agents"},
        {
            "name": "compact",
            "description": "Summarise the older conversation to free context, keeping the recent turns",
            "input": {"hint": "what the summary should focus on (optional)"},
        },
        {"name": "undo", "description": "Restore the files changed by the last turn"},
        {"name": "mode", "description": "Switch the session's mode", "input": {"hint": modes}},
        {"name": "model", "description": "Switch the model", "input": {"hint": models}},
    ]


def parse(blocks: list[Any]) -> Command | None:
    """The command a prompt starts with, if it is one of ours."""
    first = blocks[0] if blocks else None
    if not isinstance(first, dict) or first.get("type") != "text" or not isinstance(first.get("text"), str):
        return None
    match = _COMMAND.match(first["text"].strip())
    if match is None or match.group(1) not in NAMES:
        return None
    return Command(match.group(1), (match.group(2) or "").strip())


def init_instruction(cwd: str) -> str:
    template = resources.files("refagent.prompts").joinpath("init.md").read_text(encoding="utf-8")
    return template.format(cwd=cwd)


# -- undo -------------------------------------------------------------------------------------------


async def undo(session: Session) -> str:
    """Restore what the last turn with changes changed. All or nothing: refuses (and lists them) if any
    file changed since the agent wrote it. Returns what to tell the user."""
    turns = [c["turn"] for c in session.changes]
    if not turns:
        return "There is nothing to undo: no turn of this session changed files."
    turn = max(turns)
    changes = [c for c in session.changes if c["turn"] == turn]
    unsupported = [c for c in changes if "unsupported" in c]
    # Changes are recorded before they are made (so a crash cannot lose the way back): each path's
    # first "before" is its state before the turn, and any recorded "after" is a state the agent left.
    files: dict[str, tuple[str | None, str | None]] = {}
    left: dict[str, list[str | None]] = {}
    left_digests: dict[str, set[str]] = {}
    for change in changes:
        if "unsupported" in change:
            continue
        before, _ = files.get(change["path"], (change["before"], None))
        files[change["path"]] = (before, change.get("after"))
        if "afterSha256" in change:  # a large text, recorded by its digest (Session.before_change)
            left_digests.setdefault(change["path"], set()).add(change["afterSha256"])
        else:
            left.setdefault(change["path"], []).append(change.get("after"))
    assert session.workspace is not None  # every session the manager opens has one
    context = session.workspace.context
    outside = []
    for path in files:
        try:  # the roots in force now (a load may have dropped a directory), and no link in the way
            if context.policy.check_write(path).path != path:
                outside.append(path)
        except ToolError:
            outside.append(path)
    if outside:
        listed = "\n".join(f"- {p}" for p in sorted(outside))
        return (
            "Undo refused: these files are outside the session's roots now (or a link leads elsewhere), so "
            f"undo may not write them:\n{listed}\nNothing was restored."
        )
    conflicts = []
    unchanged = []
    for path, (before, _) in files.items():
        try:
            current: str | None = await context.files.read_text(path)
        except FileNotFoundError:
            current = None
        except (ToolError, OSError):  # now a directory, unreadable, too big: not what the agent left there
            conflicts.append(path)
            continue
        if current == before:
            unchanged.append(path)  # the write never happened (it failed), or was undone by hand
        elif current not in left.get(path, []) and not (
            current is not None and text_digest(current) in left_digests.get(path, set())
        ):
            conflicts.append(path)
    if conflicts:
        listed = "\n".join(f"- {p}" for p in sorted(conflicts))
        return (
            "Undo refused: these files changed after the agent's last turn wrote them, and undoing would "
            f"lose those changes:\n{listed}\nNothing was restored."
        )
    for path in unchanged:
        del files[path]
    if not files and not unsupported:
        session.undone(turn)
        return "There is nothing to undo: the files the last turn meant to change are as they were before it."
    failed: dict[str, str] = {}
    for path, (before, _) in files.items():
        try:
            if before is None:
                if await context.disk.kind(path) is not None:
                    await context.disk.delete(path)
            else:
                await context.files.write_text(path, before)
        except (ToolError, OSError) as exc:  # the others are restored all the same; say which was not
            failed[path] = str(exc)
        context.reads.forget(path)
    session.undone(turn)
    files = {path: state for path, state in files.items() if path not in failed}
    restored = "\n".join(f"- {p}" for p in sorted(files))
    note = f"The user ran /undo: the files your turn {turn} changed are back as they were before it:\n{restored}"
    if unsupported:
        note += "\nNot undone (moves and deleted directories cannot be): " + ", ".join(c["path"] for c in unsupported)
    if failed:
        note += "\nCould not be restored: " + ", ".join(sorted(failed))
    session.history.append({"role": "user", "content": f"<system-reminder>{note}</system-reminder>"})
    message = f"Restored {len(files)} file(s) to their state before the last turn:\n{restored}" if files else ""
    if unsupported:
        skipped = ", ".join(c["path"] for c in unsupported)
        message += f"\nNot undone (moves and deleted directories cannot be): {skipped}"
    if failed:
        message += "\nCould not restore:\n" + "\n".join(f"- {p}: {why}" for p, why in sorted(failed.items()))
    return message.strip() + "\nChanges made by commands the agent ran are not tracked and were not undone."
