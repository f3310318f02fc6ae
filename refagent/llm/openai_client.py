"""The OpenAI-compatible adapter: :class:`OpenAIModel`, a :class:`~refagent.llm.protocol.ModelClient` that
streams Chat Completions through the official ``openai`` package.

Importing this module does not import ``openai`` (~0.8 s): the first :meth:`OpenAIModel.stream` does, in a
worker thread so the event loop keeps serving the editor; :func:`warm_up` does it ahead of time.

Provider quirks stop here (the turn only sees :mod:`refagent.llm.protocol` events):

- text is yielded as it arrives; reasoning comes from ``reasoning_content`` or ``reasoning``, whichever the
  provider sends (extra fields on the delta);
- text, reasoning and tool calls come out as valid Unicode: a surrogate pair split across two chunks (each
  half a ``\\ud83d``-style escape of its own) is joined, a lone surrogate becomes U+FFFD
  (:mod:`refagent.acp.text`); kept as they came, they would make every later request of the session fail
  to encode;
- tool-call deltas are assembled by index; a name (or id) repeated in every chunk is not concatenated; the
  id may come only on the first chunk; arguments that are not JSON are passed through raw; complete calls
  are yielded after the stream ends, then the :class:`~refagent.llm.protocol.Usage`, then ``Finished``;
- usage may come in the last chunk (with empty ``choices``) or on every chunk: the last one seen wins;
- ``length`` -> ``Finished("length")``; ``content_filter`` or a ``refusal`` delta -> ``Finished("refusal")``
  (the refusal text is yielded as text); ``stop`` with tool calls (some local servers) -> ``tool_calls``;
  a stream with no choices at all -> ``Finished("stop")``;
- a server that rejects ``stream_options`` is asked again without it (and never again with it);
- a request's reasoning effort goes out as ``reasoning_effort`` (none: the field is left out); a 400/422
  that names it is not retried without it (the user chose it): :class:`~refagent.errors.ModelError` says
  the model does not accept that reasoning effort and where to change it;
- a request that cannot be encoded (a lone surrogate got into the conversation or a tool's description
  past the boundaries that clean text) is sent again cleaned, with a warning, rather than failing.

Retries (the ``openai`` client's own are disabled, ``max_retries=0``, so the policy is this one): 408, 409,
429, 5xx, connection errors and timeouts, and a stream cut before it produced anything, are retried with
bounded exponential backoff and jitter, honouring ``Retry-After`` (capped); a
:class:`~refagent.llm.protocol.Retrying` event precedes each wait so the user sees it.

A failure *after* text or reasoning was yielded is not retried: the turn has already shown that text to
the user and keeps it in the history, and a new request would answer from the start, so the user would
read the beginning twice. Instead :class:`~refagent.errors.ModelError` says the reply was cut off; the
partial reply stays in the history and the user can ask to continue. (Tool calls are only yielded at
the end, so a stream cut while a tool call was arriving is retried.)

Errors, each said as itself (the turn shows the message to the user and marks the turn's failure with the
error's ``kind``, :mod:`refagent.session.turn`):

- a connection that fails says how, found in the exception's chain of causes (:func:`connection_problem`):
  refused (retried: a server may be starting), a host name that does not resolve or a TLS certificate that
  cannot be verified (neither retried: waiting does not fix them), another TLS failure (retried);
- 401/403 raise :class:`~refagent.errors.ModelAuthError` naming where the key came from
  (:func:`~refagent.llm.profiles.key_origin`: ``OPENAI_API_KEY``, ``api_key_env``'s variable, or ``api_key``
  in the config file); the key itself is never shown, and is cut out of what the server said;
- 404 raises :class:`~refagent.errors.ModelConfigError`: the endpoint serves no such model (or the base URL
  is wrong), with the model's name, the endpoint and where to set ``model``;
- a profile that names no model, on an endpoint whose ``GET /models`` lists none or answers an error status,
  raises :class:`~refagent.errors.ModelConfigError` saying so (a connection failure there is a connection
  failure, as above);
- every other persistent failure raises :class:`~refagent.errors.ModelError` with the status, what the
  server said, and the endpoint.

Cancellation (the caller's cancel scope) closes the HTTP response at once.

One module of some 600 lines, not split: every quirk above is a branch of the same stream loop or of the
same retry loop, and a reader checking how one provider is handled needs both in view; the failure
classification reads best next to the loop that needs it.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

from refagent.acp.text import StreamJoiner, clean, clean_text
from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.profiles import ModelProfile, key_hint, key_origin, missing_key, model_setting
from refagent.llm.protocol import (
    Finished,
    FinishReason,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallRequest,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from openai import AsyncAPIResponse, AsyncOpenAI

log = logging.getLogger(__name__)

NO_KEY = "no-key-needed"
"""Sent as the key to endpoints that need none: the ``openai`` client insists on one, local servers ignore it."""
CLOSE_TIMEOUT = 2.0
"""How long closing a cancelled HTTP response may take (it is shielded from the cancellation)."""
RETRYABLE_STATUS = frozenset({408, 409, 429})


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

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        return min(self.max_delay, self.base_delay * float(1 << max(0, attempt - 2))) * (0.5 + rand / 2)


async def warm_up() -> None:
    """Import ``openai`` in a worker thread (call it in the background once ``initialize`` is answered)."""
    await anyio.to_thread.run_sync(_import_openai)


def _import_openai() -> Any:
    import openai

    return openai


@dataclass(slots=True)
class _Failure:
    """A failed attempt, classified."""

    message: str
    """For the user: what happened, in one sentence."""
    retry_after: float | None = None
    """What the server asked for, in seconds."""


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _Assembler:
    """Turns chunks (decoded JSON) into events; what is only known at the end comes from :meth:`finish`.

    Chunks are plain dicts, not the ``openai`` package's pydantic models: building those costs ~200 us a
    chunk, 4x the rest of the path (``benchmarks/stream.py``), and provider extras such as
    ``reasoning_content`` are plain keys here. Anything may be missing or ``null``: providers vary.
    """

    def __init__(self) -> None:
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.refused = False
        self.usage: Usage | None = None
        self._text = StreamJoiner()
        self._reasoning = StreamJoiner()

    def feed(self, chunk: Any) -> Iterator[ModelEvent]:
        try:
            yield from self._feed(chunk)
        except (AttributeError, TypeError, ValueError) as exc:  # a field of an unexpected type
            raise _Malformed(f"a chunk refagent cannot read ({exc}): {json.dumps(chunk)[:300]}") from exc

    def _feed(self, chunk: Any) -> Iterator[ModelEvent]:
        if not isinstance(chunk, dict):
            return
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        for choice in chunk.get("choices") or ():
            if choice.get("index"):  # n > 1 is never requested; ignore stray choices
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if not delta:
                continue
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str) and (reasoning := self._reasoning.feed(reasoning)):
                yield ReasoningDelta(reasoning)
            content = delta.get("content")
            if content and isinstance(content, str) and (content := self._text.feed(content)):
                yield TextDelta(content)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                self.refused = True
                if refusal := self._text.feed(refusal):
                    yield TextDelta(refusal)
            for call in delta.get("tool_calls") or ():
                self._add_call(call)

    def _add_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        call_id = delta.get("id")
        if not isinstance(index, int):  # some providers omit it: match by id, else continue the last call
            known = [i for i, c in self.calls.items() if call_id and c.id == call_id]
            index = known[0] if known else (max(self.calls) if self.calls and not call_id else len(self.calls))
        call = self.calls.setdefault(index, _PartialCall())
        if call_id and not call.id:
            call.id = str(call_id)
        function = delta.get("function")
        if not function:
            return
        name = function.get("name")
        if name and name != call.name:
            if name.startswith(call.name):
                call.name = name  # the first time, or a provider that sends the name so far
            elif not call.name.startswith(name):
                call.name += name  # a name streamed in pieces
        arguments = function.get("arguments")
        if arguments is not None:  # a provider may send an object instead of a string
            call.arguments.append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def finish(self) -> Iterator[ModelEvent]:
        # A high surrogate that ended the stream never got its other half.
        if reasoning := self._reasoning.flush():
            yield ReasoningDelta(reasoning)
        if text := self._text.flush():
            yield TextDelta(text)
        calls = [  # joined first, then cleaned: a pair split across two chunks of arguments is one character
            ToolCallRequest(
                clean_text(c.id) or f"call_{i}_{time.monotonic_ns():x}",
                clean_text(c.name),
                clean_text("".join(c.arguments)),
            )
            for i, c in sorted(self.calls.items())
        ]
        yield from calls
        if self.usage is not None:
            yield self.usage
        yield Finished(self._reason(bool(calls)))

    def _reason(self, called: bool) -> FinishReason:
        if self.refused or self.finish_reason == "content_filter":
            return "refusal"
        if self.finish_reason == "length":
            return "length"
        # "stop" with tool calls (some local servers), "function_call", or none at all: the calls decide.
        return "tool_calls" if called else "stop"


class OpenAIModel:
    """A :class:`~refagent.llm.protocol.ModelClient` for one profile's OpenAI-compatible endpoint.

    One instance per profile, reused across turns (it keeps the HTTP connection pool warm); close it with
    :meth:`aclose`. ``sleep`` and ``rand`` are seams for tests. If the profile names no model, the first
    model the endpoint lists (``GET /models``) is used: local servers usually serve exactly one.
    """

    def __init__(
        self,
        profile: ModelProfile,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.profile = profile
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._sleep = sleep
        self._rand = rand
        self._client: AsyncOpenAI | None = None
        self._model = profile.model
        self._stream_options = True

    @property
    def url(self) -> str:
        """The endpoint requests go to, for messages."""
        return self.profile.endpoint.rstrip("/") + "/chat/completions"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response to ``request`` (see the module docstring for the contract)."""
        client = await self._get_client()
        model = await self._get_model(client)
        from openai import AsyncStream  # imported by now (in a thread, by _get_client): a dict lookup

        attempt = 1
        cleaned = False
        while True:
            yielded = False
            try:
                async with self._open(client, model, request) as response:
                    # The openai package's own SSE decoding and error wrapping, without its pydantic models.
                    chunks = AsyncStream(cast_to=object, response=response.http_response, client=client)
                    try:
                        assembler = _Assembler()
                        async for chunk in chunks:
                            for event in assembler.feed(chunk):
                                yielded = True
                                yield event
                        for event in assembler.finish():
                            yield event
                        return
                    finally:
                        await _close(response.http_response)
            except UnicodeEncodeError as exc:  # raised by the openai package while it encodes the request
                if cleaned or yielded:
                    raise ModelError(f"The request to {self.url} cannot be encoded as UTF-8 ({exc}).") from exc
                log.warning("a lone surrogate got into the model request (%s); sending it cleaned", exc)
                request, cleaned = _cleaned_request(request), True
                continue
            except Exception as exc:
                if self._stream_options and not yielded and _rejects_stream_options(exc):
                    self._stream_options = False  # not a real attempt: ask again at once, and from now on
                    continue
                if request.reasoning_effort is not None and not yielded and _rejects_reasoning_effort(exc):
                    raise self._effort_rejected(exc, model, request.reasoning_effort) from exc
                failure = self._classify(exc)  # raises what is not worth retrying
            if yielded:
                raise ModelError(
                    f"The reply from {self.url} was cut off ({failure.message}). "
                    "It was not retried because part of it was already shown; ask the model to continue."
                )
            if attempt >= self.retry.attempts:
                tries = f"{attempt} attempts" if attempt > 1 else "1 attempt"
                raise ModelError(f"{failure.message}. Gave up after {tries} (model {model!r}).")
            attempt += 1
            delay = self.retry.delay(attempt, failure.retry_after, self._rand())
            log.info("model request failed (%s); attempt %d in %.2f s", failure.message, attempt, delay)
            yield Retrying(attempt, delay, failure.message, self.retry.attempts)
            await self._sleep(delay)

    # -- helpers ----------------------------------------------------------------------------

    async def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            message = missing_key(self.profile)
            if message is not None:
                raise ModelAuthError(message)
            # Importing openai (~0.8 s) and building the client (an SSL context, ~50 ms) would stall the
            # event loop, which must keep reading the editor's messages (session/cancel...): use a thread,
            # and do not make a cancelled turn wait for it.
            self._client = await anyio.to_thread.run_sync(self._new_client, abandon_on_cancel=True)
        return self._client

    def _new_client(self) -> AsyncOpenAI:
        openai = _import_openai()
        return cast(
            "AsyncOpenAI",
            openai.AsyncOpenAI(
                api_key=self.profile.api_key or NO_KEY,
                base_url=self.profile.endpoint,
                max_retries=0,  # the retry policy is ours (see the module docstring)
                **({} if self.timeout is None else {"timeout": self.timeout}),
            ),
        )

    async def _get_model(self, client: AsyncOpenAI) -> str:
        """The profile's model, else the first the endpoint lists (asked once)."""
        if self._model:
            return self._model
        import openai

        listing = f"{self.profile.endpoint.rstrip('/')}/models"
        no_model = f"The model profile {self.profile.id!r} names no model, and {listing}"
        setting = f"set {model_setting(self.profile)}"
        try:
            page = await client.models.list()
            ids = [str(m.id) for m in page.data if getattr(m, "id", None)]
        except openai.APIConnectionError as exc:  # the endpoint is unreachable: that is the news, not the model
            raise ModelError(f"{self._connection_failure(exc)}.") from exc
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise self._auth_error(exc, listing) from exc
            raise ModelConfigError(f"{no_model} answered {exc.status_code} ({self._said(exc)}): {setting}.") from exc
        except Exception as exc:  # an answer that is not a list of models
            said = _describe(exc)
            raise ModelConfigError(f"{no_model} did not answer with a list of models ({said}): {setting}.") from exc
        if not ids:
            raise ModelConfigError(f"{no_model} lists none: {setting}.")
        self._model = ids[0]
        return self._model

    def _open(
        self, client: AsyncOpenAI, model: str, request: ModelRequest
    ) -> AbstractAsyncContextManager[AsyncAPIResponse[Any]]:
        """The streaming request; entering it sends it and raises for an error status."""
        kwargs: dict[str, Any] = {"model": model, "messages": request.messages, "stream": True}
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if self._stream_options:
            kwargs["stream_options"] = {"include_usage": True}
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort
        return client.chat.completions.with_streaming_response.create(**kwargs)

    def _effort_rejected(self, exc: Exception, model: str, effort: str) -> ModelError:
        where = f"`reasoning_effort` in {self.profile.source}" if self.profile.source.endswith("]") else "its profile"
        return ModelError(
            f"The model {model!r} does not accept the reasoning effort {effort!r}: {self.url} answered "
            f"{getattr(exc, 'status_code', '?')}: {_server_said(exc)}. Choose another thought level, or fix "
            f"{where} (leave it out if the model takes no reasoning effort)."
        )

    def _classify(self, exc: Exception) -> _Failure:
        """Describe a failed attempt worth retrying; raise at once what retrying cannot fix."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            said = self._said(exc)
            if status in (401, 403):
                raise self._auth_error(exc, self.url) from exc
            message = f"{self.url} answered {status}: {said}"
            if status in RETRYABLE_STATUS or status >= 500:
                return _Failure(message, _retry_after(exc.response.headers))
            if status == 404:
                raise ModelConfigError(
                    f"{self.url} answered 404 for the model {self._model!r} ({said}): it serves no such model, "
                    f"or the base URL is wrong. {self.profile.endpoint.rstrip('/')}/models lists its models; "
                    f"set {model_setting(self.profile)}."
                ) from exc
            raise ModelError(f"{message} (model {self._model!r})") from exc
        if isinstance(exc, openai.APITimeoutError):
            return _Failure(f"{self.url} timed out")
        if isinstance(exc, openai.APIConnectionError):
            message = self._connection_failure(exc)
            if not connection_problem(exc).transient:  # waiting fixes no unknown host name or bad certificate
                raise ModelError(f"{message}.") from exc
            return _Failure(message)
        if isinstance(exc, openai.APIError):
            # An error event inside the stream (OpenRouter and others): retry what its code says is transient.
            code = _int(exc.code) or _int(exc.body.get("code") if isinstance(exc.body, dict) else None)
            message = f"{self.url} reported an error mid-stream: {exc.message}"
            if code is not None and (code in RETRYABLE_STATUS or code >= 500):
                return _Failure(message)
            raise ModelError(message) from exc
        if isinstance(exc, (json.JSONDecodeError, _Malformed)):
            what = exc if isinstance(exc, _Malformed) else f"an event that is not JSON ({exc})"
            raise ModelError(f"{self.url} sent {what}; is it an OpenAI-compatible endpoint?") from exc
        if isinstance(exc, openai.OpenAIError):
            raise ModelError(f"{self.url}: {exc}") from exc
        raise exc

    def _connection_failure(self, exc: Exception) -> str:
        """What a failed connection to the endpoint was, for the user (no final period)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return f"{self.url} timed out"
        return f"Cannot connect to {self.profile.endpoint}: {connection_problem(exc).what}"

    def _auth_error(self, exc: Any, url: str) -> ModelAuthError:
        """A 401 or 403: which key was sent (by where it came from, never the key), and what to do."""
        status = exc.status_code
        said = f"{status}: {self._said(exc)}"
        if not self.profile.api_key:  # no key was sent (the endpoint looked local): it wants one
            return ModelAuthError(
                f"{url} answered {said}: it needs an API key, and the model profile {self.profile.id!r} has "
                f"none: {key_hint(self.profile)}."
            )
        origin = key_origin(self.profile)
        if status == 401:
            return ModelAuthError(f"{url} rejected {origin} ({said}). Put a valid key there.")
        return ModelAuthError(
            f"{url} refused {origin} access ({said}): the key may not be allowed to use the model {self._model!r}."
        )

    def _said(self, exc: Any) -> str:
        """What the server said, with the key cut out (some servers quote the key they were sent)."""
        said = _server_said(exc)
        key = self.profile.api_key
        return said.replace(key, "[the key]") if key and len(key) >= 4 else said


