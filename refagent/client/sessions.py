"""``refagent sessions list | show | delete``: the saved sessions, from a terminal.

    refagent sessions list [--all | --cwd DIR] [--json]
    refagent sessions show ID
    refagent sessions delete ID... | --older-than AGE [--all | --cwd DIR] [--dry-run]

Like ``refagent run``, this is an ordinary ACP client of a ``refagent`` process it starts
(:mod:`refagent.client.agent_process`): the agent owns the sessions, their files and their index (which
it keeps in step with the files, shared by every agent on the machine), and the commands only ask it.

- ``list``: ``session/list`` with this directory's ``cwd`` (``--all``: without, which lists every
  directory's), every page, newest first. One line a session: its id, when it was last updated (relative,
  "3 min ago", then a local date), its directory with ``--all``, its title. ``--json``: the agent's
  ``SessionInfo`` objects, as a JSON array.
- ``show ID``: ``session/load`` in the session's own directory (from the listing). The agent replays the
  history as ``session/update`` notifications before it answers; they are drawn as ``refagent run``
  draws a live session (:class:`refagent.client.render.Renderer`): the user's prompts, the agent's
  messages and thoughts, tool calls with their titles, statuses, diffs and output, plans. No colors
  unless stdout is a terminal. Then ``session/close``: nothing runs on.
- ``delete ID...``: ``session/delete`` of each, once all of them are found (an unknown id deletes
  nothing); ``--older-than 30d`` (``h``, ``d``, ``w``): every session of this directory (``--all``: of
  every directory) last updated longer ago than that, from the listing's ``updatedAt``. Each deleted
  session is printed, then how many; ``--dry-run`` prints what would go.

An id may be given by its start, if only one session's id starts so. Exit codes: 0 done; 1 an unknown
id, or the agent failed (did not start, answered an error, cannot do it), with the reason on stderr;
2 bad usage; 141 a closed stdout (``| head``), which ends it quietly, as in ``refagent run``.

The agent started here is ``python -m refagent --demo`` (or ``--agent``): these commands never prompt a
model, so no model configuration is read, and neither a broken config file nor a profile that lacks
its key (which makes ``session/load`` answer "authentication required") stands in the way. Where
sessions are kept does not depend on the configuration: the user data directory
(:func:`refagent.settings.sessions_root`). Its log level is ``error`` unless ``--log-level`` says: a
session opened only to be shown gets a workspace in its directory, and what the agent would warn about
it (a directory that is gone) is no news here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import anyio

from refagent.acp.connection import Connection
from refagent.acp.errors import RESOURCE_NOT_FOUND, ConnectionClosed, MethodNotFound, RequestError
from refagent.acp.text import one_line, visible
from refagent.client.agent_process import AgentStartError, initialize, open_agent
from refagent.client.opening import (
    NoSuchSession,
    NotSupported,
    SessionError,
    can_load,
    find_session,
    list_sessions,
    session_capability,
)
from refagent.client.render import EXIT_OUTPUT_CLOSED, Renderer, point_at_devnull, use_color
from refagent.client.run import replace_unshowable
from refagent.settings import sessions_root

EXIT_OK = 0
EXIT_FAILED = 1
AGE_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}
"""The units of ``--older-than``, in seconds."""
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")


# -- times ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Age:
    seconds: float
    text: str
    """As the user wrote it."""


def parse_age(text: str) -> Age:
    """``--older-than``: ``30d``, ``12h``, ``2w`` (a number and a unit). The ``argparse`` type: anything
    else is bad usage."""
    match = _AGE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age: a number and h, d or w (e.g. 30d)")
    return Age(float(match.group(1)) * AGE_UNITS[match.group(2)], text.strip())


def parse_stamp(stamp: object) -> float | None:
    """An ACP ``updatedAt`` (ISO 8601, ``2025-01-31T09:15:00.123Z``) as a POSIX time; None if it is not one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:  # no zone: taken as UTC, as the agent writes them
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def when(stamp: object, now: float) -> str:
    """How long ago ``stamp`` was, for a person: "just now", "3 min ago", "5 h ago", "2 days ago"; past a
    week (or in the future: another machine's clock), the local date and time."""
    moment = parse_stamp(stamp)
    if moment is None:
        return "?"
    ago = now - moment
    if -60 < ago < 60:
        return "just now"
    if 0 < ago < 3600:
        return f"{int(ago // 60)} min ago"
    if 0 < ago < 86400:
        return f"{int(ago // 3600)} h ago"
    if 0 < ago < 7 * 86400:
        days = int(ago // 86400)
        return f"{days} day{'s' if days > 1 else ''} ago"
    return local_time(moment)


def local_time(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(moment))


# -- one line a session -----------------------------------------------------------------------------


def home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home.rstrip("/") + "/")):
        return "~" + path[len(home.rstrip("/")) :]
    return path


