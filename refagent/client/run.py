"""``refagent run "task"``: a terminal ACP client that starts refagent and runs one prompt turn.

It is an ordinary ACP client, like an editor: it spawns the agent (``python -m refagent`` with the model
flags passed through), sends ``initialize``, opens a session (``session/new``; ``--continue`` and
``--resume`` reopen an earlier one: :func:`refagent.client.opening.open_session`) and sends one
``session/prompt``, draws the
``session/update``\\ s as they stream in (:mod:`refagent.client.render`), and answers the agent's
``session/request_permission`` from the keyboard or, with ``--yes``, by approving. It advertises no file
system and no terminal capability, so the agent reads and writes the local disk and runs local processes
itself (in its sandbox).

Ctrl-C once sends ``session/cancel`` and waits for the turn to answer ``cancelled``; twice quits at once.
The agent runs in its own process group so that the terminal's Ctrl-C reaches only this client.

The prompt ``-`` is read from stdin, all of it (``echo "fix it" | refagent run -``). Permission questions
are then answered at the terminal (``/dev/tty``); with no terminal, each is rejected, saying so (``--yes``
approves them instead).

For scripts: the session goes to stdout (to stderr with ``--json``, whose transcript is stdout), errors to
stderr, each once; the agent's own log (its stderr) goes to stderr too, a line at a time, its control
characters made visible as in everything the agent sends (:mod:`refagent.client.render`). A turn
refagent's model failed (unreachable endpoint, rejected key, a configuration that cannot work) answers
``end_turn`` with the failure in ``_meta`` (:mod:`refagent.session.turn`): its message is printed once, as
``error: ...`` on stderr, instead of the session text, and the exit code is 1. A closed stdout
(``| head -3``) stops the agent and ends quietly, with 141, as a tool that ``SIGPIPE`` kills does
(``git log | head``): the task was not finished, and under ``set -o pipefail`` that is visible.

Exit codes (:data:`EXIT_CODES`): 0 ``end_turn``; 3 ``max_tokens``; 4 ``max_turn_requests``; 5 ``refusal``;
6 ``end_turn``, but a permission request was rejected because no one could answer it (no terminal, or the
answers' input ended: the change was not made, and a script can tell); 130 ``cancelled`` (or quit); 1 the
agent failed (did not start, exited, answered an error, or the model failed the turn), or no model is set
up (refagent would answer from its built-in offline model: the prompt is not sent, and the error says how
to set one up; ``--demo`` runs the demo model); 2 bad usage; 141 stdout was closed.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, TypedDict

import anyio

from refagent.acp.connection import Connection, Handler
from refagent.acp.errors import ConnectionClosed, RequestError
from refagent.acp.text import one_line
from refagent.client.agent_process import AgentStartError, initialize, open_agent
from refagent.client.handler import ReadLine, StdinLines, TerminalClient, failure_of
from refagent.client.opening import SessionError, open_session
from refagent.client.render import EXIT_OUTPUT_CLOSED, QuietPipe, Renderer, use_color

EXIT_CODES = {"end_turn": 0, "max_tokens": 3, "max_turn_requests": 4, "refusal": 5, "cancelled": 130}
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNANSWERED = 6
"""The turn ended, but a permission request was rejected because no one could answer it (no terminal)."""
NO_TERMINAL = "no terminal to ask on (the prompt came from stdin); --yes approves"
OFFLINE_MODEL = "scripted"
"""The model value of refagent's built-in offline model (:data:`refagent.llm.profiles.SCRIPTED`): no model is
set up."""
NO_MODEL = (
    "no model is set up, so the task was not run. Set one up with `refagent login`, or set ANTHROPIC_API_KEY "
    "or OPENAI_API_KEY, or name one with --model provider/model (--demo runs the built-in demo model instead)"
)


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
    show_approved: bool = False
    """Draw each automatically approved request whole, as a question would be (the demo shows them); else one
    line each."""
    read_only: bool = False
    mode: str | None = None
    """``--mode``: the mode the session starts in (``read_only`` is ``read-only``)."""
    transcript: TextIO | None = None
    """Where the wire transcript goes, one JSON object a line (``--json``: stdout)."""
    env: dict[str, str] | None = None
    unanswerable: str | None = None
    """Why no one can answer a permission request (then each is rejected, saying this); None: ask."""
    resume: str | None = None
    """``--resume``: the id of the earlier session to go on with (or the start of it)."""
    latest: bool = False
    """``--continue``: go on with the last session of ``cwd``."""
    require_model: bool = False
    """Refuse to run on refagent's built-in offline model, the one it answers with when no model is set up
    (``refagent run`` without ``--demo`` or ``--agent``): a task must not pass for done on it. (A broken
    configuration runs on it too, but there each turn fails at once, saying what is wrong: that is let be.)"""
    broken: bool = False
    """The configuration the agent reads cannot be used (:func:`config_broken`)."""


@dataclass
class Outcome:
    exit_code: int
    stop_reason: str | None = None
    session_id: str | None = None
    model: str = ""


# -- one run ----------------------------------------------------------------------------------------


class AgentOptions(Protocol):
    """How the agent is started: what :class:`RunOptions` and :class:`~refagent.client.chat.ChatOptions` both
    say of it."""

    @property
    def agent(self) -> list[str]: ...

    @property
    def env(self) -> dict[str, str] | None: ...

    @property
    def transcript(self) -> TextIO | None: ...


def start_agent(
    options: AgentOptions,
    client: Handler,
    *,
    log: Callable[[str], Awaitable[None]],
    exited: Callable[[int], None] | None = None,
) -> AbstractAsyncContextManager[Connection]:
    """:func:`~refagent.client.agent_process.open_agent` on the command line, environment and transcript of
    ``options``, ``client`` answering the agent; ``log`` and ``exited`` as there."""
    return open_agent(options.agent, client, env=options.env, transcript=options.transcript, exited=exited, log=log)


class Run:
    """One agent process, one session, one prompt. :meth:`interrupt` is what Ctrl-C does."""

    def __init__(self, options: RunOptions, renderer: Renderer, read_line: ReadLine, interactive: bool) -> None:
        self.options = options
        self.renderer = renderer
        approve = options.approval_note if options.yes else None
        self.client = TerminalClient(
            renderer,
            read_line,
            interactive=interactive,
            approve=approve,
            unanswerable=options.unanswerable,
            brief=not options.show_approved,
        )
        self.connection: Connection | None = None
        self.session_id: str | None = None
        self.prompting = False
        self._scope = anyio.CancelScope()
        self._quit = False
        self._output_closed = False
        self._lost = False  # the agent closed the connection before answering
        self._exit_status: int | None = None

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

    def output_closed(self) -> None:
        """No one reads the session any more (``| head``): stop the agent, and say nothing more."""
        self._output_closed = True
        self.quit()

    async def run(self) -> Outcome:
        outcome = Outcome(EXIT_CODES["cancelled"])
        with self._scope:
            outcome = await self._run()
        if self._output_closed:
            outcome.exit_code = EXIT_OUTPUT_CLOSED
        elif self._quit:
            self.renderer.line("Quit.", "yellow")
            outcome.exit_code = EXIT_CODES["cancelled"]
        return outcome

    async def _run(self) -> Outcome:
        try:
            async with start_agent(self.options, self.client, exited=self._exited, log=self._log) as connection:
                self.connection = connection
                outcome = await self._session(connection)
        except AgentStartError as exc:
            self.renderer.error(str(exc))
            return Outcome(EXIT_FAILED)
        if self._lost:  # said now: the agent's exit status is known once it has stopped
            self.renderer.error(_lost_agent(self._exit_status))
        return outcome

    def _exited(self, status: int) -> None:
        self._exit_status = status

    async def _log(self, line: str) -> None:
        self.renderer.log(line)

    async def _session(self, connection: Connection) -> Outcome:
        options = self.options
        try:
            init = await initialize(connection, "refagent-run", "refagent run")
            opened = await open_session(connection, init, options.cwd, resume=options.resume, latest=options.latest)
            session = opened.result
            self.session_id = opened.session_id
            model, about = _current_model(session)
            info = init.get("agentInfo") or {}
            # What the agent said of itself and the session, each on its one line (the renderer makes its
            # control characters visible; one_line keeps a line break in a name from drawing a line).
            self.renderer.info(
                one_line(
                    f"{info.get('name', 'agent')} {info.get('version', '')} · ACP v{init.get('protocolVersion')} · "
                    f"session {self.session_id}"
                )
            )
            self.renderer.line(f"model: {one_line(model)}", "bold")
            if about and about not in model:  # a profile's name need not say the model: its description does
                self.renderer.info(one_line(about))
            if opened.resumed:
                title = one_line(str(opened.info.get("title") or ""))
                self.renderer.info(f"continuing: {title}" if title else "continuing an earlier session")
            self.renderer.info(f"cwd: {one_line(opened.cwd)}")
            if options.require_model and not options.broken and _current_value(session) == OFFLINE_MODEL:
                self.renderer.error(NO_MODEL)
                return Outcome(EXIT_FAILED, session_id=self.session_id, model=model)
            mode = options.mode or ("read-only" if options.read_only else None)
            if mode:
                offered = _modes(session)
                if offered and mode not in offered:
                    self.renderer.error(f"--mode {one_line(mode)}: the agent has no such mode ({', '.join(offered)})")
                    return Outcome(EXIT_USAGE, session_id=self.session_id, model=model)
                await connection.request("session/set_mode", {"sessionId": self.session_id, "modeId": mode})
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
        except ConnectionClosed:
            self._lost = True
            return Outcome(EXIT_FAILED, session_id=self.session_id)
        except RequestError as exc:
            self.renderer.error(exc.message)
            return Outcome(EXIT_FAILED, session_id=self.session_id)
        except SessionError as exc:  # --continue or --resume found nothing to go on with
            self.renderer.error(str(exc))
            return Outcome(EXIT_FAILED)
        stop = str(result.get("stopReason"))
        # The model failed the turn: said once, as an error, not as the session's text (the client kept
        # the message's chunk back). An agent that marks only the chunk is believed too.
        failure = failure_of(result) or (self.client.failure if stop == "end_turn" else None)
        if failure is not None:
            self.renderer.error(failure.message)
            return Outcome(EXIT_FAILED, stop, self.session_id, model)
        self.renderer.stop(stop)
        if stop == "end_turn" and self.client.unanswered:
            # The turn ended, but without what no one could approve: a script must be able to tell.
            self.renderer.error(
                f"{self.client.unanswered} permission request(s) were rejected: no one could answer them "
                f"({self.client.unanswerable or 'the input ended'}); the task may be unfinished"
            )
            return Outcome(EXIT_UNANSWERED, stop, self.session_id, model)
        return Outcome(EXIT_CODES.get(stop, EXIT_FAILED), stop, self.session_id, model)


def _lost_agent(status: int | None) -> str:
    """Why the agent stopped answering: it exited, with this status (or the signal that killed it)."""
    if status is None:
        return "the agent closed the connection before answering"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the agent was killed by {name} before answering"
    return f"the agent exited (status {status}) before answering"


def _modes(session: dict[str, Any]) -> list[str]:
    """The ids of the modes the session offers (its ``modes``), each on one line."""
    modes = session.get("modes")
    listed = modes.get("availableModes") if isinstance(modes, dict) else None
    return [one_line(str(m["id"])) for m in listed or [] if isinstance(m, dict) and "id" in m]


def _current_value(session: dict[str, Any]) -> Any:
    """The value of the session's ``model`` config option (refagent's: the profile's id)."""
    for option in session.get("configOptions") or []:
        if option.get("category") == "model" or option.get("id") == "model":
            return option.get("currentValue")
    return None


