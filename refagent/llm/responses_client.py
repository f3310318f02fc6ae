"""OpenAI's Responses API: :class:`ResponsesModel`, a :class:`~refagent.llm.protocol.ModelClient` that
streams ``POST /responses`` through the official ``openai`` package: the model client of the client kind
``openai-responses``.

It is :class:`~refagent.llm.openai_client.OpenAIModel` with another request and another stream: the
retry loop, the errors (connection, 401/403, 404, the status and what the server said, a reply cut off
after text was shown: never retried), the key's messages, the lazy ``openai`` import (in a worker thread)
and cancellation are that module's, and its docstring says them. Importing this module does not import
``openai``. :mod:`refagent.llm.responses_stream` reads the stream's events.

What is sent (the body built once as plain JSON and given as ``extra_body``, as the Chat adapter does: the
package would otherwise walk every item against its types):

- ``instructions``: the text of the system messages that open the conversation; a system message later
  on goes in its place as a ``developer`` message (the prefix before it stays the same, and so cached);
- ``input``, from the session's Chat Completions messages: a user message as a ``message`` of
  ``input_text`` and ``input_image`` parts; an assistant message as, in order, the reasoning items it kept
  for this API (:func:`~refagent.llm.protocol.kept_reasoning`; left out when the message has neither text
  nor calls to follow them, which the API would refuse), an assistant ``message`` of ``output_text`` when it
  has text, and a ``function_call`` per tool call; a tool message as a ``function_call_output``. Reasoning
  kept for another API (the user switched models) is left out;
- ``tools`` as ``function`` tools (``strict: false``: refagent's schemas are not written for strict mode),
  with ``parallel_tool_calls``;
- ``store: false``: nothing is kept on OpenAI's side; so that a reasoning model's reasoning still carries
  over the tool loop, ``include: ["reasoning.encrypted_content"]`` asks for it back encrypted, with
  ``reasoning: {"effort": ..., "summary": "auto"}``, whenever the request has a reasoning effort or the
  profile lists some (a model that does not reason refuses both). The summaries stream as reasoning;
- ``prompt_cache_key``: the session's cache key, so that its requests reach the machines holding its
  prefix; ``max_output_tokens`` when the profile sets it.

Provider quirks: an organization that may not have reasoning summaries (OpenAI's 400 names
``reasoning.summary``) is asked again at once without them, and never again with them; a 400 that names
``reasoning.effort`` says the model does not accept that effort (the Chat adapter's message). A failure in
the stream (``response.failed``, an ``error`` event, a stream that ends before the response) is retried when
its code says it was the server's (:func:`~refagent.llm.responses_stream.retryable_code`), as a 5xx is;
otherwise it is a :class:`~refagent.errors.ModelError` with what the server said.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from refagent.errors import ModelError
from refagent.llm.openai_client import OpenAIModel, StreamReader
from refagent.llm.profiles import RESPONSES_CLIENT
from refagent.llm.protocol import ModelRequest, kept_reasoning
from refagent.llm.responses_stream import ResponseFailed, ResponsesAssembler, retryable_code
from refagent.llm.retry import Failure

if TYPE_CHECKING:
    pass

__all__ = ["ResponsesModel"]

log = logging.getLogger(__name__)

ENCRYPTED_REASONING = "reasoning.encrypted_content"


class ResponsesModel(OpenAIModel):
    """A :class:`~refagent.llm.protocol.ModelClient` for one profile's Responses API endpoint (see the
    module docstring); made, reused and closed as :class:`~refagent.llm.openai_client.OpenAIModel` is."""

    path = "/responses"
    list_key = "input"
    spread = True
    effort_param = "reasoning.effort"
    _summaries = True
    """Whether reasoning summaries are asked for (until the endpoint refuses them to this key)."""

    def _reader(self) -> StreamReader:
        return ResponsesAssembler()

    def _conversation(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return messages[_leading_system(messages) :]

    def _item(self, message: dict[str, Any]) -> Any:
        return _items(message)

    def _fields(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The body but the input (see the module docstring for what goes in it)."""
        fields: dict[str, Any] = {"model": model, "store": False}
        leading = request.messages[: _leading_system(request.messages)]
        instructions = "\n\n".join(text for m in leading if (text := _text(m.get("content"))))
        if instructions:
            fields["instructions"] = instructions
        if request.tools:
            fields["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": False,
                }
                for t in request.tools
            ]
            fields["parallel_tool_calls"] = True
        if request.reasoning_effort is not None or self.profile.reasoning_efforts:
            reasoning: dict[str, Any] = {}
            if request.reasoning_effort is not None:
                reasoning["effort"] = request.reasoning_effort
            if self._summaries:
                reasoning["summary"] = "auto"
            fields["reasoning"] = reasoning
            fields["include"] = [ENCRYPTED_REASONING]
        if request.cache_key is not None:
            fields["prompt_cache_key"] = request.cache_key
        if self.profile.max_output_tokens is not None:
            fields["max_output_tokens"] = self.profile.max_output_tokens
        return fields

    def _drop_rejected(self, exc: Exception) -> bool:
        if self._summaries and _rejects_summaries(exc):
            log.warning("%s does not give reasoning summaries to this key; asking without them", self.url)
            self._summaries = False
            return True
        return False

    def _classify(self, exc: Exception) -> Failure:
        if isinstance(exc, ResponseFailed):
            message = f"{self.url}: {exc.message}"
            if exc.retryable:
                return Failure(message)
            raise ModelError(f"{message} (model {self._model!r})") from exc
        import openai  # here: kept off this module's import (~270 ms); loaded by now

        # An error event with its fields under "error": the openai package raises it before the stream's
        # reader sees it, with a code that is a word (server_error), not the status the Chat adapter reads.
        body = exc.body if type(exc) is openai.APIError else None
        if isinstance(body, dict) and retryable_code(body.get("code"), body.get("type")):
            return Failure(f"{self.url} reported an error mid-stream: {exc}")
        return super()._classify(exc)


