"""The sandbox probe's child process: started as soon as the agent starts, read when first needed.

What this machine can confine (:func:`refagent.sandbox.confine.confinement.machine_support`) is found by a
throwaway child, the launcher's ``--probe`` (some 30 ms, most of it the child interpreter's start). The
CLI starts it (:func:`start`) before it reads the editor's first line, so that it runs on another core
while ``initialize`` is answered and is done by the first ``session/new``, whose modes describe what it
found. Starting it costs the editor next to nothing: this module imports only modules the interpreter
has loaded or has built in, and spawns with ``os.posix_spawn``, not :mod:`subprocess`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
"""The launcher (:mod:`refagent.sandbox.confine.launcher`), run as a script by a bare interpreter."""

_started: list[tuple[int, int]] = []
"""The probe started by :func:`start` (its pid, the read end of its stdout), until :func:`output` reads it."""


def start() -> None:
    """Start the probe now, without waiting for it (once: later calls do nothing while one is started).
    Only Linux probes; a probe that cannot be started is started again, and its failure told, by
    :func:`output`."""
    if sys.platform.startswith("linux") and sys.executable and not _started:
        with contextlib.suppress(OSError):
            _started.append(_spawn())


def output(timeout: float) -> str:
    """What the probe printed: the one :func:`start` started, or one started now. Waits for it to end,
    ``timeout`` seconds at most; raises :class:`TimeoutError` (the probe killed) or :class:`OSError`."""
    pid, fd = _started.pop() if _started else _spawn()
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"the sandbox probe took more than {timeout:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return b"".join(chunks).decode("utf-8", "replace")


def _spawn() -> tuple[int, int]:
    """Spawn the probe with its stdout on a pipe (stdin and stderr on ``/dev/null``): (pid, read end)."""
    read_fd, write_fd = os.pipe()  # both close on exec: the child gets the write end as its fd 1 only
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", LAUNCHER, "--probe"],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_fd, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except OSError:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return pid, read_fd
