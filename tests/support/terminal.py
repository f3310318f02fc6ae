"""A ``refagent`` process on a pseudo-terminal, as a person runs it (``refagent login``, ``refagent chat``,
the agent typed in a terminal): what the user sees, and the keys they type.

Full-screen-ish programs (prompt_toolkit, rich's live displays) draw with escape sequences: with
``plain=True`` what :meth:`Terminal.expect` matches is the output without them (:func:`strip_ansi`). A
program that asks where the cursor is (``ESC [ 6 n``, as prompt_toolkit does) is answered, as a terminal
would, so that it neither waits nor warns.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erasing, modes
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks
    r"|\x1b[()][0-9A-Za-z]"  # character sets
    r"|\x1b[=>78DEHMNOZc\\]"  # the other two-character ones
    r"|\r"
)
CURSOR_QUERY = b"\x1b[6n"
CURSOR_ANSWER = b"\x1b[1;1R"
"""Where the cursor is, for a program that asks: the top left corner (the window is new)."""


def strip_ansi(text: str) -> str:
    """``text`` without escape sequences and carriage returns: what a reader sees, near enough to match."""
    return ANSI.sub("", text)


WRAPPER = (
    "import os, sys\n"
    "os.close(os.open(sys.argv[1], os.O_RDWR))\n"  # a session leader opening its terminal: its controlling tty
    "os.execv(sys.executable, [sys.executable, '-m', 'refagent', *sys.argv[2:]])\n"
)
"""Starts refagent with the pseudo-terminal as its controlling terminal, as a shell would (getpass reads
/dev/tty, and Ctrl-C reaches the terminal's foreground process group)."""


class Terminal:
    """A ``refagent`` process on a pseudo-terminal: what the user sees (stdout and echo), its stderr apart."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        stderr: Path,
        *,
        plain: bool = False,
        size: tuple[int, int] = (24, 100),
    ) -> None:
        """``size``: rows and columns. ``plain``: :meth:`expect` and :attr:`screen` without escape sequences."""
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
        self.plain = plain
        with stderr.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WRAPPER, os.ttyname(slave), *args],
                stdin=slave,
                stdout=slave,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        os.close(slave)
        self.stderr = stderr
        self.seen = b""
        self.mark = 0

    def expect(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        """Wait until ``pattern`` appears in what was shown since the last match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.screen[self.mark :])
            if found:
                self.mark += found.end()
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                raise AssertionError(f"never shown: {pattern!r}; the terminal showed:\n{self.screen}")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout: float = 20) -> int:
        while self._read(0.2):
            pass
        code = self.process.wait(timeout)
        while self._read(0.1):
            pass
        os.close(self.master)
        return code

    @property
    def screen(self) -> str:
        """Everything shown so far (without escape sequences, if ``plain``)."""
        shown = self.seen.decode("utf-8", "replace")
        return strip_ansi(shown) if self.plain else shown

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            return False
        asked = (self.seen[-3:] + data).count(CURSOR_QUERY)  # one split across two reads counts too
        self.seen += data
        for _ in range(asked):
            os.write(self.master, CURSOR_ANSWER)
        return bool(data)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