def _current_model(session: dict[str, Any]) -> tuple[str, str]:
    """The display name of the session's model and its description (refagent's: which model, via which
    endpoint), from its ``model`` config option."""
    for option in session.get("configOptions") or []:
        if option.get("category") == "model" or option.get("id") == "model":
            current = option.get("currentValue")
            for choice in option.get("options") or []:
                if choice.get("value") == current:
                    return str(choice.get("name") or current), str(choice.get("description") or "")
            return str(current), ""
    return "(the agent did not say)", ""


async def run(
    options: RunOptions,
    renderer: Renderer,
    read_line: ReadLine | None = None,
    *,
    interactive: bool = False,
    handle_signals: bool = True,
    stdout: QuietPipe | None = None,
) -> Outcome:
    """Run one task. ``read_line`` answers permission prompts (default: this process's stdin). ``stdout``:
    the stream the session or the transcript is written to, if its reader may leave (which stops the run)."""
    the_run = Run(options, renderer, read_line or StdinLines().read_line, interactive)
    if stdout is not None:
        stdout.on_closed = the_run.output_closed
    if not handle_signals:
        return await the_run.run()
    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals, the_run)
        try:
            outcome = await the_run.run()
        finally:
            tg.cancel_scope.cancel()
    return outcome


class Interruptible(Protocol):
    """What the terminal's signals reach: a run, or a chat."""

    async def interrupt(self) -> None: ...

    def quit(self) -> None: ...


