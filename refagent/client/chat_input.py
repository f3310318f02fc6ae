"""What ``refagent chat`` reads: the prompt (prompt_toolkit) and the answers to permission questions.

:class:`PromptInput`, on a terminal: line editing, a history kept across chats (:func:`history_file`),
Enter sends, Alt-Enter (Esc Enter) or a line ending in ``\\`` inserts a new line, pasted text keeps its
lines (bracketed paste), Tab completes slash commands and their arguments (:class:`SlashCompleter`), and
the bottom toolbar shows the session's status (:meth:`~refagent.client.chat_state.ChatState.status`).
Ctrl-C clears the line; on an empty line it raises :class:`KeyboardInterrupt` (twice quits: the chat's
decision), Ctrl-D on an empty line :class:`EOFError`. :class:`LineInput` reads plain lines instead, when
stdin or stdout is not a terminal (a script).

What the completions and the toolbar show of the agent's (commands, modes, models) comes from the
:class:`~refagent.client.chat_state.ChatState`, which keeps it on one line with its control characters
made visible; the ids and titles of ``/sessions`` are made so here (prompt_toolkit would draw an ESC as
``^[`` anyway, but the chat shows one form everywhere: ``\\x1b``).

prompt_toolkit runs on the event loop anyio runs (asyncio). It is never asked to handle SIGINT
(``handle_sigint=False``): the chat's own signal receiver must stay in place, and at the prompt the
terminal is in raw mode, where Ctrl-C is a key, not a signal. Between prompts (a turn) prompt_toolkit does
not read the terminal: :func:`quiet_tty` keeps it from echoing what is typed over the output, Ctrl-C is
then SIGINT, and :meth:`PromptInput.during_turn` reads the keys (:mod:`refagent.client.chat_keys`): Esc
interrupts the turn, and what else is typed starts the next prompt.
"""

from __future__ import annotations

import contextlib
import os
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal, set_app
from prompt_toolkit.buffer import Buffer, CompletionState
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.enums import DEFAULT_BUFFER
from prompt_toolkit.filters import has_focus
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.styles import Style

from refagent.acp.text import one_line, visible
from refagent.client.chat_blocks import ago
from refagent.client.chat_keys import TurnKeys
from refagent.client.chat_state import CLIENT_COMMANDS, ChatState, Command
from refagent.client.clipboard import clipboard_image
from refagent.client.handler import StdinLines
from refagent.client.mentions import WorkspaceIndex, dropped, mention, mention_at
from refagent.client.pastes import Pastes
from refagent.dirs import user_dir

PROMPT: StyleAndTextTuples = [("class:prompt", "› ")]
STYLE = Style.from_dict(
    {
        "prompt": "bold ansicyan",
        "question": "bold ansimagenta",
        "bottom-toolbar": "noreverse",
        "toolbar.status": "ansicyan",
        "toolbar.hint": "ansibrightblack",
    }
)


class ChatInput(Protocol):
    """Where the chat's prompts and answers come from."""

    echoes: bool
    """Whether what is typed stays on the screen (a terminal's prompt does; plain lines do not)."""

    async def read(self) -> str:
        """The next prompt. Raises :class:`KeyboardInterrupt` (Ctrl-C on an empty line), :class:`EOFError`."""
        ...

    async def ask(self, question: str) -> str:
        """The answer to ``question``. Raises as :meth:`read` does."""
        ...

    async def key(self, question: str, keys: str) -> str:
        """One of ``keys`` (characters), pressed after ``question``: on a terminal no Enter is needed, and
        other keys are ignored; elsewhere a line, which the caller checks. Raises as :meth:`read` does."""
        ...

    async def above(self, draw: Callable[[], None]) -> None:
        """Run ``draw`` (which prints) above the prompt, if one is being edited."""
        ...

    interrupt_key: str
    """The key that interrupts a turn (``Esc`` where the terminal is read during turns, else ``Ctrl-C``)."""

    def during_turn(
        self, on_escape: Callable[[], Awaitable[None]], on_change: Callable[[], None]
    ) -> AbstractAsyncContextManager[None]:
        """While a turn runs: Esc calls ``on_escape``; what is typed is kept for the next prompt (queued, with
        Enter: then :meth:`read` sends it at once), ``on_change`` called when it changes."""
        ...

    def typed_ahead(self) -> tuple[str, bool]:
        """What was typed during this turn so far, and whether it is queued."""
        ...

    def hold(self) -> None:
        """The turn is being cancelled: a queued prompt is not sent when it ends, but comes back to be edited."""
        ...


