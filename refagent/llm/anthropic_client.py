"""The Anthropic adapter: :class:`AnthropicModel`, a :class:`~refagent.llm.protocol.ModelClient` that
streams Anthropic's Messages API: the model client of the ``anthropic`` client kind.

It talks HTTP itself, with ``httpx2`` (the HTTP client the ``openai`` package already brings), not with
the ``anthropic`` package: no new dependency, nor its import (~0.5 s) on the way to the first reply, and
the body is plain JSON built once per step (a package's per-message transform of the request would make
each step of a long session cost more than the one before). Importing this module does not import
``httpx2``: the first :meth:`AnthropicModel.stream` does, in a worker thread so the event loop keeps
serving the editor; the client kind's warm-up does it ahead of time (:func:`import_httpx`).

Three modules, one seam each: this one sends the request and runs the retry loop, and says every failure
as itself; :mod:`refagent.llm.anthropic_request` builds the body (the conversation in Anthropic's form,
its prompt-cache breakpoints, the thinking budget of a reasoning effort, ``max_tokens``);
:mod:`refagent.llm.anthropic_stream` reads the stream's events into :mod:`refagent.llm.protocol` events
(thinking as reasoning, the thinking blocks kept for the next request, tool calls in pieces, the usage with
its cache counts, stop reasons). What is not about one provider (the backoff, ``Retry-After``, why a
connection failed) is :mod:`refagent.llm.retry`'s.

The request: ``POST <base>/v1/messages``, ``<base>`` the profile's ``base_url`` (one that already ends in
``/v1`` is taken as it is) or ``https://api.anthropic.com``; headers ``x-api-key`` (the profile's key; none
for a local endpoint that needs none), ``anthropic-version: 2023-06-01`` and ``content-type:
application/json``. The body is encoded once per step, retries included; a conversation that cannot be
encoded (a lone surrogate got past the boundaries that clean text) is encoded again cleaned, with a
warning, rather than failing. The session's cache key is not sent: Anthropic's cache needs none (it is
the breakpoints, :mod:`refagent.llm.anthropic_request`). A profile that names no model is a
:class:`~refagent.errors.ModelConfigError` before any request.

Retries (:class:`~refagent.llm.retry.RetryPolicy`): 408, 409, 429, 5xx (529, "overloaded", among them),
connection errors and timeouts, a stream cut before it produced anything, and an ``overloaded_error`` or
``api_error`` event before anything was yielded, are retried with bounded exponential backoff and jitter,
honouring ``retry-after`` (capped); a :class:`~refagent.llm.protocol.Retrying` event precedes each wait so
the user sees it.

A failure *after* text or reasoning was yielded is not retried: the turn has already shown that text to
the user and keeps it in the history, and a new request would answer from the start, so the user would
read the beginning twice. Instead :class:`~refagent.errors.ModelError` says the reply was cut off; the
partial reply stays in the history and the user can ask to continue. (Tool calls are only yielded at the
end, so a stream cut while a tool call was arriving is retried.)

Errors, each said as itself (the turn shows the message and marks the turn's failure with the error's
``kind``):

- a profile that needs a key and has none raises :class:`~refagent.errors.ModelAuthError` (what to set,
  :func:`~refagent.llm.profiles.missing_key`) before any request;
- a connection that fails says how (:func:`~refagent.llm.retry.connection_problem`): refused (retried), a
  host name that does not resolve or a TLS certificate that cannot be verified (neither retried);
- 401/403 raise :class:`~refagent.errors.ModelAuthError` naming where the key came from
  (:func:`~refagent.llm.profiles.key_origin`); the key itself is never shown, and is cut out of what the
  server said;
- 404 raises :class:`~refagent.errors.ModelConfigError`: no such model, or the base URL is not Anthropic's,
  with the model's name, the endpoint and where to set ``model``;
- 400 and the other statuses raise :class:`~refagent.errors.ModelError` with the status and what the
  server said (Anthropic's ``{"type": "error", "error": {"type", "message"}}``: its message); a 400 about
  ``max_tokens`` (more than the model can write) says to set the profile's ``max_output_tokens``;
- an ``error`` event of another type raises :class:`~refagent.errors.ModelError` with its message;
- an answer that is not the Messages API's stream (not ``text/event-stream``, an event that is not JSON or
  not of its shape) raises :class:`~refagent.errors.ModelError` asking whether the endpoint is Anthropic's.

Cancellation (the caller's cancel scope) closes the HTTP response at once.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.anthropic_request import Bodies
from refagent.llm.anthropic_stream import Assembler, Malformed, StreamError
from refagent.llm.profiles import key_hint, key_origin, missing_key, model_setting
from refagent.llm.protocol import ModelEvent, ModelRequest, Retrying, cleaned_request
from refagent.llm.retry import RETRYABLE_STATUS, Failure, RetryPolicy, connection_problem, retry_after, retry_wait

if TYPE_CHECKING:
    import httpx2

    from refagent.llm.profiles import ModelProfile

__all__ = ["API_VERSION", "AnthropicModel", "import_httpx"]

log = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
"""The ``anthropic-version`` header: the Messages API's version (the only one there is)."""
CLOSE_TIMEOUT = 2.0
"""How long closing a cancelled HTTP response may take (it is shielded from the cancellation)."""
CONNECT_TIMEOUT = 10.0
ERROR_BODY_BYTES = 64 * 1024
"""The most of an error answer read to say what the server said."""