def session_lines(sessions: list[dict[str, Any]], now: float, *, directories: bool = False) -> list[str]:
    """A table without a header, one line a session: id, when, (directory,) title, in columns."""
    rows = [
        [
            one_line(str(s.get("sessionId", ""))),
            when(s.get("updatedAt"), now),
            *([home_relative(one_line(str(s.get("cwd", ""))))] if directories else []),
            one_line(str(s.get("title") or "(untitled)")),
        ]
        for s in sessions
    ]
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]) for row in rows
    ]


# -- the transcript ---------------------------------------------------------------------------------


class TranscriptRenderer(Renderer):
    """A :class:`Renderer` for a replayed history. A replay sends each tool call once, in its final state
    (``tool_call`` with its status and content), where a live session sends a ``tool_call`` then its
    updates: the call is drawn as its announcement followed by its last update, so that its output
    shows as a live session's does. What a stored message holds cannot drive the terminal: the
    :class:`Renderer` draws its control characters as visible escapes."""

    def update(self, update: dict[str, Any]) -> None:
        if update.get("sessionUpdate") == "tool_call":
            status = update.get("status") or "pending"
            content = [c for c in update.get("content") or [] if isinstance(c, dict)]
            super().update({**update, "status": "pending", "content": [c for c in content if c.get("type") == "diff"]})
            if status in ("completed", "failed"):
                super().update(
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": update.get("toolCallId"),
                        "status": status,
                        "content": content,
                    }
                )
            elif status != "pending":  # still running when the agent stopped: say so
                self.info(f"  ({status} when the session was saved)")
            return
        super().update(update)

    def finish(self) -> None:
        """End the last streamed line."""
        self._end_stream()
        self.out.flush()


class SessionsClient:
    """The client side of the connection (its :class:`~refagent.acp.connection.Handler`). The agent has
    no reason to ask anything of a client that opens sessions only to list, show or delete them: every
    request is ``-32601``. While a session is shown (:meth:`show`), its ``session/update`` notifications
    are drawn; all others are ignored."""

    def __init__(self) -> None:
        self.renderer: TranscriptRenderer | None = None
        self.session_id: str | None = None
        self.broken = False
        """Drawing failed: stdout was closed (``| head``)."""

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        raise MethodNotFound(f"Method not found: {method}")

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        # Synchronous drawing: the connection runs each notification's task before the task waiting on the
        # response that follows them resumes, so the whole replay is drawn when session/load returns.
        update = params.get("update")
        if method != "session/update" or self.renderer is None or not isinstance(update, dict):
            return
        if params.get("sessionId") != self.session_id:
            return
        try:
            self.renderer.update(update)
        except BrokenPipeError:
            self.broken = True
            self.renderer = None

    def show(self, session_id: str, renderer: TranscriptRenderer | None) -> None:
        """Draw ``session_id``'s updates on ``renderer`` from now on (None: no more)."""
        self.session_id = session_id
        self.renderer = renderer


# -- the commands -----------------------------------------------------------------------------------


@dataclass
class Context:
    connection: Connection
    init: dict[str, Any]
    client: SessionsClient
    out: TextIO
    err: TextIO
    now: float