async def on_signals(target: Interruptible) -> None:
    """Until cancelled: SIGINT (Ctrl-C) is ``target.interrupt()``; SIGTERM and SIGHUP ``target.quit()``."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGINT:
                await target.interrupt()
            else:
                target.quit()


# -- the command ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refagent run",
        description="Run one task with refagent in this terminal: start the agent, stream the session, "
        "ask before changes (y = allow once, a = always allow, n = reject, v or never = always reject).",
        epilog="Exit codes: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 6 a permission request "
        "rejected because no one could answer it (no terminal: use --yes, or a terminal), 130 cancelled (Ctrl-C), "
        "1 the agent failed (or its model did, or no model is set up: the reason is on stderr), 2 bad usage, "
        "141 stdout closed.",
    )
    parser.add_argument(
        "prompt",
        help='the task, e.g. "the tests fail: fix the bug"; - reads it from stdin (then permission questions '
        "are asked at the terminal, or rejected if there is none)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the wire transcript to stdout as JSON lines ({from, message}); the session goes to stderr",
    )
    add_session_arguments(parser)
    return parser


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags ``refagent run`` and ``refagent chat`` share: the project, which session, how permission
    questions are answered, and the agent to start with its model flags (:func:`agent_command`)."""
    from refagent import config  # here: `refagent sessions` imports this module, not the configuration (4.8 ms)

    parser.add_argument("--cwd", default=os.getcwd(), help="the project directory (default: the current one)")
    parser.add_argument("-y", "--yes", action="store_true", help="approve every permission request")
    earlier = parser.add_mutually_exclusive_group()
    earlier.add_argument(
        "-c", "--continue", dest="latest", action="store_true", help="go on with the last session of this directory"
    )
    earlier.add_argument(
        "--resume",
        metavar="ID",
        nargs="?",
        const="",
        help="go on with this earlier session (its id, or the start of it: refagent sessions); "
        "without an id, refagent chat offers the recent ones to choose from",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="start the session in read-only mode: changes are refused"
    )
    parser.add_argument(
        "--mode",
        help="start the session in this mode: refagent's are ask (the default), accept-edits, auto, read-only "
        "and full-access (nothing asks)",
    )
    parser.add_argument("--demo", action="store_true", help="run the agent on its built-in demo model")
    parser.add_argument(
        "--agent",
        metavar="COMMAND",
        help="the agent to start, as a command line (default: this refagent); the flags below are added to it",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="the agent's log level")
    parser.add_argument("--log-file", help="the agent's log file (default: stderr)")
    config.add_arguments(parser, strict=True)  # --max-requests 0 is bad usage here