def import_httpx() -> Any:
    """Import ``httpx2``, in a worker thread: the client kind's warm-up (:mod:`refagent.config.clients`), and
    the first request's."""
    import httpx2  # here: in a worker thread (the warm-up, _get_client), never on the loop: ~50 ms

    return httpx2


class _Cut(Exception):
    """The stream ended (the connection closed) before the message did."""


class _StatusError(Exception):
    """An error status, with what the server said."""

    def __init__(self, status: int, said: str, headers: Any) -> None:
        super().__init__(f"{status}: {said}")
        self.status = status
        self.said = said
        self.headers = headers


class _NotMessages(Exception):
    """An answer that is not the Messages API's stream."""


class AnthropicModel:
    """A :class:`~refagent.llm.protocol.ModelClient` for one profile's Messages API endpoint.

    One instance per profile, reused across turns (it keeps its HTTP connection pool warm); close it with
    :meth:`aclose`. ``sleep`` and ``rand`` are seams for tests.
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
        self._client: httpx2.AsyncClient | None = None
        self._bodies = Bodies()

    @property
    def url(self) -> str:
        """The endpoint requests go to."""
        base = self.profile.endpoint.rstrip("/")
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def _encode(self, model: str, request: ModelRequest) -> bytes:
        """The body as UTF-8 JSON, once per step (:class:`~refagent.llm.anthropic_request.Bodies`); made of
        the request cleaned when a lone surrogate got into it (it cannot be UTF-8)."""
        try:
            return self._bodies.encode(model, request, self.profile.max_output_tokens)
        except UnicodeEncodeError as exc:
            log.warning("a lone surrogate got into the model request (%s); sending it cleaned", exc)
            return Bodies().encode(model, cleaned_request(request), self.profile.max_output_tokens)

    async def prepare(self) -> None:
        """Import ``httpx2`` and build the client now, in a worker thread, so that the first request does not
        wait for them (the agent's warm-up after the first ``session/new``). Raises
        :class:`~refagent.errors.ModelAuthError` for a profile that needs a key it lacks, as a request would."""
        await self._get_client()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response to ``request`` (see the module docstring for the contract)."""
        model = self.profile.model
        if not model:
            raise ModelConfigError(
                f"The model profile {self.profile.id!r} names no model, and the Messages API needs one: "
                f"set {model_setting(self.profile)} (a Claude model, such as claude-sonnet-4-5)."
            )
        client = await self._get_client()
        content = self._encode(model, request)
        attempt = 1
        while True:
            yielded = False
            try:
                response = await client.send(client.build_request("POST", self.url, content=content), stream=True)
                try:
                    await _check(response)
                    assembler = Assembler()
                    async for data in _data(response):
                        for event in assembler.feed(data):
                            yielded = True
                            yield event
                    if not assembler.complete:
                        raise _Cut("the stream ended before the message did")
                    for event in assembler.finish():
                        yield event
                    return
                finally:
                    await _close(response)
            except Exception as exc:
                failure = self._classify(exc)  # raises what is not worth retrying
            wait = retry_wait(self.retry, attempt, failure, shown=yielded, url=self.url, model=model, rand=self._rand())
            attempt += 1
            log.info("model request failed (%s); attempt %d in %.2f s", failure.message, attempt, wait)
            yield Retrying(attempt, wait, failure.message, self.retry.attempts)
            await self._sleep(wait)

    # -- helpers ----------------------------------------------------------------------------

    async def _get_client(self) -> httpx2.AsyncClient:
        if self._client is None:
            message = missing_key(self.profile)
            if message is not None:
                raise ModelAuthError(message)
            # Importing httpx2 and building the client (an SSL context) would stall the event loop, which
            # must keep reading the editor's messages (session/cancel...): use a thread, and do not make a
            # cancelled turn wait for it.
            self._client = await anyio.to_thread.run_sync(self._new_client, abandon_on_cancel=True)
        return self._client

    def _new_client(self) -> httpx2.AsyncClient:
        http = import_httpx()
        headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
        if self.profile.api_key:
            headers["x-api-key"] = self.profile.api_key
        headers.update(self.profile.headers)  # an editor's routing (providers/set): over the key
        # A stream silent for the policy's stall_seconds fails the attempt (a timeout, retried); a model that
        # thinks long sends ``ping`` events meanwhile.
        timeout = self.timeout or self.retry.stall_seconds
        client: httpx2.AsyncClient = http.AsyncClient(
            headers=headers, timeout=http.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))
        )
        return client

    def _classify(self, exc: Exception) -> Failure:
        """Describe a failed attempt worth retrying; raise at once what retrying cannot fix."""
        import httpx2  # here: kept off this module's import; loaded by now (_get_client)

        if isinstance(exc, _StatusError):
            said = self._said(exc.said)
            message = f"{self.url} answered {exc.status}: {said}"
            if exc.status in (401, 403):
                raise self._auth_error(exc.status, said) from exc
            if exc.status in RETRYABLE_STATUS or exc.status >= 500:
                return Failure(message, retry_after(exc.headers))
            if exc.status == 404:
                raise ModelConfigError(
                    f"{self.url} answered 404 for the model {self.profile.model!r} ({said}): there is no such "
                    f"model, or the base URL is not Anthropic's Messages API (leave it out for Anthropic's "
                    f"own); set {model_setting(self.profile)}."
                ) from exc
            if exc.status == 400 and "max_tokens" in said:  # over the model's most: the profile's limit is the fix
                where = self.profile.source if self.profile.source.endswith("]") else "its profile"
                raise ModelError(
                    f"{message} (model {self.profile.model!r}): set `max_output_tokens` in {where} to what the "
                    "model can write in one response."
                ) from exc
            raise ModelError(f"{message} (model {self.profile.model!r})") from exc
        if isinstance(exc, StreamError):
            message = f"{self.url} reported an error mid-stream: {self._said(str(exc))}"
            if exc.retryable:
                return Failure(message)
            raise ModelError(message) from exc
        if isinstance(exc, _Cut):
            return Failure(f"{self.url}: {exc}")
        if isinstance(exc, httpx2.TimeoutException):
            return Failure(f"{self.url} timed out")
        if isinstance(exc, (httpx2.ReadError, httpx2.RemoteProtocolError)):  # the answer stopped coming
            return Failure(f"the stream from {self.url} broke off ({exc or type(exc).__name__})")
        if isinstance(exc, httpx2.TransportError):
            problem = connection_problem(exc)
            message = f"Cannot connect to {self.profile.endpoint}: {problem.what}"
            if not problem.transient:  # waiting fixes no unknown host name or bad certificate
                raise ModelError(f"{message}.") from exc
            return Failure(message)
        if isinstance(exc, (_NotMessages, json.JSONDecodeError, Malformed)):
            what = exc if not isinstance(exc, json.JSONDecodeError) else f"an event that is not JSON ({exc})"
            raise ModelError(f"{self.url} sent {what}; is it Anthropic's Messages API?") from exc
        raise exc

    def _auth_error(self, status: int, said: str) -> ModelAuthError:
        """A 401 or 403: which key was sent (by where it came from, never the key), and what to do."""
        said = f"{status}: {said}"
        if not self.profile.api_key:  # no key was sent (the endpoint looked local): it wants one
            return ModelAuthError(
                f"{self.url} answered {said}: it needs an API key, and the model profile {self.profile.id!r} "
                f"has none: {key_hint(self.profile)}."
            )
        origin = key_origin(self.profile)
        if status == 401:
            return ModelAuthError(f"{self.url} rejected {origin} ({said}). Put a valid key there.")
        return ModelAuthError(
            f"{self.url} refused {origin} access ({said}): the key may not be allowed to use the model "
            f"{self.profile.model!r}."
        )

    def _said(self, said: str) -> str:
        """What the server said, with the key cut out (some servers quote the key they were sent)."""
        key = self.profile.api_key
        return said.replace(key, "[the key]") if key and len(key) >= 4 else said


