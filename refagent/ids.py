"""Unique ids for sessions, messages and tool calls."""

from __future__ import annotations

import os


def new_id(prefix: str) -> str:
    """``prefix_<32 hex digits>``: 128 random bits, unique without coordination, opaque to clients.

    ``os.urandom`` rather than ``uuid.uuid4``: the same randomness and length, without importing ``uuid``
    (which brings ``platform``, a few milliseconds on the way to the first ``session/new`` response)."""
    return f"{prefix}_{os.urandom(16).hex()}"
