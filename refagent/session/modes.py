"""The session modes as the client sees them: each mode of :mod:`refagent.tools.modes` (where a mode is
defined, with what it lets run without asking, which :mod:`refagent.tools.permissions` applies), described
as it works on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from refagent.sandbox.holding import Holding
from refagent.tools.modes import DEFAULT, MODES

if TYPE_CHECKING:  # an annotation (the TypedDicts are not needed to answer session/new)
    from refagent.acp.types import SessionMode


def modes_for(holding: Holding) -> list[SessionMode]:
    """The modes, each described as it works with this sandbox (``holding``: how far it holds commands)."""
    gaps = holding.missing("workspace")
    return [{"id": mode.id, "name": mode.name, "description": mode.describe(gaps)} for mode in MODES]


DEFAULT_MODE = DEFAULT.id
MODE_IDS = frozenset(mode.id for mode in MODES)
"""The ids of the modes (the same on every machine)."""