async def _check(response: httpx2.Response) -> None:
    """Raise for an answer that is not a stream of events: an error status, or another kind of body."""
    if response.status_code >= 400:
        said = await _error_said(response)
        raise _StatusError(response.status_code, said, response.headers)
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "text/event-stream":
        raise _NotMessages(f"a {response.status_code} answer of type {kind or 'unknown'!r}, not a stream of events")


async def _error_said(response: httpx2.Response) -> str:
    """What an error answer says: Anthropic's ``error.message``, or the start of its body."""
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) >= ERROR_BODY_BYTES:
            break
    text = raw.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:500] or response.reason_phrase or "no reason given"
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return text[:500]


async def _data(response: httpx2.Response) -> AsyncIterator[Any]:
    """The decoded ``data`` of each server-sent event (the Messages API names each event after its data's
    ``type``: the data is all that is read)."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if line:
            if line.startswith("data:"):
                lines.append(line[6:] if line.startswith("data: ") else line[5:])
            continue  # "event:", "id:", ":" comments: nothing the data does not say
        if lines:
            yield json.loads("\n".join(lines))
            lines = []
    if lines:
        yield json.loads("\n".join(lines))


async def _close(response: httpx2.Response) -> None:
    """Close the HTTP response, even in a cancelled scope (that is when it matters most)."""
    with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
        try:
            await response.aclose()
        except Exception as exc:  # the connection may already be gone; the original error matters more
            log.debug("closing the model response: %s", exc)
