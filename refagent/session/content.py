"""Prompt content blocks (ACP ``ContentBlock``) -> one user message for the model.

- ``text``: as is.
- ``resource_link``: a ``file://`` link is read through the session's file system (the editor's, when it
  offers one) and given with its path; other links are given as references.
- ``resource`` (embedded context): its text with its URI; a binary blob is described, not inlined.
- ``image``: an image part, only when the model profile accepts images.
- anything else (``audio``, unknown types): ``-32602``, since the agent did not advertise it.

Text needs no cleaning here: the prompt's lone surrogates were replaced as the line was read
(:mod:`refagent.acp.jsonrpc`), and what else the message holds (a file's text, an error naming a path) is
cleaned as it joins the conversation (:class:`refagent.persistence.conversation.Conversation`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

from refagent.acp.errors import InvalidParams
from refagent.acp.types import ContentBlock

ReadText = Callable[[str], Awaitable[str]]

MAX_LINKED_CHARS = 200_000


def file_path(uri: str) -> str | None:
    """The absolute local path of a ``file://`` URI, else None."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return unquote(parsed.path) or None


async def user_message(
    blocks: Sequence[ContentBlock], *, images: bool, read_text: ReadText | None = None
) -> dict[str, Any]:
    """Build the user message for ``blocks``. Raises :class:`InvalidParams` for a block we cannot use."""
    if not blocks:
        raise InvalidParams("Invalid params: 'prompt' is empty")
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):  # as PromptParams checks
            raise InvalidParams(f"Invalid params: prompt[{index}] is not a content block")
        parts.append(await _part(index, block, images=images, read_text=read_text))
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "\n\n".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


async def _part(index: int, block: ContentBlock, *, images: bool, read_text: ReadText | None) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        return _text(_field(index, block, "text"))
    if kind == "resource_link":
        uri = _field(index, block, "uri")
        path = file_path(uri)
        if path is not None and read_text is not None:
            try:
                body = await read_text(path)
            except Exception as exc:  # the model should know the attachment failed, the turn goes on
                return _text(f"<file path={path!r} error={str(exc)!r} />")
            if len(body) > MAX_LINKED_CHARS:
                body = body[:MAX_LINKED_CHARS] + f"\n[... truncated at {MAX_LINKED_CHARS} characters]"
            return _text(_file_block(path, body))
        name = block.get("name") or uri
        return _text(f"<link uri={uri!r} name={name!r} />")
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
            raise InvalidParams(f"Invalid params: prompt[{index}].resource needs a 'uri'")
        uri = resource["uri"]
        where = file_path(uri) or uri
        if isinstance(resource.get("text"), str):
            return _text(_file_block(where, resource["text"]))
        mime = resource.get("mimeType") or "application/octet-stream"
        return _text(f"<file path={where!r} mimeType={mime!r}>(binary content not shown)</file>")
    if kind == "image":
        if not images:
            raise InvalidParams("Invalid params: the selected model does not accept images")
        data = _field(index, block, "data")
        mime = _field(index, block, "mimeType")
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    raise InvalidParams(f"Invalid params: prompt[{index}] has content type {kind!r}, which this agent does not accept")


def _field(index: int, block: ContentBlock, name: str) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise InvalidParams(f"Invalid params: prompt[{index}] ({block.get('type')}) needs a string '{name}'")
    return value


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _file_block(path: str, body: str) -> str:
    ending = "" if body.endswith("\n") else "\n"
    return f"<file path={path!r}>\n{body}{ending}</file>"
