"""refagent's own exceptions, apart from the protocol's (see :mod:`refagent.acp.errors` for those).

Each boundary translates once: a :class:`ToolError` becomes a failed tool result the model reads and
can fix; a :class:`ModelError` ends the turn with a message to the user; a :class:`ConfigError` is
reported at startup or when a session is created.

    RefagentError
    ├── ConfigError            the config file or a flag is wrong
    ├── ModelError             the model endpoint failed (after retries, if retrying made sense)
    │   ├── ModelAuthError     401/403: the key is missing or wrong
    │   └── ModelRefused       the provider refused to answer (content filter, refusal)
    └── ToolError              a tool call the model can fix: bad arguments, a path outside the roots...

A call the user declines is not an error: the runner answers it with a result that says so
(:mod:`refagent.tools.runner`).
"""

from __future__ import annotations


class RefagentError(Exception):
    """Base of refagent's own errors. ``str(error)`` is written for the reader it goes to."""


class ConfigError(RefagentError):
    pass


class ModelError(RefagentError):
    pass


class ModelAuthError(ModelError):
    pass


class ModelRefused(ModelError):
    pass


class ToolError(RefagentError):
    pass
