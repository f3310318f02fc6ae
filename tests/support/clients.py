"""The agent-side client over a test's peer (:class:`refagent.acp.client.SessionClient`), with the
capabilities a test's editor advertises."""

from __future__ import annotations

from refagent.acp.client import SessionClient
from refagent.acp.connection import Peer
from refagent.acp.types import ClientCapabilities

EVERYTHING: ClientCapabilities = {
    "fs": {"readTextFile": True, "writeTextFile": True},
    "terminal": True,
    "elicitation": {"form": {}},
}
"""An editor that offers its files, its terminals and forms."""


def session_client(peer: Peer, session_id: str = "s", capabilities: ClientCapabilities | None = None) -> SessionClient:
    """The client of session ``session_id`` over ``peer`` (by default one that offers everything)."""
    return SessionClient(peer, session_id, EVERYTHING if capabilities is None else capabilities)
