"""``!command``: a line for the user's own shell, run from the chat as the user would run it in a terminal
(``$SHELL -c``, in the chat's directory, with the user's environment: unconfined, the user's own act), its
output shown and kept, never sent to the model. ``/share [words]`` sends the last one, command and
output, as a prompt (the words first).

stdin is ``/dev/null`` (the chat owns the terminal); the output is read whole but kept to its first and
last :data:`KEPT_BYTES` bytes; Ctrl-C kills the command's process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

import anyio

KEPT_BYTES = 20_000
"""What is kept of a command's output, at each end (:class:`~refagent.sandbox.confine.process.KeptOutput`)."""


@dataclass(frozen=True, slots=True)
class ShellRun:
    """One ``!command``: what ran, what it printed (stdout and stderr merged, head and tail), how it ended."""

    command: str
    output: str
    exit_code: int | None
    signal: str | None = None

    def ending(self) -> str:
        """``exit 3``, ``killed by SIGTERM``; ``""`` for a success."""
        if self.signal:
            return f"killed by {self.signal}"
        return "" if self.exit_code == 0 else f"exit {self.exit_code}"

    def prompt(self, words: str) -> str:
        """The prompt ``/share`` sends: the user's words, then the command and its output."""
        from refagent.tools.text import fenced  # here: the chat starts without the tools' modules (4.3 ms)

        ending = f" ({self.ending()})" if self.ending() else ""
        shared = f"I ran `{self.command}` in my shell{ending}. Its output:\n{fenced(self.output.rstrip())}"
        return f"{words}\n\n{shared}" if words else shared


def user_shell() -> str:
    """The user's shell (``$SHELL``), else ``/bin/sh``."""
    shell = os.environ.get("SHELL", "")
    return shell if os.path.isabs(shell) and os.access(shell, os.X_OK) else "/bin/sh"


async def run_shell(command: str, cwd: str) -> ShellRun:
    """Run ``command`` with the user's shell in ``cwd``; cancellation kills its process group."""
    process = await anyio.open_process(
        [user_shell(), "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    from refagent.sandbox.confine.process import KeptOutput  # here: the chat starts without the sandbox's (7.3 ms)

    kept = KeptOutput(2 * KEPT_BYTES)
    try:
        assert process.stdout is not None
        async for chunk in process.stdout:
            kept.feed(chunk)
        await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                _kill(process.pid)
            await process.aclose()
    text, _ = kept.text()
    code = process.returncode
    if code is not None and code < 0:
        return ShellRun(command, text, None, signal.Signals(-code).name)
    return ShellRun(command, text, code)


def _kill(pgid: int) -> None:
    for number in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, number)
        except (ProcessLookupError, PermissionError):
            return
