"""``refagent chat``: an interactive, multi-turn session with refagent in the terminal.

An ordinary ACP client, as ``refagent run`` is: it starts the agent (``python -m refagent`` with the model
flags passed through, or ``--agent``; :func:`~refagent.client.agent_process.open_agent`), sends
``initialize``, opens a session (new, ``--continue`` or ``--resume``:
:func:`~refagent.client.opening.open_session`), then sends each prompt typed as a ``session/prompt`` and
draws the turn as it streams. The pieces: :mod:`~refagent.client.chat_input` (the prompt, prompt_toolkit),
:mod:`~refagent.client.chat_view` (the drawing, rich), :mod:`~refagent.client.chat_client` (the ACP
handler: updates, permission questions), :mod:`~refagent.client.chat_state` (mode, model, usage, commands).

The chat's own commands: ``/help``, ``/sessions`` (``session/list`` for this directory), ``/resume <id>``
(``session/load``: the earlier conversation is drawn again, then goes on), ``/new`` (``session/new`` in
the same agent process), ``/quit``. A ``/word`` that is neither the chat's nor one the agent announced
(``available_commands_update``) is refused with the list of commands, not sent (until the agent has
announced its commands, which it does just after the session opens, a ``/word`` is left to it). Every
other line, ``/undo``, ``/compact``, ``/mode``, ``/model`` and ``/init`` included, is the prompt of a turn:
the agent answers its own commands. But ``/mode full-access``
(which removes every question) is the chat's: it says what the mode allows and asks y/N first; Shift-Tab
cycles the other modes only (:meth:`~refagent.client.chat_state.ChatState.next_mode`).

Ctrl-C or Esc during a turn sends ``session/cancel`` (the turn ends ``cancelled``, the prompt comes back;
Esc on a terminal, where the chat reads the keys typed during a turn: :mod:`~refagent.client.chat_keys`); a
second Ctrl-C during the same turn quits. At a permission question it cancels the turn. At the prompt it
clears the line; twice on an empty line quits, as Ctrl-D does. The agent runs in its own process group,
so the terminal's Ctrl-C reaches only the chat; quitting closes the agent's stdin (and kills it if it
does not exit in time). Exit code: 0 when the user quits; 1 when the agent cannot start, the session
cannot be opened, or the agent stops; 2 bad usage; 141 stdout was closed (``| head``: quietly).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
from rich.console import Console
from rich.table import Table
from rich.text import Text

from refagent.acp.connection import Connection
from refagent.acp.errors import ConnectionClosed, RequestError
from refagent.acp.text import one_line, visible
from refagent.client import chat_blocks as blocks
from refagent.client.agent_process import AgentStartError, initialize
from refagent.client.chat_blocks import help_block, sessions_block
from refagent.client.chat_choices import Choices
from refagent.client.chat_client import ChatClient
from refagent.client.chat_input import ChatInput, LineInput, PromptInput, history_file, quiet_tty
from refagent.client.chat_pickers import PICKED
from refagent.client.chat_shell import ShellRun, run_shell
from refagent.client.chat_state import CLIENT_COMMANDS, CLIENT_NAMES, ChatState
from refagent.client.chat_view import ChatView
from refagent.client.mentions import Mention, mentioned, prompt_blocks
from refagent.client.opening import (
    NoEarlierSession,
    SessionError,
    can_load,
    list_sessions,
    open_session,
    session_capability,
)
from refagent.client.pastes import collapsed, typed
from refagent.client.render import EXIT_OUTPUT_CLOSED, point_at_devnull
from refagent.client.run import (
    add_session_arguments,
    on_signals,
    parse_session_args,
    replace_unshowable,
    session_flags,
    start_agent,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
COMMAND_NAME = re.compile(r"[A-Za-z][\w-]*")
"""What a slash command's name looks like: ``/usr/bin/env python fails`` is a prompt that starts with a path."""
AGENT_GONE = "The agent stopped (what it said, if anything, is above)."
TICK_SECONDS = 0.1
LEAVE_SECONDS = 2.0
"""How long quitting waits for the agent to delete a session left unused."""
"""How often the live region is redrawn (the spinner, the time taken)."""


