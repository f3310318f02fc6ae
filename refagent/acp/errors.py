"""The one exception tree of refagent's protocol layer.

Every error that crosses the JSON-RPC boundary is a :class:`RequestError` (or a subclass) carrying the
code from the schema's ``ErrorCode``. Handlers raise them; :mod:`refagent.acp.connection` turns them into
error responses exactly once. Anything else a handler raises becomes ``-32603`` with a generic message: a
Python traceback never reaches the client (it goes to the log).

    RequestError                  any JSON-RPC error, code and message as sent
    ├── ParseError                -32700  the line is not JSON
    ├── InvalidRequest            -32600  JSON, but not a JSON-RPC 2.0 message
    ├── MethodNotFound            -32601  unknown or unadvertised method
    ├── InvalidParams             -32602  params missing a field, or of the wrong type
    ├── InternalError             -32603  a bug or an unexpected failure on our side
    ├── AuthRequired              -32000  credentials are needed before this call
    ├── ResourceNotFound          -32002  e.g. an unknown session or file
    ├── RequestCancelled          -32800  the request was cancelled ($/cancel_request, shutdown)
    └── ConnectionClosed          -32603  the peer went away before it answered our request

``RequestError`` is also what an *outgoing* request raises when the peer answers with an error, so a
tool that asked the editor for a file sees the editor's code and message.
"""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002
REQUEST_CANCELLED = -32800


class RequestError(Exception):
    """A JSON-RPC error: ``{code, message, data?}``."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, data: Any = None, *, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        if code is not None:
            self.code = code

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` member of a response."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @classmethod
    def from_wire(cls, error: object) -> RequestError:
        """Build the error a peer sent; tolerate a malformed error object."""
        if isinstance(error, dict):
            code = error.get("code")
            message = error.get("message")
            return cls(
                message if isinstance(message, str) else "error without a message",
                error.get("data"),
                code=code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            )
        return cls(f"malformed error object: {error!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class ParseError(RequestError):
    code = PARSE_ERROR


class InvalidRequest(RequestError):
    code = INVALID_REQUEST


class MethodNotFound(RequestError):
    code = METHOD_NOT_FOUND


class InvalidParams(RequestError):
    code = INVALID_PARAMS


class InternalError(RequestError):
    code = INTERNAL_ERROR


class AuthRequired(RequestError):
    code = AUTH_REQUIRED


class ResourceNotFound(RequestError):
    code = RESOURCE_NOT_FOUND


class RequestCancelled(RequestError):
    code = REQUEST_CANCELLED


class ConnectionClosed(RequestError):
    """Raised by an outgoing request whose answer can no longer come: the peer closed the stream."""

    code = INTERNAL_ERROR