class SessionFlags(TypedDict):
    """What the flags of :func:`add_session_arguments` say, as the fields :class:`RunOptions` and
    :class:`~refagent.client.chat.ChatOptions` share (``**`` them into either)."""

    agent: list[str]
    yes: bool
    read_only: bool
    mode: str | None
    resume: str | None
    latest: bool


def parse_session_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """``argv`` parsed by ``parser`` (one given :func:`add_session_arguments`), and ``--cwd`` made absolute;
    bad usage (exit 2) when it is not a directory."""
    args = parser.parse_args(argv)
    if args.mode and args.read_only and args.mode != "read-only":
        parser.error(f"--read-only and --mode {args.mode}: one mode, please")
    cwd = os.path.abspath(args.cwd)
    if not os.path.isdir(cwd):
        parser.error(f"--cwd {args.cwd}: not a directory")
    return args, cwd


def session_flags(args: argparse.Namespace) -> SessionFlags:
    """The options the flags of :func:`add_session_arguments` set, the agent's command line among them."""
    return SessionFlags(
        agent=agent_command(args),
        yes=args.yes,
        read_only=args.read_only,
        mode=args.mode or ("read-only" if args.read_only else None),
        resume=args.resume,
        latest=args.latest,
    )


def replace_unshowable(*streams: TextIO) -> None:
    """Make each stream write a character its encoding cannot hold as a replacement, so that printing what the
    agent sent never fails on one the terminal cannot show (a stream that cannot be reconfigured stays)."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")


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
    parser = build_parser()
    args, cwd = parse_session_args(parser, argv)
    if args.resume == "":
        parser.error(
            "--resume needs a session id here (refagent sessions lists them; refagent chat --resume offers them)"
        )
    prompt = args.prompt
    if prompt == "-":
        prompt = sys.stdin.buffer.read().decode("utf-8", "replace")
    if not prompt.strip():
        parser.error("the prompt is empty" + (" (nothing on stdin)" if args.prompt == "-" else ""))
    _log_to_stderr(args.log_level)
    replace_unshowable(sys.stderr)
    stdout = QuietPipe(sys.stdout)
    screen = sys.stderr if args.json else stdout.stream
    read_line, interactive, answers_fd = _answers(from_stdin=args.prompt == "-", yes=args.yes)
    options = RunOptions(
        prompt=prompt.strip() if args.prompt == "-" else prompt,
        cwd=cwd,
        transcript=stdout.stream if args.json else None,
        unanswerable=NO_TERMINAL if args.prompt == "-" and read_line is None and not args.yes else None,
        require_model=not (args.demo or args.agent),
        broken=not (args.demo or args.agent) and config_broken(args),
        **session_flags(args),
    )
    renderer = Renderer(screen, color=use_color(screen), cwd=cwd, err=sys.stderr, err_color=use_color(sys.stderr))
    try:
        outcome = anyio.run(lambda: run(options, renderer, read_line, interactive=interactive, stdout=stdout))
    except KeyboardInterrupt:  # a Ctrl-C after the run ended, while the event loop closed: already quitting
        return EXIT_CODES["cancelled"]
    finally:
        if answers_fd is not None:
            os.close(answers_fd)
    return outcome.exit_code


def config_broken(args: argparse.Namespace) -> bool:
    """Whether the configuration the agent started with ``args`` reads cannot be used (its file, its
    profile, the environment): read as the agent reads it (:func:`refagent.cli.load_settings`)."""
    from refagent import config  # here: as in add_session_arguments (already loaded by then)
    from refagent.errors import ConfigError

    try:
        config.load(args, os.environ)
    except ConfigError:
        return True
    return False


def _answers(*, from_stdin: bool, yes: bool) -> tuple[ReadLine | None, bool, int | None]:
    """Where permission answers are read: ``(read_line, interactive, fd to close)``. Stdin, unless it held
    the prompt: then the terminal (``/dev/tty``); ``read_line`` None when there is none (answers: rejected)."""
    if not from_stdin:
        return None, sys.stdin.isatty(), None
    if yes:
        return None, False, None
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:  # no controlling terminal (CI, a service)
        return None, False, None
    return StdinLines(fd).read_line, True, fd


def _log_to_stderr(level: str | None) -> None:
    """This client's own log (its connection's): errors only, unless ``--log-level`` says otherwise. What
    goes wrong with the agent is said once, as an error, not also as a log line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("refagent run: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or "error").upper())
