"""The Agent Client Protocol layer: wire types, JSON-RPC framing and the connection.

Imports nothing else of refagent and never touches stdio or the model; the rest of the package imports it.
"""

PROTOCOL_VERSION = 1
"""The ACP version refagent speaks (the answer to ``initialize`` whatever the client asks for)."""

MAX_LINE_BYTES = 256 << 20
"""The longest line a reader passes on (a prompt with a large image inline is some tens of MiB); a longer
one is discarded as it is read, and :data:`LINE_TOO_LONG` is passed on in its place."""
LINE_TOO_LONG = b"\x00 line too long"
"""What a reader passes on for a line it discarded (:data:`MAX_LINE_BYTES`); no JSON text starts so, and
:func:`refagent.acp.jsonrpc.parse_line` answers it with an error."""