@dataclass(frozen=True, slots=True)
class ConnectionProblem:
    what: str
    """What failed, for the user: "connection refused (is the server running?)"."""
    transient: bool
    """Whether retrying may help (a server still starting may; a name that does not resolve will not)."""


def connection_problem(exc: BaseException) -> ConnectionProblem:
    """Why a connection failed, read from ``exc``'s chain of causes (``openai.APIConnectionError`` <-
    the HTTP library's ``ConnectError`` <- ... <- the ``OSError``, ``socket.gaierror`` or ``ssl.SSLError``
    that says it), the message's text when the types say nothing."""
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


class _Malformed(ValueError):
    pass


def _cleaned_request(request: ModelRequest) -> ModelRequest:
    """``request`` with every string in its messages and tools valid Unicode (:func:`refagent.acp.text.clean`)."""
    tools = [ToolSpec(clean_text(t.name), clean_text(t.description), clean(t.parameters)) for t in request.tools]
    return replace(request, messages=clean(request.messages), tools=tools)


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


async def _close(response: _Closeable) -> None:
    """Close the HTTP response, even in a cancelled scope (that is when it matters most)."""
    with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
        try:
            await response.aclose()
        except Exception as exc:  # the connection may already be gone; the original error matters more
            log.debug("closing the model response: %s", exc)


def _rejects_stream_options(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    return status in (400, 422) and "stream_options" in f"{getattr(exc, 'body', '')} {exc}"


def _rejects_reasoning_effort(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    return status in (400, 422) and "reasoning_effort" in f"{getattr(exc, 'body', '')} {exc}"


def _server_said(exc: Any) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    reason = getattr(exc.response, "reason_phrase", "")
    return str(reason or exc.message)


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), if given."""
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
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"{status}: {_server_said(exc)}" if status is not None else str(exc) or type(exc).__name__
