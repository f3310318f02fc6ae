"""The body of a Messages API request, built once per step as plain JSON from a
:class:`~refagent.llm.protocol.ModelRequest`: the part of the Anthropic adapter
(:mod:`refagent.llm.anthropic_client`) that knows how Anthropic wants a conversation said.

:func:`body` gives ``model``, ``max_tokens``, ``stream: true``, ``system``, ``tools``, ``messages`` and,
with a reasoning effort, ``thinking``:

- ``system``: each system message (its text) as a text block, in order;
- ``tools``: ``{"name", "description", "input_schema"}``;
- ``messages``, from the session's Chat Completions form (:mod:`refagent.llm.protocol`): a user message's
  text as text blocks and its images (``image_url`` parts) as image blocks (a ``data:`` URL as a base64
  source, any other as a URL source); tool results (``role: tool``) as ``tool_result`` blocks of a user
  message; an assistant message as its kept thinking blocks first (those it keeps for ``anthropic``:
  :func:`~refagent.llm.protocol.kept_reasoning`; another API's are left out), then its text, then its tool
  calls as ``tool_use`` blocks. The API wants the roles to alternate: consecutive messages of one role (the
  tool results of one response, and a reminder or a steer after them) are one message, its
  ``tool_result`` blocks first (as the API wants them). Empty text is never sent (the API refuses an empty
  text block), and a message left with nothing (a cancelled response that said nothing) is left out;
- prompt caching by Anthropic's rules (a prefix is cached at a block marked ``cache_control``, at most four
  marks a request): the last tool, the last system block, the last block of the last message (the moving
  end: this step writes the conversation so far), and the last block of the user message before it (where
  the previous step's mark was, so that this step reads what that one wrote);
- ``thinking: {"type": "enabled", "budget_tokens": N}`` for a reasoning effort: :data:`THINKING_BUDGETS`
  (``minimal`` 1024, ``low`` 4096, ``medium`` 10000, ``high`` 24000, ``xhigh`` and ``max`` 32000), a level
  that is a whole number that many tokens, and any other level the profile lists ``medium``'s; no effort,
  no thinking. No temperature is sent (thinking allows none but the default);
- ``max_tokens``: the profile's ``max_output_tokens``, else :data:`DEFAULT_MAX_TOKENS`; the API requires it
  above the thinking budget, so a budget that does not fit under it is lowered to leave
  :data:`MIN_ANSWER_TOKENS` for the answer (not below the API's least budget, 1024: then ``max_tokens`` is
  raised instead, for a profile whose limit is that small).

A tool call's arguments go out as the ``tool_use`` block's ``input``, which the API wants to be an object.
Arguments that are not a JSON object (a response cut by its token limit, a model that wrote broken JSON)
go out as ``{}``, and so that nothing is lost, the call's result then starts with a text block that quotes
them: the model reads what it sent beside the error the tool answered.
"""

from __future__ import annotations

import json
from typing import Any

from refagent.llm.profiles import ANTHROPIC_CLIENT
from refagent.llm.protocol import ModelRequest, kept_reasoning

__all__ = ["DEFAULT_MAX_TOKENS", "MIN_ANSWER_TOKENS", "THINKING_BUDGETS", "body", "max_tokens", "thinking_budget"]

DEFAULT_MAX_TOKENS = 32_000
"""``max_tokens`` for a profile that sets no ``max_output_tokens``: what the current Claude models can
write in one response, at the least (the API requires a limit; it bills what is written, not the limit)."""
MIN_BUDGET = 1024
"""The least thinking budget the API takes."""
MIN_ANSWER_TOKENS = 4096
"""What a thinking budget leaves at least under ``max_tokens``, for the answer and its tool calls."""
THINKING_BUDGETS = {
    "minimal": MIN_BUDGET,
    "low": 4096,
    "medium": 10_000,
    "high": 24_000,
    "xhigh": 32_000,
    "max": 32_000,
}
"""Thinking budgets (tokens) by reasoning effort; another level (not a number) gets ``medium``'s."""
EPHEMERAL = {"type": "ephemeral"}
"""The ``cache_control`` of a prompt-cache breakpoint (the default lifetime, five minutes)."""
_THINKING = frozenset({"thinking", "redacted_thinking"})
"""Blocks the API lets no ``cache_control`` be set on."""


def thinking_budget(effort: str) -> int:
    """The thinking budget of a reasoning effort (see the module docstring)."""
    if effort.isdigit():
        return max(MIN_BUDGET, int(effort))
    return THINKING_BUDGETS.get(effort.lower(), THINKING_BUDGETS["medium"])


