"""Slash commands (ACP "Slash Commands"): advertised with ``available_commands_update`` after
``session/new``, ``load`` and ``resume``, and recognised at the start of a prompt's first text block.

- ``/init``: write or improve ``AGENTS.md``: an ordinary turn with a prepared instruction, so its edits go
  through the usual permission-gated path.
- ``/compact [focus]``: summarise the older conversation, keep the recent turns.
- ``/undo``: restore the files the last turn changed, unless someone changed them since.
- ``/rewind [N]``: list the turns (none given), or take the files and the conversation back to before
  turn ``N`` (:mod:`refagent.session.rewind`).
- ``/jobs``: list the background commands; ``/stop [job | all]``: stop one, or all of them (the way the user
  stops them: ``session/cancel`` leaves them running, :mod:`refagent.tools.jobs`).
- ``/mode <id>``, ``/model <id>``: shortcuts for the config options.
- the user's own prompt commands (:mod:`refagent.session.prompt_commands`): an ordinary turn with the
  command's prompt, its arguments in it.
- ``/mcp``: the session's MCP servers (the editor's, the config file's, the project's allowed ones), each
  with its state and its tools.

Anything else that starts with ``/`` goes to the model as ordinary text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from refagent.acp.text import one_line
from refagent.acp.types import AvailableCommand, ContentBlock
from refagent.session.prompt_commands import PromptCommand
from refagent.session.rewind import rewind_to, turns_list
from refagent.session.state import Session
from refagent.session.undo import restore_last_turn
from refagent.tools.modes import MODES

_COMMAND = re.compile(r"^/([a-z][a-z0-9_-]*)(?:\s+(.*))?$", re.DOTALL)
NAMES = frozenset({"init", "compact", "undo", "rewind", "jobs", "stop", "mode", "model", "mcp"})


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
        {
            "name": "rewind",
            "description": "Take the files and the conversation back to before an earlier turn",
            "input": {"hint": "the turn's number (none: list the turns)"},
        },
        {"name": "jobs", "description": "List the commands running in the background"},
        {
            "name": "stop",
            "description": "Stop background commands",
            "input": {"hint": "a job's id, such as job-1 (none: all of them)"},
        },
        {"name": "mode", "description": "Switch the session's mode", "input": {"hint": modes}},
        {"name": "model", "description": "Switch the model", "input": {"hint": models}},
        {"name": "mcp", "description": "List the MCP servers, their state and their tools"},
        *(_advertised(command) for command in session.prompt_commands),
    ]


def _advertised(command: PromptCommand) -> AvailableCommand:
    """A prompt command as the editor lists it: its name, description and, if it takes any, its input hint."""
    entry: AvailableCommand = {"name": command.name, "description": command.description}
    if command.hint:
        entry["input"] = {"hint": command.hint}
    return entry


def parse(blocks: Sequence[ContentBlock], own: Sequence[PromptCommand] = ()) -> Command | None:
    """The command a prompt starts with, if it is one of ours or of ``own`` (the user's prompt commands)."""
    first = blocks[0] if blocks else None
    text = first.get("text") if first is not None and first.get("type") == "text" else None
    if not isinstance(text, str):
        return None
    match = _COMMAND.match(text.strip())
    if match is None or (match.group(1) not in NAMES and all(c.name != match.group(1) for c in own)):
        return None
    return Command(match.group(1), (match.group(2) or "").strip())


def init_instruction(cwd: str) -> str:
    template = resources.files("refagent.prompts").joinpath("init.md").read_text(encoding="utf-8")
    return template.format(cwd=cwd)


async def undo(session: Session) -> str:
    """``/undo``: put back the files of the session's last turn with changes, through its workspace as it is
    now (:func:`refagent.session.undo.restore_last_turn` has the contract). Returns what to tell the user."""
    assert session.workspace is not None  # every session the manager opens has one
    return await restore_last_turn(session.undo_log, session.workspace.context, session.history)


async def rewind(session: Session, argument: str) -> str:
    """``/rewind``: the turns it can go back to (no argument), or back to before turn ``argument``
    (:mod:`refagent.session.rewind` has the contract). Returns what to tell the user."""
    assert session.workspace is not None  # every session the manager opens has one
    if not argument:
        return turns_list(session.history, session.undo_log)
    if not argument.isdigit():
        return f"/rewind takes a turn's number, such as /rewind 3 (not {argument!r}); /rewind alone lists them."
    return await rewind_to(int(argument), session.history, session.undo_log, session.workspace.context)


def mcp_list(session: Session) -> str:
    """``/mcp``: the session's MCP servers, each with its state (and why, when it failed) and its tools."""
    hub = session.mcp
    if hub is None:
        return (
            "No MCP servers in this session: the editor gave none, and the config file names none "
            "([mcp_servers.NAME] tables, or project_mcp_servers for a project's .mcp.json).\n"
        )
    tools: dict[str, list[str]] = {}
    for tool in hub.tools():
        link, remote = getattr(tool, "link", None), getattr(tool, "remote_name", None)
        if link is not None and isinstance(remote, str):
            tools.setdefault(link.name, []).append(remote)
    lines = []
    for server in hub.status():
        why = f" ({one_line(server.problem)})" if server.problem else ""
        named = ", ".join(sorted(tools.get(server.name, []))) or "none"
        lines.append(f"- {server.name}: {server.state}{why}; tools: {named}")
    return "MCP servers:\n" + "\n".join(lines) + "\n"


def jobs_list(session: Session) -> str:
    """``/jobs``: the session's background commands and how each stands."""
    jobs = session.jobs
    entries = jobs.entries() if jobs is not None else []
    if not entries:
        return "No commands have been started in the background in this session."
    lines = [f"- {entry.id}: `{one_line(entry.command)}`: {entry.state()}" for entry in entries]
    return "Background commands:\n" + "\n".join(lines) + "\n"


async def stop_jobs(session: Session, argument: str) -> str:
    """``/stop [job | all]``: stop one background command, or (none given, or ``all``) every one running."""
    jobs = session.jobs
    if jobs is None:
        return "No commands have been started in the background in this session."
    if argument and argument != "all":
        entry = jobs.get_or_none(argument)
        if entry is None:
            known = ", ".join(e.id for e in jobs.entries()) or "none"
            return f"There is no background command {one_line(argument)!r} (known: {known})."
        if not entry.running:
            return f"{entry.id} has ended already: {entry.state()}."
        await jobs.stop(entry, "user")
        return f"Stopped {entry.id} (`{one_line(entry.command)}`)."
    running = [entry for entry in jobs.entries() if entry.running]
    if not running:
        return "No background command is running."
    for entry in running:
        await jobs.stop(entry, "user")
    return "Stopped " + ", ".join(f"{entry.id} (`{one_line(entry.command)}`)" for entry in running) + "."