def history_file() -> Path | None:
    """``chat_history`` in the user state directory (``~/.local/state/refagent`` on Linux), made private:
    prompts can hold anything. ``None`` when there is no usable directory (the history is then kept in
    memory, for this chat only)."""
    try:
        directory = Path(user_dir("state"))
        if not directory.is_absolute():
            return None
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = directory / "chat_history"
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except Exception:  # a read-only home, no home at all: a chat without a saved history, not no chat
        return None
    return path


class SlashCompleter(Completer):
    """Completes ``/name`` from the chat's commands and the agent's (with their descriptions), then the
    argument of ``/resume`` (the ids of the last ``/sessions``), ``/mode`` and ``/model``."""

    def __init__(self, state: ChatState) -> None:
        self.state = state
        self._index: WorkspaceIndex | None = None

    def commands(self) -> list[Command]:
        agent = [c for c in self.state.commands if c.name not in {k.name for k in CLIENT_COMMANDS}]
        return [*CLIENT_COMMANDS, *agent]

    def takes_argument(self, name: str) -> bool:
        return any(c.name == name and c.hint for c in self.commands()) or name in ("mode", "model")

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        fragment = mention_at(text)
        if fragment is not None and self.state.cwd:
            yield from self._paths(fragment)
            return
        if not text.startswith("/") or "\n" in text:
            return
        name, space, argument = text[1:].partition(" ")
        if not space:
            for command in self.commands():
                if command.name.startswith(name):
                    yield Completion("/" + command.name, -len(text), display_meta=command.description)
            return
        for value, meta in self._arguments(name):
            if value.startswith(argument):
                yield Completion(value, -len(argument), display_meta=meta)

    def _paths(self, fragment: str) -> Iterable[Completion]:
        """``@`` mentions: the workspace's paths ``fragment`` may mean (:mod:`refagent.client.mentions`)."""
        if self._index is None or self._index.root != os.path.realpath(self.state.cwd):
            self._index = WorkspaceIndex(self.state.cwd)
        for path in self._index.complete(fragment):
            meta = "directory" if path.endswith("/") else "file"
            yield Completion("@" + path, -len(fragment) - 1, display=visible(path), display_meta=meta)

    def _arguments(self, name: str) -> list[tuple[str, str]]:
        if name == "resume":
            return [(one_line(str(e.get("sessionId"))), _describe(e)) for e in self.state.listed]
        if name == "mode":
            return self.state.modes
        if name == "model":
            return self.state.models
        if name == "effort":
            return self.state.efforts
        return []


def _describe(entry: dict[str, Any]) -> str:
    """A listed session, beside its id in the completions: when, and its title (on one line, visible)."""
    return " · ".join(filter(None, [ago(entry.get("updatedAt")), one_line(str(entry.get("title") or ""))]))


