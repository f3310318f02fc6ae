"""The session modes: how much the agent may do without asking (:mod:`refagent.tools.permissions` applies
them), each described as it works on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from refagent.confine.confinement import Support

if TYPE_CHECKING:  # an annotation (the TypedDicts are not needed to answer session/new)
    from refagent.acp.types import SessionMode


def modes_for(support: Support) -> list[SessionMode]:
    """The modes, each described as it works on this machine (``support``: how commands are confined)."""
    missing = support.missing("workspace")
    gaps = ", ".join(missing)
    if missing:
        auto = (
            f"Edit files inside the workspace without asking. Commands still ask: this machine cannot confine {gaps}."
        )
        full = f"Never ask. Commands are not fully confined on this machine ({gaps})."
    else:
        auto = (
            "Edit files and run sandboxed commands (writes only inside the workspace, no network) without "
            "asking; ask before deletions and before commands that need the network or no sandbox."
        )
        full = "Never ask. Commands still run sandboxed, unless the model asks for network access or none."
    return [
        {"id": "ask", "name": "Ask", "description": "Ask before every edit, deletion, move or command."},
        {
            "id": "accept-edits",
            "name": "Accept edits",
            "description": "Edit files inside the workspace without asking; still ask before commands.",
        },
        {"id": "auto", "name": "Auto", "description": auto},
        {
            "id": "read-only",
            "name": "Read only",
            "description": "Read and search only: every change is refused without asking, so the model can plan.",
        },
        {"id": "full-access", "name": "Full access", "description": full},
    ]


MODES = modes_for(Support(landlock=6, namespaces=True, netns=True))
"""The modes where commands are fully confined (their ids are the same everywhere)."""
DEFAULT_MODE = "ask"
MODE_IDS = frozenset(m["id"] for m in MODES)
