"""The keys typed while a turn of ``refagent chat`` runs, on a terminal: Esc interrupts the turn, and what
else is typed is the next prompt, written ahead (shown under the spinner) and, once Enter is pressed,
queued: sent as soon as the turn ends.

Between prompts nothing else reads the terminal (prompt_toolkit reads it only while a prompt or a question
is on the screen), and :func:`~refagent.client.chat_input.quiet_tty` keeps it unechoed and unbuffered, so
:class:`TurnKeys` reads it itself, byte by byte as they come, from the start of a turn to its end, but
never while a permission question is asked (:meth:`TurnKeys.pause`: prompt_toolkit then owns the terminal,
and the event loop takes one reader per file descriptor).

The contract:

- an Esc that no other byte follows within :data:`ESCAPE_WAIT` seconds (an arrow key or an Alt-key also
  starts with Esc, and its bytes come together) calls ``on_escape`` (the chat sends ``session/cancel``); other escape
  sequences are dropped;
- printable text is added to :attr:`TurnKeys.draft`; Backspace takes back a character, Ctrl-U clears the
  draft (and unqueues it), Ctrl-W takes back a word; Alt-Enter, and a line break inside a paste, is a new
  line; Ctrl-C is not seen here (the terminal sends SIGINT);
- Enter pressed alone, with something in the draft, queues it (:attr:`TurnKeys.queued`): the chat sends it
  when the turn ends, unless the turn was interrupted (then it comes back to be edited, not sent);
- ``on_change`` is called after each change, so that the draft can be drawn.

A draft not queued becomes the start of the next prompt, where it is edited as any prompt is.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Awaitable, Callable

import anyio

ESC = "\x1b"
ESCAPE_WAIT = 0.05
"""How long a lone Esc waits for the rest of a sequence (terminals send a key's sequence at once)."""
READ_BYTES = 4096


class TurnKeys:
    """Reads the terminal ``fd`` while :meth:`run` runs (see the module docstring)."""

    def __init__(
        self, fd: int, on_escape: Callable[[], Awaitable[None]], on_change: Callable[[], None] = lambda: None
    ) -> None:
        self.fd = fd
        self.on_escape = on_escape
        self.on_change = on_change
        self.draft = ""
        self.queued = False
        """Enter was pressed: the draft is the next prompt, sent when the turn ends."""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._paused = False
        self._resumed = anyio.Event()
        self._waiting: anyio.CancelScope | None = None
        self._left = anyio.Event()
        """Set when the wait in progress has ended (its reader is off the event loop)."""

    async def pause(self) -> None:
        """Stop reading (a question takes the terminal) until :meth:`resume`. A wait in progress is cancelled,
        and waited for: the event loop keeps one reader per file descriptor, and this one, taken off after
        the question's was put on, would take that one off instead (the question would never hear a key)."""
        self._paused = True
        self._resumed = anyio.Event()
        if self._waiting is not None:
            self._waiting.cancel()
            await self._left.wait()

    def resume(self) -> None:
        self._paused = False
        self._resumed.set()

    async def run(self) -> None:
        """Read until cancelled."""
        while True:
            if self._paused:
                await self._resumed.wait()
                continue
            if not await self._readable():
                continue
            data = self._read()
            if data.endswith(ESC):  # Esc, or the start of a key's sequence: the rest comes at once, if any
                with anyio.move_on_after(ESCAPE_WAIT):
                    if await self._readable():
                        data += self._read()
            escaped = data.endswith(ESC)
            if self.feed(data.removesuffix(ESC) if escaped else data):
                self.on_change()
            if escaped:
                await self.on_escape()

    async def _readable(self) -> bool:
        """Wait for a byte to read; False if paused meanwhile."""
        self._left = anyio.Event()
        try:
            with anyio.CancelScope() as self._waiting:
                await anyio.wait_readable(self.fd)
        finally:
            self._waiting = None
            self._left.set()
        return not self._paused

    def _read(self) -> str:
        try:
            return self._decoder.decode(os.read(self.fd, READ_BYTES))
        except OSError:  # the terminal went away: nothing more to read
            return ""

    def feed(self, data: str) -> bool:
        """Take what was typed into the draft; whether it changed."""
        before = (self.draft, self.queued)
        enter = data in ("\r", "\n", "\r\n")  # a key pressed, not a line break inside a paste
        if enter:
            self.queued = self.queued or bool(self.draft.strip())
            return (self.draft, self.queued) != before
        index = 0
        while index < len(data):
            char = data[index]
            index += 1
            if char == ESC:  # a key's sequence (an arrow, Alt-x): CSI or SS3 and what follows, dropped
                if index < len(data) and data[index] in "\r\n":  # Alt-Enter: a new line, as at the prompt
                    self.draft += "\n"
                elif index < len(data) and data[index] in "[O":
                    index += 1
                    while index < len(data) and not ("@" <= data[index] <= "~"):
                        index += 1
                index += 1
            elif char in ("\x7f", "\x08"):
                self.draft = self.draft[:-1]
            elif char == "\x15":  # Ctrl-U
                self.draft, self.queued = "", False
            elif char == "\x17":  # Ctrl-W
                self.draft = self.draft.rstrip()
                self.draft = self.draft[: self.draft.rfind(" ") + 1]
            elif char in ("\r", "\n"):
                self.draft += "\n"
            elif char == "\t" or char.isprintable():
                self.draft += char
        self.queued = self.queued and bool(self.draft.strip())
        return (self.draft, self.queued) != before

    def take(self) -> tuple[str, bool]:
        """The draft and whether it is queued, which this reader forgets."""
        taken = (self.draft, self.queued)
        self.draft, self.queued = "", False
        return taken