@dataclass
class ChatOptions:
    cwd: str
    agent: list[str]
    """The agent's command line."""
    yes: bool = False
    """Approve every permission request."""
    read_only: bool = False
    mode: str | None = None
    """``--mode``: the mode the session starts in (``read_only`` is ``read-only``)."""
    prompt: str | None = None
    """The first prompt, given on the command line (``refagent chat "fix it"``): sent at once."""
    resume: str | None = None
    """``--resume``: the id (or the start of one) of the session to go on with; ``""``: offer a choice."""
    latest: bool = False
    """``--continue``: go on with this directory's latest session."""
    transcript: TextIO | None = None
    """Where every line each side sends goes, as JSON lines (``--transcript``)."""
    env: dict[str, str] | None = None


class Chat:
    """One agent process, a session at a time, turns until the user quits."""

    def __init__(self, options: ChatOptions, view: ChatView, typed: ChatInput, state: ChatState) -> None:
        self.options = options
        self.view = view
        self.input = typed
        self.state = state
        approve = "--yes" if options.yes else None
        self.client = ChatClient(view, state, typed, self.cancel_turn, approve=approve)
        self.cwd = options.cwd
        self.state.cwd = self.cwd  # what @ completes paths under
        self.view.interrupt_key = typed.interrupt_key
        self.view.typed_ahead = typed.typed_ahead
        self.connection: Connection | None = None
        self.choices: Choices
        """What the user sets in the session (:mod:`refagent.client.chat_choices`), once the agent runs."""
        self.init: dict[str, Any] = {}
        self.turn = False
        self._cancel_sent = False
        self._scope = anyio.CancelScope()
        self._quit = False
        self.code = EXIT_OK
        self.prompted: set[str] = set()
        """The sessions a prompt was sent in (saved, so worth coming back to: :meth:`_goodbye`)."""
        self.made: set[str] = set()
        """The sessions this chat made new: left without a prompt, they are deleted (:meth:`_leave`)."""
        self.shell_run: ShellRun | None = None
        """The last ``!command`` (what ``/share`` sends)."""
        self._shell_scope: anyio.CancelScope | None = None

    # -- Ctrl-C and quitting ---------------------------------------------------------------------

    async def interrupt(self) -> None:
        """SIGINT (Ctrl-C while a turn runs): cancel the turn; the second time, or between turns, quit.
        While a ``!command`` runs: kill it."""
        if self._shell_scope is not None:
            self._shell_scope.cancel()
        elif self.turn and not self._cancel_sent:
            await self.cancel_turn()
        else:
            self.quit()

    async def cancel_turn(self) -> None:
        """Send ``session/cancel`` (once a turn); pending permission questions answer ``cancelled``."""
        if not self.turn or self._cancel_sent or self.connection is None:
            return
        self._cancel_sent = True
        self.input.hold()  # a prompt queued during the turn comes back to be edited, not sent
        self.view.cancelling()
        with anyio.CancelScope(shield=True):  # called from a question being cancelled: it must still go
            await self.connection.notify("session/cancel", {"sessionId": self.state.session_id})
        self.client.cancel_prompts()

    def quit(self, code: int = EXIT_OK) -> None:
        """Stop now, with this exit code: the agent is told by EOF, and killed if it does not exit in time."""
        if not self._quit:
            self._quit, self.code = True, code
        self._scope.cancel()

    async def agent_log(self, line: str) -> None:
        """A line the agent wrote to its stderr (its log): drawn dimmed above the live region or the prompt,
        where raw writes to the terminal would tear them."""
        if not line.strip():
            return
        logged = Text(visible(line, layout=True), style="dim")  # a log line can quote a model or a file
        if self.view.active:
            self.view.print(logged, "log")
        else:
            await self.input.above(lambda: self.view.print(logged, "log"))

    # -- the chat --------------------------------------------------------------------------------

    async def run(self) -> int:
        with self._scope:
            try:
                async with start_agent(self.options, self.client, log=self.agent_log) as connection:
                    self.connection = connection
                    self.choices = Choices(connection, self.state, self.view, self.input)
                    code = await self._chat(connection)
                    with anyio.move_on_after(LEAVE_SECONDS):  # before quit(), which ends the connection
                        await self._leave(self.state.session_id, close=False)
                    self.quit(code)
            except AgentStartError as exc:
                self.view.error(str(exc))
                self.quit(EXIT_FAILED)
        self._goodbye()
        return self.code

    async def _leave(self, session_id: str, *, close: bool) -> None:
        """The chat leaves ``session_id``: one it made and never prompted in is deleted, so that quitting at
        once, or ``/new`` twice, leaves no empty session to list; another is closed if ``close`` (the
        agent frees it) and the agent can. Nothing is lost if the agent cannot."""
        if not session_id or self.connection is None:
            return
        unused = session_id in self.made and session_id not in self.prompted
        method = "session/delete" if unused and session_capability(self.init, "delete") else "session/close"
        if method == "session/close" and not (close and session_capability(self.init, "close")):
            return
        with contextlib.suppress(RequestError, ConnectionClosed, OSError, anyio.BrokenResourceError):
            await self.connection.request(method, {"sessionId": session_id})

    def _goodbye(self) -> None:
        """On the way out, how to come back to the session in use, if it had a prompt and the agent can
        reopen sessions (not when the output went away: no one reads it)."""
        session_id = self.state.session_id
        if self.code == EXIT_OUTPUT_CLOSED or session_id not in self.prompted:
            return
        if not (session_capability(self.init, "resume") or can_load(self.init)):
            return
        self.view.note(f"To go on with this session: refagent chat --resume {one_line(session_id)}")

    async def _chat(self, connection: Connection) -> int:
        try:
            self.init = await initialize(connection, "refagent-chat", "refagent chat", notices=True)
            info = self.init.get("agentInfo") or {}
            name = str(info.get("title") or info.get("name") or "the agent")
            header = Text(one_line(" ".join(filter(None, [name, str(info.get("version") or "")]))), "bold")
            header.append(" · " + one_line(f"ACP v{self.init.get('protocolVersion')} · {self.cwd}"), "dim")
            self.view.print(header, "banner")
            resume = self.options.resume
            if resume == "":  # --resume without an id: the recent sessions to choose from
                resume = await self.choices.choose_session(self.init, self.cwd)
            try:
                await self._open(resume=resume, latest=self.options.latest)
            except NoEarlierSession:
                self.view.note("No earlier session in this directory: a new one.")
                await self._open()
            mode = self.options.mode or ("read-only" if self.options.read_only else None)
            if mode:
                if self.state.modes and mode not in {m for m, _ in self.state.modes}:
                    known = ", ".join(m for m, _ in self.state.modes)
                    self.view.error(f"--mode {one_line(mode)}: the agent has no such mode ({known}).")
                    return EXIT_USAGE
                await self.choices.set_mode(mode)
                flag = "--read-only" if mode == "read-only" and not self.options.mode else "--mode"
                refused = ": changes are refused" if mode == "read-only" else ""
                self.view.note(f"Mode: {self.state.mode_name()} ({flag}){refused}.")
        except ConnectionClosed:
            self.view.error(AGENT_GONE)
            return EXIT_FAILED
        except (SessionError, RequestError) as exc:
            self.view.error(exc.message if isinstance(exc, RequestError) else str(exc))
            return EXIT_FAILED
        self.view.note("/help for commands, Ctrl-D to quit")
        self.view.console.print()
        return await self._loop(self.options.prompt)

    async def _loop(self, first: str | None = None) -> int:
        """Read and answer lines until the user quits; ``first``, if given, is the first line (from the
        command line: it was not typed at the prompt, so it is shown as the prompt's line)."""
        warned = False  # Ctrl-C on an empty line once already
        while not self._quit:
            try:
                text = first.strip() if first is not None else (await self.input.read()).strip()
                shown, first = first is not None, None
            except KeyboardInterrupt:
                if warned:
                    return EXIT_OK
                warned = True
                self.view.console.print(Text("(Ctrl-C again to quit, or Ctrl-D)", "dim"))
                continue
            except EOFError:
                return EXIT_OK
            warned = False
            if not text:
                continue
            if shown or not self.input.echoes:
                self.view.console.print(prompt_line(text))
            name, _, argument = text[1:].partition(" ") if text.startswith("/") else ("", "", "")
            if text.startswith("!") and text[1:].strip():
                await self._shell(text[1:].strip())
            elif name in PICKED and (name == "effort" or not argument or self.choices.full_access(name, argument)):
                await self._command(name, argument.strip())  # a picker (or full access, confirmed): the chat's
            elif name in CLIENT_NAMES:
                if name in ("quit", "exit"):
                    return EXIT_OK
                await self._command(name, argument.strip())
            elif self.state.commands and COMMAND_NAME.fullmatch(name) and name not in self._known():
                self._unknown(name)  # a typo must not cost a turn (nor reach the model as a prompt)
            else:
                await self._turn(text)
        return self.code

    def _known(self) -> list[str]:
        """The slash commands known here: the chat's own, then the agent's (its ``available_commands_update``)."""
        names = [c.name for c in CLIENT_COMMANDS] + [c.name for c in self.state.commands]
        return list(dict.fromkeys(names + list(PICKED)))

    def _unknown(self, name: str) -> None:
        """``/name`` is no command: refused here, with the closest one and the whole list."""
        known = self._known()
        close = difflib.get_close_matches(name, known, n=1)
        guess = f" Did you mean /{close[0]}?" if close else ""
        self.view.note(f"Unknown command /{one_line(name)}: not sent.{guess}", "yellow")
        self.view.note("Commands: " + ", ".join(f"/{one_line(n)}" for n in known) + " (/help says what each does).")
        self.view.console.print()

    async def _turn(self, text: str, *, mentions: str | None = None) -> None:
        """Send ``text`` as a prompt, with the files mentioned in ``mentions`` (by default what the user
        typed of ``text``; ``""``: none) attached, each asked for first where ``read_file`` would ask."""
        assert self.connection is not None
        images = bool((self.init.get("agentCapabilities") or {}).get("promptCapabilities", {}).get("image"))
        where = typed(text) if mentions is None else mentions
        paths = [m.path for m in await self._attached(where)]
        blocks = await anyio.to_thread.run_sync(lambda: prompt_blocks(text, paths, images=images))
        self.turn, self._cancel_sent = True, False
        self.client.new_turn()
        self.view.begin()
        result: Any = None
        error = ""
        params = {"sessionId": self.state.session_id, "prompt": blocks}
        self.prompted.add(self.state.session_id)
        try:
            async with self.input.during_turn(self.cancel_turn, self.view.tick):  # Esc cancels, as Ctrl-C does
                result = await self.connection.request("session/prompt", params)
        except ConnectionClosed:
            error = AGENT_GONE
            self.quit(EXIT_FAILED)
        except RequestError as exc:
            error = exc.message
        finally:
            self.turn = False
            self.view.end(result if isinstance(result, dict) else None, error=error)

    async def _attached(self, words: str) -> list[Mention]:
        """The files ``words`` mentions that go with the prompt: those ``read_file`` would read without
        asking, and those the user allows when asked (anything else stays text)."""
        if "@" not in words:
            return []
        found = await anyio.to_thread.run_sync(lambda: mentioned(words, self.cwd))
        chosen: list[Mention] = []
        for mention in found:
            if mention.asks:
                answer = await self.input.ask(f"{mention.asks} Attach it? [y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    self.view.note(f"@{mention.named} is not attached (the text names it).")
                    continue
            chosen.append(mention)
        return chosen

    # -- the chat's commands ---------------------------------------------------------------------

    async def _command(self, name: str, argument: str) -> None:
        try:
            if name == "help":
                self.view.console.print()  # apart from the prompt's line, as a turn's output is
                agent = [c for c in self.state.commands if c.name not in CLIENT_NAMES]
                self.view.print(help_block(CLIENT_COMMANDS, agent), "help")
            elif name == "sessions":
                await self._sessions()
            elif name == "resume":
                await self._resume(argument)
            elif name == "new":
                self.view.console.print()
                kept = (self.state.model_id, self.state.mode, self.state.effort)
                await self._open()
                await self.choices.keep(*kept)
            elif name in PICKED:
                self.view.console.print()
                await self.choices.pick(name, argument)
            elif name == "share":
                await self._share(argument)
                return
        except ConnectionClosed:
            self.view.error(AGENT_GONE)
            self.quit(EXIT_FAILED)
        except (SessionError, RequestError) as exc:
            self.view.error(exc.message if isinstance(exc, RequestError) else str(exc))
        self.view.console.print()

    async def _shell(self, command: str) -> None:
        """``!command``: run it in the user's shell, show what it printed, keep it for ``/share``
        (:mod:`refagent.client.chat_shell`); never sent to the model."""
        self.view.print(Text(f"$ {visible(command, layout=True)}", "bold"), "shell")
        self._shell_scope = anyio.CancelScope()
        run: ShellRun | None = None
        try:
            with self._shell_scope:
                run = await run_shell(command, self.cwd)
        except OSError as exc:
            self.view.error(f"Could not run it: {exc.strerror or exc}")
        finally:
            self._shell_scope = None
        if run is None:
            if not self._quit:
                self.view.note("Stopped.")
            self.view.console.print()
            return
        self.shell_run = run
        lines = run.output.rstrip("\n").splitlines()
        if lines:
            self.view.console.print(blocks.output_block(blocks.trim(lines)))  # under its command line
        ending = run.ending()
        self.view.console.print(
            Text(f"    {ending + ' · ' if ending else ''}not sent to the model (/share sends it)", "dim")
        )
        self.view.console.print()

    async def _share(self, words: str) -> None:
        """``/share [words]``: the last ``!command`` and its output, after ``words``, as a prompt."""
        if self.shell_run is None:
            self.view.note("Nothing to share yet: run a command with !, such as !git status.")
            self.view.console.print()
            return
        # The output is the command's, not the user's words: a "@~/.ssh/id_ed25519" in it is text.
        await self._turn(self.shell_run.prompt(words), mentions=words)

    async def _sessions(self) -> None:
        """``/sessions``: this directory's other sessions, newest first, numbered for ``/resume``."""
        assert self.connection is not None
        self.view.console.print()
        listed = await list_sessions(self.connection, self.init, self.cwd)
        self.state.listed = [e for e in listed if e.get("sessionId") != self.state.session_id]
        if not self.state.listed:
            self.view.note(f"No other saved session in {self.cwd}.")
            return
        self.view.print(sessions_block(self.state.listed), "sessions")
        self.view.note("/resume <id or number> goes on with one (Tab completes the ids).")

    async def _resume(self, wanted: str) -> None:
        if not wanted:
            await self._sessions()
            return
        if wanted.isdigit() and 1 <= int(wanted) <= len(self.state.listed):
            wanted = str(self.state.listed[int(wanted) - 1].get("sessionId"))
        if wanted == self.state.session_id:
            self.view.note("That is the session in use.")
            return
        await self._open(resume=wanted)

    async def _open(self, *, resume: str | None = None, latest: bool = False) -> None:
        """Open a session (new unless asked), draw its replayed history, and leave the previous one."""
        assert self.connection is not None
        previous = self.state.session_id
        reopening = resume is not None or latest
        self.client.accept = None  # the session being opened replays before its id is known
        if reopening:
            self.view.begin("Loading the session")
        try:
            opened = await open_session(
                self.connection, self.init, self.cwd, resume=resume, latest=latest, replay=True, before=self._resuming
            )
        finally:
            if reopening:
                self.view.end()
            self.client.accept = previous or None
        self.client.accept = opened.session_id
        self.state.adopt(opened.session_id, opened.result, str(opened.info.get("title") or ""))
        if opened.cwd != self.cwd:
            self.view.note(f"(in its own directory, {one_line(opened.cwd)})")
            self.cwd = self.view.cwd = self.state.cwd = opened.cwd
        if not opened.resumed:
            self.made.add(opened.session_id)
        if previous and previous != opened.session_id:
            await self._leave(previous, close=True)
        details = [f"model {self.state.model}" if self.state.model else "", f"mode {self.state.mode_name()}"]
        shown = "".join(f" · {d}" for d in details if d and not d.endswith(" "))
        if opened.resumed:  # its name came before its history (_resuming); what it runs on comes after
            self.view.print(Text(f"  {shown.removeprefix(' · ')}", "dim"), "session")
            return
        line = Text("New session ", "bold")
        line.append(one_line(opened.session_id), "cyan")
        if self.state.title:
            line.append(f" “{self.state.title}”")
        line.append(shown, "dim")
        self.view.print(line, "session")

    def _resuming(self, session_id: str, entry: dict[str, Any]) -> None:
        """Name the session being reopened before its history is drawn again (``open_session``'s
        ``before``)."""
        line = Text("Resumed session ", "bold")
        line.append(one_line(session_id), "cyan")
        title = entry.get("title")
        if isinstance(title, str) and title.strip():
            line.append(f" “{one_line(title)}”")
        self.view.print(line, "session")


def prompt_line(text: str) -> Table:
    """A prompt as it stays on the screen: ``› text`` (a long paste collapsed), in bold, wrapped between
    words (not where the terminal's edge falls), its later lines under the first."""
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(Text("› ", "bold cyan"), Text(visible(collapsed(text), layout=True), "bold"))
    return grid


class ChatConsole(Console):
    """The chat's console: when its reader goes away (``| head``), it goes quiet and calls ``on_closed``
    (the chat then quits) instead of raising :class:`SystemExit` in the middle of the event loop."""

    on_closed: Callable[[], None] | None = None

    def on_broken_pipe(self) -> None:
        self.quiet = True
        point_at_devnull(self.file.fileno())  # the interpreter's last flush must not fail on it either
        if self.on_closed is not None:
            self.on_closed()


async def chat(
    options: ChatOptions,
    view: ChatView,
    typed: ChatInput,
    state: ChatState | None = None,
    *,
    handle_signals: bool = True,
) -> int:
    """Run a chat until the user quits; returns the exit code. ``handle_signals``: SIGINT is Ctrl-C
    (:meth:`Chat.interrupt`), SIGTERM and SIGHUP quit."""
    the_chat = Chat(options, view, typed, state or ChatState())
    if isinstance(view.console, ChatConsole):
        view.console.on_closed = lambda: the_chat.quit(EXIT_OUTPUT_CLOSED)
    async with anyio.create_task_group() as tg:
        if handle_signals:
            tg.start_soon(on_signals, the_chat)
        tg.start_soon(_tick, view)
        code = await the_chat.run()
        tg.cancel_scope.cancel()
    return code


async def _tick(view: ChatView) -> None:
    while True:
        await anyio.sleep(TICK_SECONDS)
        view.tick()


# -- the command ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refagent chat",
        description="Talk with refagent in this terminal, turn after turn: it starts the agent and opens a "
        "session; type a task, watch it work, answer its permission questions with one key, no Enter (y = allow "
        "once, a = always allow, n = reject, v = never: always reject), go on. /help inside lists the commands "
        "and keys.",
        epilog="Exit code: 0 when you quit (/quit, Ctrl-D, Ctrl-C twice); 1 if the agent cannot start or the "
        "session cannot be opened; 2 bad usage; 141 stdout closed.",
    )
    parser.add_argument(
        "prompt", nargs="?", help='the first prompt, sent at once (refagent chat "fix the tests"); the chat goes on'
    )
    add_session_arguments(parser)
    parser.add_argument("--transcript", metavar="FILE", help=argparse.SUPPRESS)  # the wire as JSON lines, for tests
    return parser


def main(argv: list[str] | None = None) -> int:
    args, cwd = parse_session_args(build_parser(), argv)
    replace_unshowable(sys.stdout)
    state = ChatState()
    console = ChatConsole(highlight=False)
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    typed: ChatInput = (  # the question is a Text: "[y / a / n]" is not markup
        PromptInput(state, history_file(), echo=lambda text: console.print(prompt_line(text)))
        if terminal
        else LineInput(lambda text: console.print(Text(text), end=""))
    )
    with contextlib.ExitStack() as stack:
        transcript = stack.enter_context(open(args.transcript, "w", encoding="utf-8")) if args.transcript else None
        options = ChatOptions(cwd=cwd, transcript=transcript, prompt=args.prompt, **session_flags(args))
        if terminal:  # between prompts, what is typed waits unseen for the next one (prompt_toolkit restores this)
            stack.enter_context(quiet_tty())
        try:
            return anyio.run(chat, options, ChatView(console, cwd=cwd), typed, state)
        except KeyboardInterrupt:  # before the chat's own handling was in place
            return 130
