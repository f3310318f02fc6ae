"""``refagent run "task"``: a terminal ACP client that starts refagent and runs one prompt turn.

It is an ordinary ACP client, like an editor: it spawns the agent (``python -m refagent`` with the model
flags passed through), sends ``initialize``, ``session/new`` and ``session/prompt``, draws the
``session/update``\\ s as they stream in (:mod:`refagent.client.render`), and answers the agent's
``session/request_permission`` from the keyboard or, with ``--yes``, by approving. It advertises no file
system and no terminal capability, so the agent reads and writes the local disk and runs local processes
itself (in its sandbox).

Ctrl-C once sends ``session/cancel`` and waits for the turn to answer ``cancelled``; twice quits at once.
The agent runs in its own process group so that the terminal's Ctrl-C reaches only this client.

Exit codes (:data:`EXIT_CODES`): 0 ``end_turn``; 3 ``max_tokens``; 4 ``max_turn_requests``; 5 ``refusal``;
130 ``cancelled`` (or quit); 1 the agent failed (did not start, exited, answered an error); 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import anyio

from refagent.acp.connection import Connection
from refagent.acp.errors import RequestError
from refagent.client.agent_process import AgentStartError, initialize, open_agent
from refagent.client.handler import ReadLine, StdinLines, TerminalClient
from refagent.client.render import Renderer, use_color

EXIT_CODES = {"end_turn": 0, "max_tokens": 3, "max_turn_requests": 4, "refusal": 5, "cancelled": 130}
EXIT_FAILED = 1


@dataclass
class RunOptions:
    prompt: str
    cwd: str
    agent: list[str]
    """The agent's command line."""
    yes: bool = False
    """Approve every permission request."""
    approval_note: str = "--yes"
    """What an automatic approval says it came from."""
    read_only: bool = False
    transcript: TextIO | None = None
    """Where the wire transcript goes, one JSON object a line (``--json``: stdout)."""
    env: dict[str, str] | None = None


@dataclass
class Outcome:
    exit_code: int
    stop_reason: str | None = None
    session_id: str | None = None
    model: str = ""


# -- one run ----------------------------------------------------------------------------------------


class Run:
    """One agent process, one session, one prompt. :meth:`interrupt` is what Ctrl-C does."""

    def __init__(self, options: RunOptions, renderer: Renderer, read_line: ReadLine, interactive: bool) -> None:
        self.options = options
        self.renderer = renderer
        approve = options.approval_note if options.yes else None
        self.client = TerminalClient(renderer, read_line, interactive=interactive, approve=approve)
        self.connection: Connection | None = None
        self.session_id: str | None = None
        self.prompting = False
        self._scope = anyio.CancelScope()
        self._quit = False

    async def interrupt(self) -> None:
        """First time during a turn: ``session/cancel``. Otherwise (or the second time): quit."""
        if self.prompting and not self.client.cancelled and self.connection and self.session_id:
            self.renderer.line("Cancelling… (press Ctrl-C again to quit)", "yellow")
            await self.connection.notify("session/cancel", {"sessionId": self.session_id})
            self.client.cancel_prompts()
            return
        self.quit()

    def quit(self) -> None:
        """Stop now: the agent is told by EOF, and killed if it does not exit in time."""
        self._quit = True
        self._scope.cancel()

    async def run(self) -> Outcome:
        outcome = Outcome(EXIT_CODES["cancelled"])
        with self._scope:
            outcome = await self._run()
        if self._quit:
            self.renderer.line("Quit.", "yellow")
            outcome.exit_code = EXIT_CODES["cancelled"]
        return outcome

    async def _run(self) -> Outcome:
        try:
            async with open_agent(
                self.options.agent, self.client, env=self.options.env, transcript=self.options.transcript
            ) as connection:
                self.connection = connection
                return await self._session(connection)
        except AgentStartError as exc:
            self.renderer.error(str(exc))
            return Outcome(EXIT_FAILED)

    async def _session(self, connection: Connection) -> Outcome:
        options = self.options
        try:
            init = await initialize(connection, "refagent-run", "refagent run")
            session = await connection.request("session/new", {"cwd": options.cwd, "mcpServers": []})
            self.session_id = str(session["sessionId"])
            model = _current_model(session)
            info = init.get("agentInfo") or {}
            self.renderer.info(
                f"{info.get('name', 'agent')} {info.get('version', '')} · ACP v{init.get('protocolVersion')} · "
                f"session {self.session_id}"
            )
            self.renderer.line(f"model: {model}", "bold")
            self.renderer.info(f"cwd: {options.cwd}")
            if options.read_only:
                await connection.request("session/set_mode", {"sessionId": self.session_id, "modeId": "read-only"})
            self.renderer.line()
            self.renderer.line(f"> {options.prompt}", "bold")
            self.prompting = True
            try:
                result = await connection.request(
                    "session/prompt",
                    {"sessionId": self.session_id, "prompt": [{"type": "text", "text": options.prompt}]},
                )
            finally:
                self.prompting = False
        except RequestError as exc:
            self.renderer.error(exc.message)
            return Outcome(EXIT_FAILED, session_id=self.session_id)
        stop = str(result.get("stopReason"))
        self.renderer.stop(stop)
        return Outcome(EXIT_CODES.get(stop, EXIT_FAILED), stop, self.session_id, model)


