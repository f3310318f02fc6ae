"""The Agent Client Protocol layer: wire types, JSON-RPC framing and the connection.

Imports nothing else of refagent and never touches stdio or the model; the rest of the package imports it.
"""

PROTOCOL_VERSION = 1
"""The ACP version refagent speaks (the answer to ``initialize`` whatever the client asks for)."""