def _bindings(completer: SlashCompleter, pastes: Pastes) -> KeyBindings:
    keys = KeyBindings()
    editing = has_focus(DEFAULT_BUFFER)

    @keys.add("c-v", filter=editing, eager=True)  # before the page navigation that Emacs mode binds to it
    def _paste_image(event: KeyPressEvent) -> None:
        try:
            image = clipboard_image()
        except OSError:
            image = None
        if image is not None:  # mentioned like a file: sent as an image where the model takes them
            event.current_buffer.insert_text(mention(image))

    @keys.add(Keys.BracketedPaste, filter=editing)
    def _paste(event: KeyPressEvent) -> None:
        # A file dragged onto the terminal (its path pasted) is mentioned; a long paste is its placeholder.
        event.current_buffer.insert_text(dropped(event.data) or pastes.add(event.data))

    @keys.add("escape", "enter", filter=editing)  # Alt-Enter: most terminals send Esc then Enter
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    def take(buffer: Buffer, completion: Completion) -> bool:
        """Apply ``completion``; a command that takes an argument gets its space. Whether it did."""
        buffer.apply_completion(completion)
        name = buffer.text[1:].strip()
        if buffer.text.startswith("/") and " " not in buffer.text and completer.takes_argument(name):
            buffer.insert_text(" ")  # and go on to its argument
            return True
        return False

    def only(buffer: Buffer) -> Completion | None:
        """The one completion of what is typed, if there is exactly one that changes it (asked of the
        completer now: the menu's own list may not have been made yet)."""
        found = list(completer.get_completions(buffer.document, CompleteEvent()))
        if len(found) != 1:
            return None
        completion = found[0]
        before = buffer.document.text_before_cursor
        changed = before[: len(before) + completion.start_position] + completion.text != before
        return completion if changed else None

    def chosen(buffer: Buffer) -> Completion | None:
        """The completion Enter or Tab takes: the one selected in the menu, or the only one there is."""
        state: CompletionState | None = buffer.complete_state
        if state is not None and state.current_completion is not None:
            return state.current_completion
        return only(buffer)

    @keys.add("tab", filter=editing)
    def _tab(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        completion = only(buffer)
        if completion is not None:  # the only match: completed at once, not selected first
            take(buffer, completion)
        elif buffer.complete_state is None:
            buffer.start_completion(insert_common_part=True)
        else:
            buffer.complete_next()

    @keys.add("enter", filter=editing)
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        completion = chosen(buffer)
        if completion is not None:  # the menu's choice, or its only entry: take it, not the half-typed word
            if take(buffer, completion):
                return
        elif buffer.document.is_cursor_at_the_end and buffer.text.endswith("\\"):
            buffer.delete_before_cursor()  # a line continued, as in a shell
            buffer.insert_text("\n")
            return
        buffer.validate_and_handle()

    @keys.add("s-tab", filter=editing)
    def _next_mode(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.complete_state is not None:  # a menu is open: Shift-Tab goes back in it
            buffer.complete_previous()
            return
        following = completer.state.next_mode()
        if buffer.text or following is None:
            return  # a line being written is not thrown away; a session with one mode has nothing to cycle
        buffer.text = f"/mode {following}"  # sent as typed: the agent switches and says so in the thread
        buffer.validate_and_handle()

    @keys.add("c-c", filter=editing)
    def _interrupt(event: KeyPressEvent) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()  # Ctrl-C clears the line; on an empty one it means "quit?"
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    return keys


class PromptInput:
    """The chat's input on a terminal (see the module docstring)."""

    echoes = True
    interrupt_key = "Esc"

    def __init__(
        self, state: ChatState, history: Path | None = None, echo: Callable[[str], None] | None = None
    ) -> None:
        """``echo``: prints a prompt once it is sent. prompt_toolkit wraps what is typed where the
        terminal's edge falls, mid-word; with ``echo`` its drawing is erased when the prompt is sent and
        ``echo`` prints it again, wrapped between words."""
        self.state = state
        self.echo = echo
        completer = SlashCompleter(state)
        self.pastes = Pastes()
        saved: History = FileHistory(str(history)) if history is not None else InMemoryHistory()
        self.session: PromptSession[str] = PromptSession(
            history=saved,
            completer=completer,
            complete_while_typing=True,
            key_bindings=_bindings(completer, self.pastes),
            bottom_toolbar=self._toolbar,
            prompt_continuation=lambda width, line, wrapped: "  ",
            style=STYLE,
            reserve_space_for_menu=6,
            enable_open_in_editor=True,
            erase_when_done=echo is not None,
        )
        self.questions: PromptSession[str] = PromptSession(style=STYLE)
        self.keys: TurnKeys | None = None
        """The reader of the keys typed during the turn that runs (:mod:`refagent.client.chat_keys`)."""
        self.draft = ""
        """What was typed during the last turn: the next prompt starts with it."""
        self.queued = False
        """Enter was pressed after it: the next prompt is the draft, sent without waiting."""
        self._hold = False

    def _toolbar(self) -> StyleAndTextTuples:
        status = self.state.status()
        return [("class:toolbar.status", f" {status}"), ("class:toolbar.hint", "  ·  /help · Ctrl-D quits")]

    async def read(self) -> str:
        (draft, self.draft), (queued, self.queued) = (self.draft, ""), (self.queued, False)
        # A queued prompt is drawn as the prompt it is, and taken at once (accept_default).
        text = await self.session.prompt_async(PROMPT, default=draft, accept_default=queued, handle_sigint=False)
        if self.echo is not None and text.strip():
            self.echo(text.strip())  # as pasted: a long paste stays collapsed on the screen
        return self.pastes.expand(text)

    async def ask(self, question: str) -> str:
        if self.keys is not None:
            await self.keys.pause()  # the question reads the terminal now
        try:
            return await self.questions.prompt_async([("class:question", question)], handle_sigint=False)
        finally:
            if self.keys is not None:
                self.keys.resume()

    def typed_ahead(self) -> tuple[str, bool]:
        return (self.keys.draft, self.keys.queued) if self.keys is not None else ("", False)

    def hold(self) -> None:
        self._hold = True

    async def key(self, question: str, keys: str) -> str:
        bindings = KeyBindings()
        for char in keys:
            bindings.add(char)(lambda event: event.app.exit(result=event.data))  # taken at once: no Enter
        for ignored in (Keys.Any, "enter"):  # another key, or Enter alone, answers nothing
            bindings.add(ignored)(lambda event: None)
        if self.keys is not None:
            await self.keys.pause()  # the question reads the terminal now
        try:
            answer = await self.questions.prompt_async(
                [("class:question", question)], key_bindings=bindings, handle_sigint=False
            )
        finally:
            if self.keys is not None:
                self.keys.resume()
        return answer

    @contextlib.asynccontextmanager
    async def during_turn(
        self, on_escape: Callable[[], Awaitable[None]], on_change: Callable[[], None]
    ) -> AsyncIterator[None]:
        keys = self.keys = TurnKeys(0, on_escape, on_change)
        self._hold = False
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(keys.run)
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()  # its reader leaves the event loop before the prompt's comes
        finally:
            self.keys = None
            draft, queued = keys.take()
            self.draft += draft
            self.queued = queued and not self._hold

    async def above(self, draw: Callable[[], None]) -> None:
        app = self.session.app
        if not app.is_running:
            draw()
            return
        with set_app(app):  # this runs in a connection task, which does not see the prompt's context
            await run_in_terminal(draw)


class LineInput:
    """Prompts and answers as lines of stdin, when it or stdout is not a terminal; end of input quits."""

    echoes = False
    interrupt_key = "Ctrl-C"

    @contextlib.asynccontextmanager
    async def during_turn(
        self, on_escape: Callable[[], Awaitable[None]], on_change: Callable[[], None]
    ) -> AsyncIterator[None]:
        yield  # lines are read only when asked for: a script has no Esc key, and its next line waits

    def typed_ahead(self) -> tuple[str, bool]:
        return "", False

    def hold(self) -> None:
        pass

    def __init__(self, write: Callable[[str], None]) -> None:
        self.lines = StdinLines()
        self.write = write

    async def read(self) -> str:
        return await self._line()

    async def ask(self, question: str) -> str:
        self.write(question)
        return await self._line()

    async def key(self, question: str, keys: str) -> str:
        return await self.ask(question)

    async def _line(self) -> str:
        line = await self.lines.read_line()
        if line is None:
            raise EOFError
        return line

    async def above(self, draw: Callable[[], None]) -> None:
        draw()


@contextlib.contextmanager
def quiet_tty(fd: int = 0) -> Iterator[None]:
    """No echo and no line buffering on the terminal ``fd`` (typing waits, unseen, for the next prompt),
    signals kept (Ctrl-C is SIGINT); as it was afterwards. Nothing if ``fd`` is not a terminal.

    The chat is in this state all along: each prompt saves it, goes raw, and comes back to it."""
    try:
        saved = termios.tcgetattr(fd)
    except (termios.error, OSError):
        yield
        return
    quiet = [*saved[:6], list(saved[6])]
    quiet[3] = saved[3] & ~(termios.ECHO | termios.ICANON)
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
