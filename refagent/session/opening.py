"""What a session gets after the response that opened it (:meth:`refagent.session.manager.SessionManager._settle`):
where its MCP servers and prompt commands come from, the modules its workspace is built with (imported in
a worker thread, off the event loop), and the runners of its background tasks (its MCP servers, its file
watcher) and what they tell the user when they fail. Imported with the manager; what these functions
import, they import when called."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from refagent.acp import updates
from refagent.session.speaker import speaker
from refagent.session.state import Session
from refagent.settings import Settings

if TYPE_CHECKING:
    from refagent.mcp import McpHub
    from refagent.sandbox.seams import Watcher
    from refagent.session.prompt_commands import PromptCommand

log = logging.getLogger(__name__)


async def mcp_problem(session: Session, server: str, problem: str) -> None:
    """An MCP server failed: the user hears it (a notice, or a message in the thread), the log keeps it (at
    info: a warning would say it a second time where the agent's stderr is the user's, as in refagent run)."""
    log.info("MCP server %s: %s", server, problem)
    if session.notices:  # news about this run of the agent, not part of the conversation: not recorded
        await session.client.send_update(updates.notice("error", f"MCP server {server} failed", problem))
    else:
        await speaker(session.send_update)(f"MCP server {server}: {problem}\n")


async def project_servers_said(session: Session, said: str) -> None:
    """What the user should know of the project's ``.mcp.json``: servers it names that do not start, or why
    it cannot be read (a notice, or a message in the thread)."""
    log.info("the project's MCP servers: %s", said)
    if session.notices:
        await session.client.send_update(updates.notice("warning", "The project's MCP servers", said))
    else:
        await speaker(session.send_update)(f"The project's MCP servers: {said}\n")


async def run_mcp(hub: McpHub, scope: anyio.CancelScope) -> None:
    """A session's MCP servers, connected until the session closes or the agent exits."""
    with scope:
        try:
            await hub.run()
        except Exception:
            log.exception("the MCP servers stopped")


async def run_watcher(watcher: Watcher, scope: anyio.CancelScope) -> None:
    """Run a session's file watcher until the session closes. A watcher that fails costs the notes about
    changed files, nothing else."""
    with scope:
        try:
            await watcher.run()
        except Exception:
            log.exception("the file watcher stopped")


def session_servers(cwd: str, editors: Sequence[Any], settings: Settings) -> tuple[list[Any], str]:
    """A new session's MCP servers: the editor's, the config file's, and the project's ``.mcp.json`` ones the
    user allows by name, one per name (:func:`refagent.mcp.config.merged`); and what to tell the user of the
    project's file (servers it names that do not start, or why it cannot be read; empty: nothing). In a
    worker thread: it imports the workspace's modules (:func:`import_workspace`) and reads the file."""
    # here: in the worker thread, with the workspace's modules (refagent.mcp's package loads its hub)
    from refagent.mcp.config import PROJECT_FILE, ServerConfigError, merged, project_servers

    project: list[Any] = []
    said = ""
    try:
        project, others = project_servers(cwd, settings.project_mcp_servers)
        if others:
            said = (
                f"this project's {PROJECT_FILE} names {', '.join(others)}, which refagent does not start by itself: "
                "add the names you trust to project_mcp_servers in your config file."
            )
    except ServerConfigError as exc:
        said = str(exc)
    servers = merged(editors, settings.mcp_servers, project)
    import_workspace(bool(servers))
    return servers, said


def prompt_commands(cwd: str, settings: Settings) -> list[PromptCommand]:
    """A new session's prompt commands: the user's (``commands/`` beside the config file), then, for a project
    the user trusts (``trusted_projects``), the project's (:mod:`refagent.session.prompt_commands`)."""
    # here: in the worker thread, with the workspace's modules (after the session/new answer)
    from refagent.session.commands import NAMES
    from refagent.session.prompt_commands import PROJECT_DIR, load, trusted

    directories = []
    if settings.config_file is not None:
        directories.append(os.path.join(os.path.dirname(settings.config_file), "commands"))
    if trusted(cwd, settings.trusted_projects):
        directories.append(os.path.join(cwd, PROJECT_DIR))
    return load(directories, NAMES)


def import_workspace(mcp: bool) -> None:
    """Import what a session's workspace is built with and what its first prompt runs (the tools, the
    sandbox and its watcher, the editor backends, prompting; the MCP client side if ``mcp``). Called in a
    worker thread after a session's response, so the event loop serves on meanwhile; later calls find
    them loaded."""
    # here: the imports are the point (off the loop, after the first answer: SessionManager._settle)
    import refagent.session.prompting
    import refagent.session.workspace
    import refagent.tools.registry

    if mcp:
        import refagent.mcp  # noqa: F401
