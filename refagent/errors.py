"""refagent's own exceptions, apart from the protocol's (see :mod:`refagent.acp.errors` for those).

Each boundary translates once: a :class:`ToolError` becomes a failed tool result the model reads and
can fix; a :class:`ModelError` ends the turn with a message to the user, marked as a failure of its
:attr:`~ModelError.kind` (:func:`refagent.session.turn.run_prompt`); a :class:`ConfigError` is reported at
startup or when a session is created.

    RefagentError
    ├── ConfigError            the config file or a flag is wrong
    ├── ModelError             the model endpoint failed (after retries, if retrying made sense)   kind "model"
    │   ├── ModelAuthError     401/403, or no key: the key is missing or was rejected              kind "auth"
    │   ├── ModelConfigError   the model cannot work as configured: no model named and none         kind "config"
    │   │                      listed, a model the endpoint does not serve, a broken configuration
    │   └── ModelRefused       the provider refused to answer (content filter, refusal)
    └── ToolError              a tool call the model can fix: bad arguments, a path outside the roots...

A call the user declines is not an error: the runner answers it with a result that says so
(:mod:`refagent.tools.runner`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

FailureKind = Literal["model", "auth", "config"]
"""What a failed turn says went wrong (``_meta.refagent.failure.kind``, see :mod:`refagent.session.turn`)."""


class RefagentError(Exception):
    """Base of refagent's own errors. ``str(error)`` is written for the reader it goes to."""


class ConfigError(RefagentError):
    pass


class ModelError(RefagentError):
    kind: ClassVar[FailureKind] = "model"
    """The failure a turn this error ends reports: the endpoint failed (unreachable, 5xx, a broken stream)."""


class ModelAuthError(ModelError):
    kind: ClassVar[FailureKind] = "auth"


class ModelConfigError(ModelError):
    kind: ClassVar[FailureKind] = "config"


class ModelRefused(ModelError):
    pass


class ToolError(RefagentError):
    pass
