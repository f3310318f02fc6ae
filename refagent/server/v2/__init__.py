"""ACP v2 (the draft), served beside v1 from the same session machinery, behind a flag while the draft
moves: set ``REFAGENT_ACP_V2=1`` and a client that asks for version 2 in ``initialize`` gets it
(:mod:`refagent.server.v2.bridge`); without the flag, or for a client that asks for 1, everything is v1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "REFAGENT_ACP_V2"


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether v2 is offered (``REFAGENT_ACP_V2`` set to 1, true, yes or on)."""
    return environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def wants_v2(params: object) -> bool:
    """Whether an ``initialize``'s params ask for version 2 or later, and v2 is offered."""
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    return isinstance(version, int) and not isinstance(version, bool) and version >= 2 and enabled()
