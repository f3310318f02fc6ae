"""The body of a Messages API request, built once per step as plain JSON from a
:class:`~refagent.llm.protocol.ModelRequest`: the part of the Anthropic adapter
(:mod:`refagent.llm.anthropic_client`) that knows how Anthropic wants a conversation said.

:class:`Bodies` encodes it (each message once: the cost of a step does not grow with the conversation).
It has ``model``, ``max_tokens``, ``stream: true``, ``system``,
``tools``, ``messages`` and, with a reasoning effort, ``thinking``:

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
from typing import Any, TypeAlias

from refagent.llm.profiles import ANTHROPIC_CLIENT
from refagent.llm.protocol import ModelRequest, kept_reasoning
from refagent.llm.wire_json import body as wire_body
from refagent.llm.wire_json import dumps

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MIN_ANSWER_TOKENS",
    "THINKING_BUDGETS",
    "Bodies",
    "max_tokens",
    "thinking_budget",
]

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
Converted: TypeAlias = tuple[str, list[dict[str, Any]], dict[str, str]]
"""A chat message as Anthropic takes it: its role, its blocks, and the arguments it sent as ``{}`` by call id."""
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


class Bodies:
    """The bodies of one client's requests (:meth:`encode`), each built as plain JSON with what the request
    before had made reused: a session's conversation grows at its end, so each chat message is converted
    once and each Anthropic message encoded once, as long as the conversation up to it is the same objects
    (the conversation never changes a message in place: :mod:`refagent.llm.wire_json`). The two messages
    with a prompt-cache mark (the last, and the user message before it) are encoded again each time."""

    def __init__(self) -> None:
        self._chat: list[dict[str, Any]] = []
        self._converted: list[Converted] = []
        """Per chat message, what it is in Anthropic's form."""
        self._groups: list[tuple[int, ...]] = []
        self._texts: list[str] = []
        """Per Anthropic message: the chat messages it is made of (their indexes), and its JSON unmarked."""

    def encode(self, model: str, request: ModelRequest, limit: int | None) -> bytes:
        """The request's body (see the module docstring); ``limit``: the profile's ``max_output_tokens``.
        Raises :class:`UnicodeEncodeError` for a lone surrogate."""
        chat = request.messages
        same = _same_prefix(self._chat, chat)
        unsent: dict[str, str] = {}
        for _, _, added in self._converted[:same]:
            unsent.update(added)
        converted = self._converted[:same]
        for message in chat[same:]:
            before = dict(unsent)
            converted.append((*_converted(message, unsent), {k: v for k, v in unsent.items() if k not in before}))
        self._chat, self._converted = list(chat), converted
        system = [block for role, blocks, _ in converted if role == "system" for block in blocks]
        groups = _groups(converted)
        marked = _marked(groups, converted)
        kept = _same_prefix(self._groups, groups, identical=False)
        texts = self._texts[:kept] + [dumps(_message(converted, group)) for group in groups[kept:]]
        self._groups, self._texts = groups, texts
        sent = [
            dumps(_message(converted, groups[i], mark=True)) if i in marked else text for i, text in enumerate(texts)
        ]
        most, budget = max_tokens(limit, request.reasoning_effort)
        fields: dict[str, Any] = {"model": model, "max_tokens": most, "stream": True}
        if system:
            fields["system"] = [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
        if request.tools:
            tools = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
            fields["tools"] = [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]
        if budget is not None:
            fields["thinking"] = {"type": "enabled", "budget_tokens": budget}
        return wire_body(fields, {"messages": sent})


def _same_prefix(old: list[Any], new: list[Any], *, identical: bool = True) -> int:
    """How many leading items of ``new`` are those of ``old``: the same objects, or equal (``identical``
    False: tuples of indexes)."""
    same, limit = 0, min(len(old), len(new))
    while same < limit and (old[same] is new[same] if identical else old[same] == new[same]):
        same += 1
    return same


def _converted(message: dict[str, Any], unsent: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """A chat message's Anthropic role and blocks (``unsent`` gets the arguments it sends as ``{}``)."""
    role = message.get("role")
    if role in ("system", "developer"):  # the API has one system prompt, apart from the messages
        return "system", _texts(message.get("content"))
    if role == "assistant":
        return "assistant", _assistant(message, unsent)
    if role == "tool":
        return "user", [_tool_result(message, unsent)]
    return "user", _user_content(message.get("content"))  # "user", and any role the API has not (it has two)


def _groups(converted: list[Converted]) -> list[tuple[int, ...]]:
    """The chat messages (indexes) that make each Anthropic message: the API wants the roles to alternate,
    so consecutive ones of a role are one message; one with no blocks is left out (an empty message is
    refused)."""
    groups: list[list[int]] = []
    roles: list[str] = []
    for index, (role, blocks, _) in enumerate(converted):
        if role == "system" or not blocks:
            continue
        if roles and roles[-1] == role:
            groups[-1].append(index)
        else:
            groups.append([index])
            roles.append(role)
    return [tuple(group) for group in groups]


def _marked(groups: list[tuple[int, ...]], converted: list[Converted]) -> set[int]:
    """The messages marked for the prompt cache: the last, and the user message before it."""
    if not groups:
        return set()
    earlier = (i for i in range(len(groups) - 2, -1, -1) if converted[groups[i][0]][0] == "user")
    return {len(groups) - 1, *(next(earlier, len(groups) - 1),)}


def _message(converted: list[Converted], group: tuple[int, ...], *, mark: bool = False) -> dict[str, Any]:
    """One Anthropic message of ``group``'s blocks, its tool results first (as the API wants them); with
    ``mark``, its last block (a copy) carries the prompt-cache mark, unless the API takes none there."""
    blocks = [block for index in group for block in converted[index][1]]
    results = [block for block in blocks if block["type"] == "tool_result"]
    if results and len(results) < len(blocks):
        blocks = results + [block for block in blocks if block["type"] != "tool_result"]
    if mark and blocks[-1]["type"] not in _THINKING:
        blocks = [*blocks[:-1], {**blocks[-1], "cache_control": EPHEMERAL}]
    return {"role": converted[group[0]][0], "content": blocks}


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