def _rejects_summaries(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    said = f"{getattr(exc, 'body', '')} {exc}"
    return status == 400 and ("reasoning.summary" in said or "reasoning summaries" in said)


def _leading_system(messages: list[dict[str, Any]]) -> int:
    """How many messages the conversation starts with that are instructions (system or developer): they
    become ``instructions``; one later in the conversation is a ``developer`` item in its place, so that
    the cached prefix stays as it was."""
    count = 0
    while count < len(messages) and messages[count].get("role") in ("system", "developer"):
        count += 1
    return count


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The input items of one message in the Chat Completions format."""
    role = message.get("role")
    content = message.get("content")
    if role in ("system", "developer"):
        return [{"type": "message", "role": "developer", "content": _parts(content)}]
    if role == "user":
        return [{"type": "message", "role": "user", "content": _parts(content)}]
    if role == "assistant":
        return _assistant(message)
    if role == "tool":
        output = content if isinstance(content, str) else _parts(content)
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}]
    return []


def _assistant(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's items: its kept reasoning, its text, its calls (see the module docstring)."""
    text = _text(message.get("content"))
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = []
    if text or calls:
        items += kept_reasoning(message, RESPONSES_CLIENT)
    if text:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
    for call in calls:
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
            }
        )
    return items


def _parts(content: Any) -> list[dict[str, Any]]:
    """Chat Completions content (a string, or text and image parts) as Responses input parts."""
    if not isinstance(content, list):
        return [{"type": "input_text", "text": content if isinstance(content, str) else ""}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text") or ""})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) else None
            parts.append({"type": "input_image", "image_url": url, "detail": detail or "auto"})
        else:  # already in the Responses form (a fork's own content)
            parts.append(part)
    return parts


def _text(content: Any) -> str:
    """The text of Chat Completions content (a string, or parts of which the text ones count)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""