async def list_command(ctx: Context, args: argparse.Namespace) -> int:
    cwd = None if args.all else str(args.cwd)
    sessions = await list_sessions(ctx.connection, ctx.init, cwd)
    if args.json:
        ctx.out.write(json.dumps(sessions, indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK
    if not sessions:
        where = "" if cwd is None else f" in {cwd} (refagent sessions list --all lists every directory's)"
        ctx.err.write(f"No sessions{where}.\n")
        return EXIT_OK
    for line in session_lines(sessions, ctx.now, directories=cwd is None):
        ctx.out.write(line + "\n")
    return EXIT_OK


async def show_command(ctx: Context, args: argparse.Namespace) -> int:
    if not can_load(ctx.init):
        raise NotSupported("the agent cannot show a session's history (it does not offer session/load)")
    entry = find_session(await list_sessions(ctx.connection, ctx.init), args.id)
    session_id = str(entry["sessionId"])
    listed = entry.get("cwd")
    cwd = listed if isinstance(listed, str) and os.path.isabs(listed) else str(args.cwd)
    renderer = TranscriptRenderer(ctx.out, color=use_color(ctx.out), cwd=cwd)
    renderer.line(f"{one_line(session_id)}  {one_line(str(entry.get('title') or '(untitled)'))}", "bold")
    stamp = parse_stamp(entry.get("updatedAt"))
    updated = "" if stamp is None else f" · updated {local_time(stamp)} ({when(entry.get('updatedAt'), ctx.now)})"
    renderer.info(f"{home_relative(one_line(cwd))}{updated}")
    params: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
    if entry.get("additionalDirectories") and session_capability(ctx.init, "additionalDirectories"):
        params["additionalDirectories"] = entry["additionalDirectories"]
    ctx.client.show(session_id, renderer)
    try:
        await ctx.connection.request("session/load", params)
    except RequestError as exc:
        if exc.code == RESOURCE_NOT_FOUND:  # deleted since it was listed
            raise NoSuchSession(f"no session {session_id!r} (the agent answered: {exc.message})") from None
        raise
    finally:
        ctx.client.show(session_id, None)
    if not ctx.client.broken:
        renderer.finish()
    if session_capability(ctx.init, "close"):  # looked at, not worked in: let nothing run on
        with contextlib.suppress(RequestError):
            await ctx.connection.request("session/close", {"sessionId": session_id})
    return EXIT_OUTPUT_CLOSED if ctx.client.broken else EXIT_OK


async def delete_command(ctx: Context, args: argparse.Namespace) -> int:
    if not session_capability(ctx.init, "delete"):
        raise NotSupported("the agent cannot delete sessions (it does not offer session/delete)")
    if args.ids:
        everything = await list_sessions(ctx.connection, ctx.init)
        found = [find_session(everything, wanted) for wanted in args.ids]  # all found, or nothing deleted
        targets = list({str(entry["sessionId"]): entry for entry in found}.values())
        scope = ""
    else:
        cwd = None if args.all else str(args.cwd)
        cutoff = ctx.now - args.older_than.seconds
        targets = [
            entry
            for entry in await list_sessions(ctx.connection, ctx.init, cwd)
            if (stamp := parse_stamp(entry.get("updatedAt"))) is not None and stamp < cutoff
        ]
        scope = f" last updated more than {args.older_than.text} ago" + ("" if cwd is None else f" in {cwd}")
    lines = session_lines(targets, ctx.now, directories=not args.ids and args.all)
    for entry, line in zip(targets, lines, strict=True):
        if not args.dry_run:
            await ctx.connection.request("session/delete", {"sessionId": entry["sessionId"]})
        ctx.out.write(f"{'would delete' if args.dry_run else 'deleted'}  {line}\n")
        ctx.out.flush()
    count = f"{len(targets)} session{'' if len(targets) == 1 else 's'}"
    ctx.out.write(f"{'Would delete' if args.dry_run else 'Deleted'} {count}{scope}.\n")
    return EXIT_OK


COMMANDS: dict[str, Callable[[Context, argparse.Namespace], Awaitable[int]]] = {
    "list": list_command,
    "show": show_command,
    "delete": delete_command,
}


async def execute(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    *,
    env: dict[str, str] | None = None,
    transcript: TextIO | None = None,
) -> int:
    """Run the parsed command against the agent it names; the exit code. ``transcript``: the wire, as
    :func:`refagent.client.agent_process.open_agent` writes it."""
    client = SessionsClient()
    try:
        async with open_agent(agent_command(args), client, env=env, transcript=transcript) as connection:
            try:
                init = await initialize(connection, "refagent-sessions", "refagent sessions")
                context = Context(connection, init, client, out, err, time.time())
                return await COMMANDS[args.command](context, args)
            except SessionError as exc:
                err.write(f"error: {visible(str(exc), layout=True)}\n")
            except ConnectionClosed:
                err.write("error: the agent exited before it answered\n")
            except RequestError as exc:
                err.write(f"error: the agent answered: {visible(exc.message, layout=True)}\n")
            except BrokenPipeError:  # stdout was closed (| head): what was wanted has been read
                client.broken = True
                return EXIT_OUTPUT_CLOSED
    except AgentStartError as exc:
        err.write(f"error: {visible(str(exc), layout=True)}\n")
    return EXIT_FAILED


# -- the command line -------------------------------------------------------------------------------


def agent_command(args: argparse.Namespace) -> list[str]:
    """The agent to start: ``--agent``, or this refagent on its built-in model (see the module
    docstring), with the log flags; this refagent logs errors only unless ``--log-level`` says."""
    if args.agent:
        command = shlex.split(args.agent)
    else:
        command = [sys.executable, "-m", "refagent", "--demo"]
        if args.log_level is None:
            command += ["--log-level", "error"]
    if args.log_level is not None:
        command += ["--log-level", args.log_level]
    if args.log_file is not None:
        command += ["--log-file", args.log_file]
    return command


def build_parser() -> argparse.ArgumentParser:
    """``refagent sessions``' parser (and its subcommands')."""
    return _parsers()[0]


LIST_DESCRIPTION = (
    "The sessions of this directory (or --cwd DIR, or --all), newest first: id, last update, (directory,) title."
)
SHOW_DESCRIPTION = (
    "A session's transcript: the prompts, the agent's messages, tool calls with their statuses and diffs, plans."
)
DELETE_DESCRIPTION = (
    "Delete the sessions named, or with --older-than those of this directory (or --cwd DIR, or --all) last "
    "updated longer ago than AGE. Prints each one deleted, then how many."
)


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The parser, and its ``delete`` subcommand's (whose combinations :func:`parse_args` checks)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("the agent")
    group.add_argument(
        "--agent", metavar="COMMAND", help="the agent to ask, as a command line (default: this refagent)"
    )
    group.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="the agent's log level")
    group.add_argument("--log-file", help="the agent's log file (default: stderr)")
    where = argparse.ArgumentParser(add_help=False)
    scope = where.add_mutually_exclusive_group()
    scope.add_argument("--all", action="store_true", help="every directory's sessions")
    scope.add_argument("--cwd", metavar="DIR", help="this directory's sessions (default: the current one)")

    root = sessions_root()
    parser = argparse.ArgumentParser(
        prog="refagent sessions",
        description="The sessions refagent saved: list them, show one's transcript, delete them.",
        epilog="An ID may be shortened to its start when only one session's id starts so. "
        + (f"refagent keeps its sessions in {root}. " if root is not None else "")
        + "Exit codes: 0 done, 1 an unknown id or the agent failed, 2 bad usage, 141 stdout closed (| head).",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{list,show,delete}", help="list is the default"
    )
    # Each subcommand: its name, the option groups it shares, its help line, and its description.
    listing, show, delete = (
        commands.add_parser(name, parents=parents, help=short, description=long)
        for name, parents, short, long in (
            ("list", [where, common], "the sessions of this directory, newest first", LIST_DESCRIPTION),
            ("show", [common], "a session's transcript, as text", SHOW_DESCRIPTION),
            ("delete", [where, common], "delete sessions: by id, or those older than an age", DELETE_DESCRIPTION),
        )
    )
    listing.add_argument("--json", action="store_true", help="the agent's session entries, as a JSON array")
    show.add_argument("id", help="the session's id (or its start)")
    delete.add_argument("ids", nargs="*", metavar="ID", help="a session's id (or its start)")
    delete.add_argument(
        "--older-than", metavar="AGE", type=parse_age, help="an age: a number and h, d or w (30d, 12h, 2w)"
    )
    delete.add_argument("-n", "--dry-run", action="store_true", help="print what would be deleted, delete nothing")
    return parser, delete


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked (bad usage exits 2). No command (``refagent sessions``, or only options such
    as ``--all``) lists."""
    parser, delete = _parsers()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "list")
    args = parser.parse_args(argv)
    if args.command == "delete":
        if bool(args.ids) == (args.older_than is not None):
            delete.error("give session ids, or --older-than AGE (one of the two)")
        if args.ids and (args.all or args.cwd is not None):
            delete.error("--all and --cwd go with --older-than (an id names one session, wherever it is)")
    args.cwd = os.path.abspath(getattr(args, "cwd", None) or os.getcwd())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    replace_unshowable(sys.stdout, sys.stderr)
    code = anyio.run(lambda: execute(args, sys.stdout, sys.stderr))
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = EXIT_OUTPUT_CLOSED
        # stdout was closed (| head): what is still buffered cannot be written, and the interpreter's own
        # flush at exit must not print a BrokenPipeError.
        point_at_devnull(sys.stdout.fileno())
    return code
