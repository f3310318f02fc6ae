"""The OpenAI-compatible adapter: :class:`OpenAIModel`, a :class:`~refagent.llm.protocol.ModelClient` that
streams Chat Completions through the official ``openai`` package: the model client of a profile's
default client kind, ``openai``.

Importing this module does not import ``openai`` (~0.8 s): the first :meth:`OpenAIModel.stream` does, in a
worker thread so the event loop keeps serving the editor; :func:`warm_up` does it ahead of time.

Three modules, one seam each: this one sends the request and runs the retry loop, and says every failure
as itself; :mod:`refagent.llm.openai_stream` reads the stream's chunks into events (what a provider sends:
reasoning fields, split surrogate pairs, tool calls in pieces, usage, finish reasons); and
:mod:`refagent.llm.retry` holds what is not about one provider (the backoff, ``Retry-After``, why a
connection failed), for any adapter.

Requests and provider quirks on the way out (the turn only sees :mod:`refagent.llm.protocol` events):

- a request's messages are sent as they are (the session keeps its history in the Chat Completions format,
  :mod:`refagent.llm.protocol`) but for refagent's own keys (:func:`~refagent.llm.protocol.wire_message`),
  its tools as ``function`` tools, the body built once as plain JSON (no per-message work in the package);
- on OpenAI's own host, the session's cache key goes out as ``prompt_cache_key``, so that its requests
  reach the machines that hold its cached prefix;
- on OpenRouter (:func:`~refagent.llm.profiles.is_openrouter`), it goes out as ``session_id``, which
  keeps a session's requests on one upstream provider, where its cache is; and for Claude
  (``anthropic/...``), which caches nothing unless asked, the body asks for OpenRouter's automatic caching
  (``cache_control`` on the body: a breakpoint at its last block, the moving end, found again by the next
  step's within Anthropic's 20 blocks) and the system prompt carries a breakpoint of its own (so a step
  that adds more than 20 blocks still reads the tools and the system prompt from the cache);
- a server that rejects ``stream_options`` is asked again without it (and never again with it), and so is
  one that refuses what a server added to its answers (below) as a field it does not know;
- what a server wants back with an assistant message (:mod:`refagent.llm.openai_stream` gathers it) goes
  back on it, unchanged, to that server only (it is kept under the endpoint's name): OpenRouter's
  ``reasoning_details`` (Claude's signed thinking, Gemini's and OpenAI's encrypted reasoning), a tool
  call's ``extra_content`` (Gemini 3's thought signature on Google's endpoint) and ``reasoning_content``
  (DeepSeek's thinking), which each requires in the tool loop;
- a request's reasoning effort goes out as ``reasoning_effort`` (on OpenRouter, ``reasoning.effort``, its
  one control for every model, and for Claude there ``reasoning.max_tokens``, the thinking budget the
  ``anthropic`` kind gives that level, under a ``max_tokens`` that leaves room for the answer; none: the
  field is left out); a 400/422
  that names it is not retried without it (the user chose it): :class:`~refagent.errors.ModelError` says
  the model does not accept that reasoning effort and where to change it;
- a request that cannot be encoded (a lone surrogate got into the conversation or a tool's description
  past the boundaries that clean text) is sent again cleaned, with a warning, rather than failing.

Retries (the ``openai`` client's own are disabled, ``max_retries=0``, so the policy is this one,
:class:`~refagent.llm.retry.RetryPolicy`): 408, 409, 429, 5xx, connection errors and timeouts, and a
stream cut before it produced anything, are retried with bounded exponential backoff and jitter, honouring
``Retry-After`` (capped); a :class:`~refagent.llm.protocol.Retrying` event precedes each wait so the user
sees it.

A failure *after* text or reasoning was yielded is not retried: the turn has already shown that text to
the user and keeps it in the history, and a new request would answer from the start, so the user would
read the beginning twice. Instead :class:`~refagent.errors.ModelError` says the reply was cut off; the
partial reply stays in the history and the user can ask to continue. (Tool calls are only yielded at
the end, so a stream cut while a tool call was arriving is retried.)

Errors, each said as itself (the turn shows the message to the user and marks the turn's failure with the
error's ``kind``, :mod:`refagent.session.turn`):

- a connection that fails says how, found in the exception's chain of causes
  (:func:`~refagent.llm.retry.connection_problem`): refused (retried: a server may be starting), a host
  name that does not resolve or a TLS certificate that cannot be verified (neither retried: waiting does
  not fix them), another TLS failure (retried);
- 401/403 raise :class:`~refagent.errors.ModelAuthError` naming where the key came from
  (:func:`~refagent.llm.profiles.key_origin`: ``OPENAI_API_KEY``, ``api_key_env``'s variable, or ``api_key``
  in the config file); the key itself is never shown, and is cut out of what the server said;
- 404 raises :class:`~refagent.errors.ModelConfigError`: the endpoint serves no such model (or the base URL
  is wrong), with the model's name, the endpoint and where to set ``model``;
- a profile that names no model, on an endpoint whose ``GET /models`` lists none or answers an error status,
  raises :class:`~refagent.errors.ModelConfigError` saying so (a connection failure there is a connection
  failure, as above);
- a stream that is not Chat Completions (an event that is not JSON, a chunk of the wrong shape) raises
  :class:`~refagent.errors.ModelError` asking whether the endpoint is OpenAI-compatible;
- every other persistent failure raises :class:`~refagent.errors.ModelError` with the status, what the
  server said, and the endpoint.

Cancellation (the caller's cancel scope) closes the HTTP response at once.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.openai_stream import KEPT_API, Assembler, Malformed
from refagent.llm.profiles import (
    ModelProfile,
    is_openai_host,
    is_openrouter,
    key_hint,
    key_origin,
    missing_key,
    model_setting,
)
from refagent.llm.protocol import ModelEvent, ModelRequest, Retrying, cleaned_request, kept_reasoning, wire_message
from refagent.llm.retry import RETRYABLE_STATUS, Failure, RetryPolicy, connection_problem, retry_after, retry_wait
from refagent.llm.wire_json import EncodedMessages, body

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["NO_KEY", "OpenAIModel", "StreamReader", "warm_up"]

log = logging.getLogger(__name__)

NO_KEY = "no-key-needed"
"""Sent as the key to endpoints that need none: the ``openai`` client insists on one, local servers ignore it."""
CONNECT_TIMEOUT = 10.0
"""Seconds connecting to the endpoint may take."""
CLOSE_TIMEOUT = 2.0
"""How long closing a cancelled HTTP response may take (it is shielded from the cancellation)."""
EPHEMERAL = {"type": "ephemeral"}
"""A prompt-cache breakpoint of the default lifetime (five minutes), as OpenRouter passes it to Anthropic."""
OPENROUTER_SESSION_CHARS = 256
"""The longest ``session_id`` OpenRouter takes."""


async def warm_up() -> None:
    """Import ``openai`` in a worker thread (call it in the background once ``initialize`` is answered)."""
    await anyio.to_thread.run_sync(_import_openai)


def _import_openai() -> Any:
    import openai  # here: in a worker thread (warm_up, _get_client), never on the loop: ~270 ms

    return openai


class StreamReader(Protocol):
    """Reads one response's stream into events (:class:`~refagent.llm.openai_stream.Assembler` for Chat
    Completions): :meth:`feed` each decoded event, then :meth:`finish` for what is only known at the end."""

    def feed(self, chunk: Any) -> Iterator[ModelEvent]: ...

    def finish(self) -> Iterator[ModelEvent]: ...


class OpenAIModel:
    """A :class:`~refagent.llm.protocol.ModelClient` for one profile's OpenAI-compatible endpoint.

    One instance per profile, reused across turns (it keeps the HTTP connection pool warm); close it with
    :meth:`aclose`. ``sleep`` and ``rand`` are seams for tests. If the profile names no model, the first
    model the endpoint lists (``GET /models``) is used: local servers usually serve exactly one.

    An adapter for another of OpenAI's APIs (:class:`~refagent.llm.responses_client.ResponsesModel`) keeps
    the retry loop, the errors, the client and the body's making, and sets :attr:`path`, :attr:`list_key`,
    :attr:`spread` and :attr:`effort_param`, and its own :meth:`_fields`, :meth:`_conversation`,
    :meth:`_item`, :meth:`_reader` (and :meth:`_drop_rejected`, :meth:`_classify` for what only its API says).
    """

    path = "/chat/completions"
    """Where the API's requests go, after the endpoint (``base_url``)."""
    list_key = "messages"
    """The body's field that holds the conversation."""
    spread = False
    """Whether :meth:`_item` makes a list of items of one message, each an element of :attr:`list_key`."""
    effort_param = "reasoning_effort"
    """The request field of the reasoning effort, as the API's errors name it."""

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
        self._openrouter = is_openrouter(profile)
        self._kept_api = f"{KEPT_API} {profile.endpoint}"
        """What the server wants back is kept under its endpoint's name: another server is never sent it."""
        self._send_kept = True
        """Whether it is sent back (not to a server that refused it as unknown: :meth:`_drop_rejected`)."""
        self._cached_claude = False
        """Whether the messages are written for Claude on OpenRouter (:meth:`_item`)."""
        self._encoded = EncodedMessages(self._item, spread=self.spread)

    @property
    def url(self) -> str:
        """The endpoint requests go to, for messages."""
        return self.profile.endpoint.rstrip("/") + self.path

    async def prepare(self) -> None:
        """Import ``openai`` and build the client now, in a worker thread, so that the first request does
        not wait for them (the agent's warm-up after the first ``session/new``). Raises
        :class:`~refagent.errors.ModelAuthError` for a profile that needs a key it lacks, as a request would."""
        await self._get_client()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response to ``request`` (see the module docstring for the contract)."""
        client = await self._get_client()
        model = await self._get_model(client)
        attempt = 1
        cleaned = False
        while True:
            yielded = False
            try:
                async with self._open(client, model, request) as chunks:
                    assembler = self._reader()
                    async for chunk in chunks:
                        for event in assembler.feed(chunk):
                            yielded = True
                            yield event
                    for event in assembler.finish():
                        yield event
                    return
            except UnicodeEncodeError as exc:  # raised while the request's body is encoded
                if cleaned or yielded:
                    raise ModelError(f"The request to {self.url} cannot be encoded as UTF-8 ({exc}).") from exc
                log.warning("a lone surrogate got into the model request (%s); sending it cleaned", exc)
                request, cleaned = cleaned_request(request), True
                continue
            except Exception as exc:
                if not yielded and self._drop_rejected(exc):
                    continue  # not a real attempt: ask again at once without what was refused
                if (
                    request.reasoning_effort is not None
                    and not yielded
                    and _rejects_reasoning_effort(exc, self.effort_param)
                ):
                    raise self._effort_rejected(exc, model, request.reasoning_effort) from exc
                failure = self._classify(exc)  # raises what is not worth retrying
            wait = retry_wait(self.retry, attempt, failure, shown=yielded, url=self.url, model=model, rand=self._rand())
            attempt += 1
            log.info("model request failed (%s); attempt %d in %.2f s", failure.message, attempt, wait)
            yield Retrying(attempt, wait, failure.message, self.retry.attempts)
            await self._sleep(wait)

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
                default_headers=dict(self.profile.headers) or None,  # an editor's routing: over the key
                # A stream silent for the policy's stall_seconds fails the attempt (a timeout, retried), and
                # nothing waits the package's 10 minutes; a test's own timeout wins over both.
                timeout=self.timeout or openai.Timeout(self.retry.stall_seconds, connect=CONNECT_TIMEOUT),
            ),
        )

    async def _get_model(self, client: AsyncOpenAI) -> str:
        """The profile's model, else the first the endpoint lists (asked once)."""
        if self._model:
            return self._model
        import openai  # here: kept off this module's import (~270 ms); loaded by now

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

    def _reader(self) -> StreamReader:
        """A reader for one response's stream."""
        return Assembler(self._kept_api)

    def _drop_rejected(self, exc: Exception) -> bool:
        """Whether ``exc`` refused an optional part of the request the adapter can do without; it then
        leaves it out from now on, and the request is sent again at once (``stream_options``, and what the
        server added to its answers, which a server that names such a field as unknown does not take)."""
        if self._stream_options and _rejects_stream_options(exc):
            self._stream_options = False
            return True
        if self._send_kept and _rejects_kept(exc):
            log.warning("%s does not take back what it added to its answers: sent without it from now on", self.url)
            self._send_kept = False
            self._encoded = EncodedMessages(self._item, spread=self.spread)  # each message made again, without
            return True
        return False

    @asynccontextmanager
    async def _open(self, client: AsyncOpenAI, model: str, request: ModelRequest) -> AsyncIterator[Any]:
        """Send the streaming request (raising for an error status) and give its stream of decoded events
        (the openai package's own SSE decoding and error wrapping, without its pydantic models), closed
        when the block ends, even when it is cancelled.

        The body is built by :meth:`_encode` and sent as it is: through the method of the package's resource
        (``chat.completions.create``), the package would first walk every message and tool schema against
        its types (0.13 ms a message, so each step of a long session would cost more than the one before)."""
        from openai import AsyncStream  # here: kept off this module's import (~270 ms); loaded by now

        content = self._encode(model, request)
        options: Any = {"headers": {"Content-Type": "application/json"}}
        stream: Any = await client.post(
            self.path, cast_to=object, content=content, options=options, stream=True, stream_cls=AsyncStream[object]
        )
        try:
            yield stream
        finally:
            await _close(stream.response)

    def _encode(self, model: str, request: ModelRequest) -> bytes:
        """The request's body: :meth:`_fields`, and :attr:`list_key` with the conversation, each message's
        JSON made once and reused by the requests after (:mod:`refagent.llm.wire_json`)."""
        if self._cached_claude != (claude := self._claude_on_openrouter(model)):
            self._cached_claude = claude  # how the system message is written changes: each is made again
            self._encoded = EncodedMessages(self._item, spread=self.spread)
        texts = self._encoded.encode(self._conversation(request.messages))
        return body({**self._fields(model, request), "stream": True}, {self.list_key: texts})

    def _body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The request's body as an object (what :meth:`_encode` sends), for a reader."""
        decoded: dict[str, Any] = json.loads(self._encode(model, request))
        return decoded

    def _conversation(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages that go into :attr:`list_key` (all of them, for Chat Completions)."""
        return messages

    def _item(self, message: dict[str, Any]) -> Any:
        """One message as the API takes it (refagent's own keys dropped, for Chat Completions): an assistant
        message with what this server wants back (:func:`_with_kept`), and for Claude on OpenRouter the
        system prompt a cache breakpoint."""
        sent = wire_message(message)
        if self._cached_claude and sent.get("role") == "system" and isinstance(sent.get("content"), str):
            return {**sent, "content": [{"type": "text", "text": sent["content"], "cache_control": EPHEMERAL}]}
        kept = kept_reasoning(message, self._kept_api) if self._send_kept else []
        return _with_kept(sent, kept) if kept else sent

    def _claude_on_openrouter(self, model: str) -> bool:
        """Whether ``model`` is Claude on OpenRouter (which caches only where the request asks)."""
        return model.removeprefix("~").startswith("anthropic/") and self._openrouter

    def _fields(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The body but the conversation (see the module docstring for what goes in it)."""
        fields: dict[str, Any] = {"model": model}
        if request.tools:
            fields["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if self._stream_options:
            fields["stream_options"] = {"include_usage": True}
        effort = request.reasoning_effort
        if effort is not None and self._claude_on_openrouter(model):
            # Claude's thinking budget as the anthropic kind gives it (OpenRouter would make "medium" up to
            # 32,000 tokens of the model's limit), under a max_tokens that leaves room for the answer.
            from refagent.llm.anthropic_request import max_tokens  # here: 2 ms off every other start

            fields["max_tokens"], budget = max_tokens(self.profile.max_output_tokens, effort)
            fields["reasoning"] = {"max_tokens": budget}
        elif effort is not None and self._openrouter:
            fields["reasoning"] = {"effort": effort}  # OpenRouter's one control for every model
        elif effort is not None:
            fields["reasoning_effort"] = effort
        if request.cache_key is not None and is_openai_host(self.profile.base_url):
            fields["prompt_cache_key"] = request.cache_key
        if self._openrouter:
            if request.cache_key is not None:
                fields["session_id"] = request.cache_key[:OPENROUTER_SESSION_CHARS]
            if self._claude_on_openrouter(model):
                fields["cache_control"] = EPHEMERAL
        return fields

    def _effort_rejected(self, exc: Exception, model: str, effort: str) -> ModelError:
        where = f"`reasoning_effort` in {self.profile.source}" if self.profile.source.endswith("]") else "its profile"
        return ModelError(
            f"The model {model!r} does not accept the reasoning effort {effort!r}: {self.url} answered "
            f"{getattr(exc, 'status_code', '?')}: {_server_said(exc)}. Choose another thought level, or fix "
            f"{where} (leave it out if the model takes no reasoning effort)."
        )

    def _classify(self, exc: Exception) -> Failure:
        """Describe a failed attempt worth retrying; raise at once what retrying cannot fix."""
        import openai  # here: kept off this module's import (~270 ms); loaded by now

        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            said = self._said(exc)
            if status in (401, 403):
                raise self._auth_error(exc, self.url) from exc
            message = f"{self.url} answered {status}: {said}"
            if status in RETRYABLE_STATUS or status >= 500:
                return Failure(message, retry_after(exc.response.headers))
            if status == 404:
                raise ModelConfigError(
                    f"{self.url} answered 404 for the model {self._model!r} ({said}): it serves no such model, "
                    f"or the base URL is wrong. {self.profile.endpoint.rstrip('/')}/models lists its models; "
                    f"set {model_setting(self.profile)}."
                ) from exc
            raise ModelError(f"{message} (model {self._model!r})") from exc
        if isinstance(exc, openai.APITimeoutError):
            return Failure(f"{self.url} timed out")
        if isinstance(exc, openai.APIConnectionError):
            message = self._connection_failure(exc)
            if not connection_problem(exc).transient:  # waiting fixes no unknown host name or bad certificate
                raise ModelError(f"{message}.") from exc
            return Failure(message)
        if isinstance(exc, openai.APIError):
            # An error event inside the stream (OpenRouter and others): retry what its code says is transient.
            code = _int(exc.code) or _int(exc.body.get("code") if isinstance(exc.body, dict) else None)
            message = f"{self.url} reported an error mid-stream: {exc.message}"
            if code is not None and (code in RETRYABLE_STATUS or code >= 500):
                return Failure(message)
            raise ModelError(message) from exc
        if isinstance(exc, (json.JSONDecodeError, Malformed)):
            what = exc if isinstance(exc, Malformed) else f"an event that is not JSON ({exc})"
            raise ModelError(f"{self.url} sent {what}; is it an OpenAI-compatible endpoint?") from exc
        if isinstance(exc, openai.OpenAIError):
            raise ModelError(f"{self.url}: {exc}") from exc
        raise exc

    def _connection_failure(self, exc: Exception) -> str:
        """What a failed connection to the endpoint was, for the user (no final period)."""
        import openai  # here: kept off this module's import (~270 ms); loaded by now

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


_KEPT_FIELDS = ("reasoning_content", "reasoning_details", "extra_content")


def _rejects_kept(exc: Exception) -> bool:
    """Whether ``exc`` refuses a field of what the server added to its answers as unknown (not as missing:
    DeepSeek's thinking mode refuses a message without its ``reasoning_content``)."""
    status = getattr(exc, "status_code", None)
    said = f"{getattr(exc, 'body', '')} {exc}"
    return status in (400, 422) and any(name in said for name in _KEPT_FIELDS) and "missing" not in said.lower()


def _rejects_reasoning_effort(exc: Exception, param: str) -> bool:
    status = getattr(exc, "status_code", None)
    return status in (400, 422) and param in f"{getattr(exc, 'body', '')} {exc}"


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


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"{status}: {_server_said(exc)}" if status is not None else str(exc) or type(exc).__name__


def _with_kept(message: dict[str, Any], kept: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant ``message`` with what its server wants back (:mod:`refagent.llm.openai_stream`): its
    ``reasoning_content``, its ``reasoning_details``, and each tool call's ``extra_content``, unchanged."""
    thought = next((item["reasoning_content"] for item in kept if isinstance(item.get("reasoning_content"), str)), "")
    if thought:
        message = {**message, "reasoning_content": thought}
    details = [item["reasoning_detail"] for item in kept if isinstance(item.get("reasoning_detail"), dict)]
    extras = {  # read back from a session's records, which may be anything: strings as keys only
        item["tool_call_id"]: item["extra_content"]
        for item in kept
        if isinstance(item.get("tool_call_id"), str) and isinstance(item.get("extra_content"), dict)
    }
    sent = {**message, "reasoning_details": details} if details else dict(message)
    calls = message.get("tool_calls")
    if extras and isinstance(calls, list):
        sent["tool_calls"] = [
            {**call, "extra_content": extras[call["id"]]}
            if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"] in extras
            else call
            for call in calls
        ]
    return sent
