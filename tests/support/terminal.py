"""A ``refagent`` process on a pseudo-terminal, as a person runs it (``refagent login``, the agent typed in
a terminal): what the user sees, and the keys they type."""

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

WRAPPER = (
    "import os, sys\n"
    "os.close(os.open(sys.argv[1], os.O_RDWR))\n"  # a session leader opening its terminal: its controlling tty
    "os.execv(sys.executable, [sys.executable, '-m', 'refagent', *sys.argv[2:]])\n"
)
"""Starts refagent with the pseudo-terminal as its controlling terminal, as a shell would (getpass reads
/dev/tty, and Ctrl-C reaches the terminal's foreground process group)."""


class Terminal:
    """A ``refagent`` process on a pseudo-terminal: what the user sees (stdout and echo), its stderr apart."""

    def __init__(self, args: list[str], env: dict[str, str], stderr: Path) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
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
        return self.seen.decode("utf-8", "replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            return False
        self.seen += data
        return bool(data)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
