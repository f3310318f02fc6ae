"""The agent's logs, set up when first needed: :mod:`logging` is not imported on the way to the editor's
first answers.

Importing :mod:`logging` (with :mod:`traceback`, :mod:`threading`, :mod:`string`...) costs some 5 ms, and
nothing logs on the way to the ``initialize`` and first ``session/new`` responses unless something is
wrong. So the CLI says where logs go with :func:`configure`, which only records it; the configuration
takes effect the first time a module of that path asks for a logger (:func:`logger`), or when start-up
(:mod:`refagent.server.boot`), its early answers written, calls :func:`ready` before it starts the event
loop. Modules off that path use ``logging.getLogger`` as usual.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_wanted: list[tuple[str, str | None]] = []
"""The configuration :func:`configure` recorded, until :func:`ready` applies it."""


def configure(level: str, log_file: str | None) -> None:
    """Send log records at ``level`` (``debug``, ``info``...) and above to ``log_file`` (appended), or to
    stderr if it is None, from the next :func:`logger` or :func:`ready` on."""
    _wanted[:] = [(level, log_file)]


def ready() -> None:
    """Apply what :func:`configure` recorded, if it has not been applied: the root logger gets the handler
    and the level. (It imports :mod:`logging`.)"""
    if not _wanted:
        return
    import logging  # here: only once something logs, never before the first answer without warnings (3.6 ms)

    level, log_file = _wanted.pop()
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, the configuration applied first (:func:`ready`)."""
    ready()
    import logging  # here: kept off this module's import (3.6 ms, see ready()), which loaded it

    return logging.getLogger(name)
