"""How hard a turn may try: ``max_requests`` (model requests per prompt turn) and the ``[retry]`` table (how
the model client retries transient failures: 429, 5xx, lost connections)::

    max_requests = 50             # model requests per prompt turn (default: 50, refagent.settings)

    [retry]
    attempts = 4                  # total, the first included
    base_delay = 1.0              # seconds; doubled each time, with jitter
    max_delay = 20.0              # seconds, the most one wait can be
    max_retry_after = 60.0        # seconds, the most a server's Retry-After is honoured for
    stall_seconds = 300.0         # seconds a model's stream may send nothing before the attempt fails
                                  # (the user is told of the wait after a quarter of it, at most 15 s)

    [subagents]                   # what the `task` tool's subagents may do (refagent.session.subagents)
    max_depth = 1                 # levels of subagents under a session's turn (1: a subagent starts none)
    max_running = 3               # subagents of one turn (or one subagent) that run at once
    max_requests = 20             # model requests of one subagent
    max_tokens = 200000           # tokens (input and output, all its requests) of one subagent
    max_seconds = 600.0           # how long one subagent may run

``REFAGENT_MAX_REQUESTS`` and ``--max-requests`` override ``max_requests`` (flag over environment over file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from refagent.config.file import typed
from refagent.config.flags import MAX_REQUESTS_ENV, env_value
from refagent.errors import ConfigError

if TYPE_CHECKING:
    from refagent.llm.retry import RetryPolicy

__all__ = ["RETRY_KEYS", "SUBAGENT_KEYS", "SubagentLimits", "max_requests", "retry_policy", "subagent_limits"]

RETRY_KEYS: dict[str, type] = {
    "attempts": int,
    "base_delay": float,
    "max_delay": float,
    "max_retry_after": float,
    "stall_seconds": float,
}


def retry_policy(table: Any, source: str, warnings: list[str]) -> RetryPolicy | None:
    """The retry policy of the file's ``[retry]`` table (``None``: no table, the client's defaults). Unknown
    keys go to ``warnings``. Raises :class:`ConfigError` for a value of the wrong type, or fewer than 1
    attempt."""
    if table is None:
        return None
    where = f"{source} [retry]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: retry must be a table ([retry])")
    warnings += [f"{where}: unknown key {k!r} (ignored)" for k in table if k not in RETRY_KEYS]
    values = {k: typed(table, k, kind, where) for k, kind in RETRY_KEYS.items() if k in table}
    if values.get("attempts", 1) < 1:
        raise ConfigError(f"{where}: attempts must be at least 1")
    if values.get("stall_seconds", 1) <= 0:
        raise ConfigError(f"{where}: stall_seconds must be more than 0")
    from refagent.llm.retry import RetryPolicy  # here: with a [retry] table only (1.2 ms)

    return RetryPolicy(**values)


def max_requests(in_file: int | None, flag: int | None, env: Mapping[str, str]) -> int | None:
    """Model requests per prompt turn: ``flag`` (``--max-requests``), else ``$REFAGENT_MAX_REQUESTS``, else
    ``in_file``; ``None``: none of them, the turn's default. Raises :class:`ConfigError` for a variable that
    is not a whole number, or a number below 1."""
    value = in_file
    from_env = env_value(env, MAX_REQUESTS_ENV)
    if flag is not None:
        value = flag
    elif from_env is not None:
        try:
            value = int(from_env)
        except ValueError:
            raise ConfigError(f"{MAX_REQUESTS_ENV} must be a whole number, not {from_env!r}") from None
    if value is not None and value < 1:
        raise ConfigError(f"max_requests must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class SubagentLimits:
    """What the subagents of a turn may do (the ``[subagents]`` table; the module docstring has the defaults):
    how deep they nest, how many run at once, and each one's budget of model requests, tokens and time."""

    max_depth: int = 1
    max_running: int = 3
    max_requests: int = 20
    max_tokens: int = 200_000
    max_seconds: float = 600.0


SUBAGENT_KEYS: dict[str, type] = {
    "max_depth": int,
    "max_running": int,
    "max_requests": int,
    "max_tokens": int,
    "max_seconds": float,
}


def subagent_limits(table: Any, source: str, warnings: list[str]) -> SubagentLimits:
    """The limits of the file's ``[subagents]`` table (none: the defaults). Unknown keys go to ``warnings``.
    Raises :class:`ConfigError` for a value of the wrong type, or a limit below what works (``max_depth``
    0 turns subagents off)."""
    if table is None:
        return SubagentLimits()
    where = f"{source} [subagents]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: subagents must be a table ([subagents])")
    warnings += [f"{where}: unknown key {k!r} (ignored)" for k in table if k not in SUBAGENT_KEYS]
    values = {k: typed(table, k, kind, where) for k, kind in SUBAGENT_KEYS.items() if k in table}
    for key, value in values.items():
        least = 0 if key == "max_depth" else 1
        if value is not None and value < least:
            raise ConfigError(f"{where}: {key} must be at least {least}")
    return SubagentLimits(**{k: v for k, v in values.items() if v is not None})