def _current_model(session: dict[str, Any]) -> str:
    """The display name of the session's model, from its ``model`` config option."""
    for option in session.get("configOptions") or []:
        if option.get("category") == "model" or option.get("id") == "model":
            current = option.get("currentValue")
            for choice in option.get("options") or []:
                if choice.get("value") == current:
                    return str(choice.get("name") or current)
            return str(current)
    return "(the agent did not say)"


async def run(
    options: RunOptions,
    renderer: Renderer,
    read_line: ReadLine | None = None,
    *,
    interactive: bool = False,
    handle_signals: bool = True,
) -> Outcome:
    """Run one task. ``read_line`` answers permission prompts (default: this process's stdin)."""
    the_run = Run(options, renderer, read_line or StdinLines().read_line, interactive)
    if not handle_signals:
        return await the_run.run()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_on_signals, the_run)
        try:
            outcome = await the_run.run()
        finally:
            tg.cancel_scope.cancel()
    return outcome


async def _on_signals(the_run: Run) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGINT:
                await the_run.interrupt()
            else:
                the_run.quit()


# -- the command ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from refagent.llm import config

    parser = argparse.ArgumentParser(
        prog="refagent run",
        description="Run one task with refagent in this terminal: start the agent, stream the session, "
        "ask before changes (y = allow once, a = always allow, n = reject, never = always reject).",
        epilog="Exit codes: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 130 cancelled (Ctrl-C), "
        "1 the agent failed, 2 bad usage.",
    )
    parser.add_argument("prompt", help='the task, e.g. "the tests fail: fix the bug"')
    parser.add_argument("--cwd", default=os.getcwd(), help="the project directory (default: the current one)")
    parser.add_argument("-y", "--yes", action="store_true", help="approve every permission request")
    parser.add_argument(
        "--read-only", action="store_true", help="start the session in read-only mode: changes are refused"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the wire transcript to stdout as JSON lines ({from, message}); the session goes to stderr",
    )
    parser.add_argument("--demo", action="store_true", help="run the agent on its built-in demo model")
    parser.add_argument(
        "--agent",
        metavar="COMMAND",
        help="the agent to start, as a command line (default: this refagent); the flags below are added to it",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="the agent's log level")
    parser.add_argument("--log-file", help="the agent's log file (default: stderr)")
    config.add_arguments(parser)
    return parser


def agent_command(args: argparse.Namespace) -> list[str]:
    """``python -m refagent`` (or ``--agent``) with the flags of ``args`` that are the agent's."""
    command = shlex.split(args.agent) if args.agent else [sys.executable, "-m", "refagent"]
    if args.demo:
        command.append("--demo")
    for flag in ("log_level", "log_file", "config", "profile", "model", "base_url", "max_requests"):
        value = getattr(args, flag, None)
        if value is not None:
            command += [f"--{flag.replace('_', '-')}", str(value)]
    return command


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cwd = os.path.abspath(args.cwd)
    if not os.path.isdir(cwd):
        build_parser().error(f"--cwd {args.cwd}: not a directory")
    screen = sys.stderr if args.json else sys.stdout
    reconfigure = getattr(screen, "reconfigure", None)
    if reconfigure is not None:  # never fail on a character the terminal cannot show
        reconfigure(errors="replace")
    options = RunOptions(
        prompt=args.prompt,
        cwd=cwd,
        agent=agent_command(args),
        yes=args.yes,
        read_only=args.read_only,
        transcript=sys.stdout if args.json else None,
    )
    renderer = Renderer(screen, color=use_color(screen), cwd=cwd)
    outcome = anyio.run(lambda: run(options, renderer, interactive=sys.stdin.isatty()))
    return outcome.exit_code
