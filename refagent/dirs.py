"""The user's directories refagent keeps its files in: config (``config.toml``), data (the saved sessions)
and state (the chat's history), as ``platformdirs`` names them for the application ``refagent``.

On Linux they are the XDG base directories, computed here: ``$XDG_CONFIG_HOME`` (``$XDG_DATA_HOME``,
``$XDG_STATE_HOME``) when it is an absolute path, else ``~/.config`` (``~/.local/share``,
``~/.local/state``) under an absolute ``$HOME``; then ``refagent``. The config directory is needed before
the editor's ``initialize`` can be answered, and importing ``platformdirs`` (with ``pathlib``,
``tempfile`` and ``random``) costs some 10 ms of that answer. Anywhere else, and on Linux without an
absolute ``$HOME`` (where ``platformdirs`` asks the password database), ``platformdirs`` answers.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

APP = "refagent"

Kind = Literal["config", "data", "state"]

_XDG = {
    "config": ("XDG_CONFIG_HOME", ".config"),
    "data": ("XDG_DATA_HOME", ".local/share"),
    "state": ("XDG_STATE_HOME", ".local/state"),
}


def user_dir(kind: Kind) -> str:
    """The user's ``kind`` directory for refagent: ``config``, ``data`` or ``state`` (``platformdirs``'
    ``user_config_dir("refagent")``...). Raises what ``platformdirs`` raises when there is none (no home
    directory); may be relative in a trimmed environment (callers check)."""
    variable, default = _XDG[kind]
    if sys.platform == "linux":
        base = os.environ.get(variable, "")
        if os.path.isabs(base):
            return os.path.join(base, APP)
        home = os.environ.get("HOME", "")
        if os.path.isabs(home):
            return os.path.join(home.rstrip("/") or "/", default, APP)
    import platformdirs  # here: not where $HOME or XDG answers, as on Linux before the first answer (7.5 ms)

    return str(getattr(platformdirs, f"user_{kind}_dir")(APP))