def max_tokens(limit: int | None, effort: str | None) -> tuple[int, int | None]:
    """``max_tokens`` and the thinking budget (``None``: no thinking) for a profile's ``limit`` and ``effort``."""
    most = limit or DEFAULT_MAX_TOKENS
    if effort is None:
        return most, None
    budget = min(thinking_budget(effort), most - MIN_ANSWER_TOKENS)
    if budget < MIN_BUDGET:
        budget = MIN_BUDGET
        most = max(most, budget + 1)  # a limit this small leaves the answer what it can
    return most, budget


def body(model: str, request: ModelRequest, limit: int | None) -> dict[str, Any]:
    """The request's JSON body (see the module docstring); ``limit``: the profile's ``max_output_tokens``."""
    system, messages = convert(request.messages)
    most, budget = max_tokens(limit, request.reasoning_effort)
    result: dict[str, Any] = {"model": model, "max_tokens": most, "stream": True}
    if system:
        system[-1]["cache_control"] = dict(EPHEMERAL)
        result["system"] = system
    if request.tools:
        tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
        tools[-1]["cache_control"] = dict(EPHEMERAL)
        result["tools"] = tools
    _mark_ends(messages)
    result["messages"] = messages
    if budget is not None:
        result["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return result


def convert(chat: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The system blocks and the messages of a conversation in the Chat Completions form (new dicts: the
    conversation's own are never changed)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    unsent: dict[str, str] = {}  # the arguments of calls sent as {} (not a JSON object), by the call's id
    for message in chat:
        role = message.get("role")
        if role in ("system", "developer"):  # the API has one system prompt, apart from the messages
            system.extend(_texts(message.get("content")))
        elif role == "assistant":
            _append(messages, "assistant", _assistant(message, unsent))
        elif role == "tool":
            _append(messages, "user", [_tool_result(message, unsent)])
        else:  # "user", and any role the API has not (it has two)
            _append(messages, "user", _user_content(message.get("content")))
    for message in messages:  # the API wants a message's tool results before anything else in it
        content = message["content"]
        results = [block for block in content if block["type"] == "tool_result"]
        if results and len(results) < len(content):
            message["content"] = results + [block for block in content if block["type"] != "tool_result"]
    return system, messages


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add ``blocks`` as a message of ``role``: to the last message when it is of that role (the API wants
    the roles to alternate), and not at all when there are none (it refuses an empty message)."""
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _assistant(message: dict[str, Any], unsent: dict[str, str]) -> list[dict[str, Any]]:
    kept = [dict(item) for item in kept_reasoning(message, ANTHROPIC_CLIENT)]
    blocks = kept + _texts(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            value = {}
            unsent[str(call.get("id"))] = arguments  # quoted in the call's result (see the module docstring)
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": value})
    if len(blocks) == len(kept):
        return []  # reasoning alone is no answer to send back (a response cancelled while it thought)
    return blocks


def _tool_result(message: dict[str, Any], unsent: dict[str, str]) -> dict[str, Any]:
    call_id = str(message.get("tool_call_id"))
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    content: Any = message.get("content")
    if call_id in unsent:
        quoted = f"The arguments of this call, as sent (not a JSON object): {unsent[call_id]}"
        content = [{"type": "text", "text": quoted}, *_user_content(content)]
    elif not isinstance(content, str):
        content = _user_content(content)
    if content:  # no content at all is how the API says "no output" (it refuses an empty text block)
        result["content"] = content
    return result


def _user_content(content: Any) -> list[dict[str, Any]]:
    """A user message's (or a tool result's) content as blocks: text and images."""
    if not isinstance(content, list):
        return _texts(content)
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = _image(part.get("image_url"))
            if image is not None:
                blocks.append(image)
        else:
            blocks.extend(_texts([part]))
    return blocks


def _image(image_url: Any) -> dict[str, Any] | None:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        return None
    if url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[len("data:") :].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _texts(content: Any) -> list[dict[str, Any]]:
    """Text content (a string, or a list of text parts) as text blocks, the empty ones left out."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content or ():
        text = part.get("text") if isinstance(part, dict) else part
        if isinstance(text, str) and text:
            blocks.append({"type": "text", "text": text})
    return blocks


def _mark_ends(messages: list[dict[str, Any]]) -> None:
    """Mark the moving end (the last message) and the end of the user message before it for the prompt
    cache (see the module docstring)."""
    if not messages:
        return
    _mark(messages[-1])
    earlier = next((m for m in reversed(messages[:-1]) if m["role"] == "user"), None)
    if earlier is not None:
        _mark(earlier)


def _mark(message: dict[str, Any]) -> None:
    block = message["content"][-1]
    if block["type"] not in _THINKING:
        block["cache_control"] = dict(EPHEMERAL)
