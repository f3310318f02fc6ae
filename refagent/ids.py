"""Unique ids for sessions, messages and tool calls."""

from __future__ import annotations

import uuid


def new_id(prefix: str) -> str:
    """``prefix_<32 hex digits>``: unique without coordination, opaque to clients."""
    return f"{prefix}_{uuid.uuid4().hex}"
