"""What is worth retrying, and how long to wait: the part of a model adapter's retry loop that is not
about one provider.

- :class:`RetryPolicy`: how many attempts, and the bounded exponential backoff with jitter between them
  (or what the server's ``Retry-After`` asks, capped). The config file's ``[retry]`` table makes one, and
  every model client's factory is given it.
- :func:`retry_after`: the wait an HTTP answer asks for (``retry-after-ms``, ``Retry-After`` in seconds or
  as an HTTP date).
- :func:`connection_problem`: why a connection failed, for the user, and whether waiting may fix it,
  read from the exception's chain of causes (whatever HTTP library raised it).
- :data:`RETRYABLE_STATUS`: the HTTP statuses below 500 worth another attempt.

Nothing here imports more than the standard library (``socket``, ``ssl`` and ``email.utils`` only when
called): the configuration builds a :class:`RetryPolicy` before the editor's first answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "QUIET_NOTICE_SECONDS",
    "RETRYABLE_STATUS",
    "STALL_SECONDS",
    "ConnectionProblem",
    "Failure",
    "RetryPolicy",
    "connection_problem",
    "retry_after",
    "retry_wait",
]

STALL_SECONDS = 300.0
"""How long a model's stream may send nothing, by default (:attr:`RetryPolicy.stall_seconds`)."""
QUIET_NOTICE_SECONDS = 15.0
"""The longest a model may send nothing before the user is told that it is waited for (and again each time)."""
RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Request timeout, conflict, too many requests: worth another attempt, as every 5xx is."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient failures are retried.

    Attempt ``n`` (``n`` >= 2) waits ``min(max_delay, base_delay * 2 ** (n - 2))``, scaled by a random
    factor in ``[0.5, 1)`` (jitter, so that many clients do not retry in step), or what the server's
    ``Retry-After`` asks, capped at ``max_retry_after``.
    """

    attempts: int = 4
    """Total attempts, the first included."""
    base_delay: float = 1.0
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    stall_seconds: float = STALL_SECONDS
    """How long a model's stream may send nothing (before its first byte or between two) before the attempt
    counts as failed (a timeout, retried as the others are): a reasoning model may think for minutes first.
    The user hears of the wait long before (:func:`quiet_notice_after`)."""

    def quiet_notice_after(self) -> float:
        """Seconds of silence from the model after which the user is told it is waited for: a quarter of
        :attr:`stall_seconds`, at most :data:`QUIET_NOTICE_SECONDS`."""
        return min(QUIET_NOTICE_SECONDS, self.stall_seconds / 4)

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        """Seconds to wait before attempt number ``attempt``; ``retry_after``: what the server asked for
        (:func:`retry_after`), ``rand``: a number in ``[0, 1)`` for the jitter."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        return min(self.max_delay, self.base_delay * float(1 << max(0, attempt - 2))) * (0.5 + rand / 2)


@dataclass(slots=True)
class Failure:
    """A failed attempt worth retrying, as an adapter classified it (it raises at once what is not)."""

    message: str
    """For the user: what happened, in one sentence (no final period)."""
    retry_after: float | None = None
    """What the server asked for, in seconds."""


def retry_wait(
    policy: RetryPolicy, attempt: int, failure: Failure, *, shown: bool, url: str, model: str, rand: float
) -> float:
    """Seconds to wait before the attempt after ``attempt``, which failed with ``failure``. Raises
    :class:`~refagent.errors.ModelError` when there is none: part of the reply was ``shown`` (the user has
    read it and the history keeps it; a new request would answer from the start, so they would read the
    beginning twice: they can ask the model to continue), or the policy's attempts are used up."""
    from refagent.errors import ModelError  # here: config.limits loads this module before the first answer

    if shown:
        raise ModelError(
            f"The reply from {url} was cut off ({failure.message}). "
            "It was not retried because part of it was already shown; ask the model to continue."
        )
    if attempt >= policy.attempts:
        tries = f"{attempt} attempts" if attempt > 1 else "1 attempt"
        raise ModelError(f"{failure.message}. Gave up after {tries} (model {model!r}).")
    return policy.delay(attempt + 1, failure.retry_after, rand)


def retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), if given.
    ``headers``: any mapping with ``get`` (case-insensitive, as HTTP libraries' headers are)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    import email.utils  # here: config.limits loads this module before the first answer ([retry]): 9.4 ms

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True, slots=True)
class ConnectionProblem:
    """Why a connection failed (:func:`connection_problem`)."""

    what: str
    """What failed, for the user: "connection refused (is the server running?)"."""
    transient: bool
    """Whether retrying may help (a server still starting may; a name that does not resolve will not)."""


def connection_problem(exc: BaseException) -> ConnectionProblem:
    """Why a connection failed, read from ``exc``'s chain of causes (``openai.APIConnectionError`` <-
    the HTTP library's ``ConnectError`` <- ... <- the ``OSError``, ``socket.gaierror`` or ``ssl.SSLError``
    that says it), the message's text when the types say nothing."""
    # here: config.limits loads this module before the first answer ([retry]): socket and ssl, 9.2 ms
    import socket
    import ssl

    causes = list(_causes(exc))
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
            return ConnectionProblem(f"its TLS certificate could not be verified ({detail})", False)
        if isinstance(cause, ssl.SSLError):  # retried: an EOF in the middle of TLS may be a dropped connection
            return ConnectionProblem(f"TLS failed ({getattr(cause, 'reason', None) or cause})", True)
        if isinstance(cause, socket.gaierror):
            if cause.errno == getattr(socket, "EAI_AGAIN", None):  # "temporary failure in name resolution"
                return ConnectionProblem(f"its host name could not be looked up for now (DNS: {cause.strerror})", True)
            return ConnectionProblem(f"its host name was not found (DNS: {cause.strerror}); check the URL", False)
        if isinstance(cause, ConnectionRefusedError):
            return ConnectionProblem("connection refused (is the server running?)", True)
    said = " | ".join(str(cause) for cause in causes)
    if "CERTIFICATE_VERIFY_FAILED" in said:
        return ConnectionProblem("its TLS certificate could not be verified", False)
    if any(text in said for text in _UNKNOWN_HOST):
        return ConnectionProblem("its host name was not found (DNS); check the URL", False)
    if "Connection refused" in said or "Connect call failed" in said:
        return ConnectionProblem("connection refused (is the server running?)", True)
    detail = next((str(c) for c in reversed(causes) if str(c) and str(c) != "Connection error."), type(exc).__name__)
    return ConnectionProblem(f"the connection failed ({detail})", True)


_UNKNOWN_HOST = ("Name or service not known", "nodename nor servname", "getaddrinfo failed", "No address associated")
"""How resolvers say a name does not exist, when only the text of the error is left (Linux, macOS, Windows)."""


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what led to it, outermost first: ``__cause__``, ``__context__``, exception groups' members."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if current.__context__ is not None:
            stack.append(current.__context__)
        if current.__cause__ is not None:
            stack.append(current.__cause__)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
