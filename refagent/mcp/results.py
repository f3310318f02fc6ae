"""An MCP ``CallToolResult`` as refagent's :class:`~refagent.tools.base.ToolResult`.

The result arrives in MCP's wire form (``{content, structuredContent?, isError?}``, as the SDK dumps it
with aliases), so this module is pure and does not depend on the SDK's classes. Two readers:

* **The model** reads text (a tool result is a string in Chat Completions): text blocks as they are,
  embedded text resources inlined under a header naming their URI, structured content as JSON
  (unless a text block already carries it, as the MCP spec recommends servers do), and a one-line note
  for what it cannot read (images, audio, binary resources, resource links). Cut to
  :data:`MAX_MODEL_CHARS`, head and tail kept.
* **The editor** gets the blocks as ACP ``ToolCallContent`` (ACP content blocks are MCP's, spec
  "Content"): ``{type: "content", content: <text|image|audio|resource_link|resource>}``.

Content annotated for one audience only goes to that one: ``audience: ["user"]`` is shown but not given
to the model, ``audience: ["assistant"]`` the reverse. ``isError`` makes the call ``failed``; the model
reads ``Error: <the tool's text>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from refagent.acp.types import ContentBlock, ToolCallContent
from refagent.tools.base import ToolResult

MAX_MODEL_CHARS = 50_000
"""What the model reads of one result: the first and last halves, the middle elided."""

_ACP_ANNOTATION_KEYS = ("audience", "priority", "lastModified")


def convert_result(result: Mapping[str, Any]) -> ToolResult:
    """Convert a ``CallToolResult`` (wire form) for the model and the editor (see the module docstring)."""
    for_model: list[str] = []
    shown: list[ToolCallContent] = []
    texts: list[str] = []
    blocks = result.get("content")
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, Mapping):
            continue
        to_model, to_user = _audience(block)
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        if to_model:
            for_model.append(_model_text(block))
        content = _acp_block(block)
        if to_user and content is not None:
            shown.append({"type": "content", "content": content})
    structured = result.get("structuredContent")
    if structured is not None and not _carried_by(structured, texts, blocks if isinstance(blocks, list) else []):
        dumped = json.dumps(structured, indent=2, ensure_ascii=False)
        for_model.append(dumped)
        shown.append({"type": "content", "content": {"type": "text", "text": f"```json\n{dumped}\n```"}})
    failed = result.get("isError") is True
    output = _cut("\n\n".join(part for part in for_model if part))
    if failed:
        output = f"Error: {output}" if output else "Error: the tool failed without saying why."
    elif not output:
        output = "(the tool returned no output)"
    return ToolResult(output, content=shown, raw_output=_without_payloads(result), failed=failed)


def _audience(block: Mapping[str, Any]) -> tuple[bool, bool]:
    """(for the model, for the user): both unless the block's annotations name only one."""
    annotations = block.get("annotations")
    audience = annotations.get("audience") if isinstance(annotations, Mapping) else None
    if not isinstance(audience, list) or not audience:
        return True, True
    return "assistant" in audience, "user" in audience


def _model_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return f"[{kind} ({block.get('mimeType', '?')}, {_size(block.get('data'))}): shown to the user, not to you]"
    if kind == "resource_link":
        line = f"[resource link: {block.get('name', '')} <{block.get('uri', '')}>"
        if block.get("mimeType"):
            line += f" ({block['mimeType']})"
        description = block.get("description")
        return line + "]" + (f" {description}" if isinstance(description, str) and description else "")
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, Mapping):
            return "[resource without contents]"
        mime = f" ({resource['mimeType']})" if resource.get("mimeType") else ""
        if isinstance(resource.get("text"), str):
            return f"[resource {resource.get('uri', '')}{mime}]\n{resource['text']}"
        return f"[binary resource {resource.get('uri', '')}{mime}, {_size(resource.get('blob'))}: not shown to you]"
    return f"[{kind} content, which refagent cannot show]"


def _acp_block(block: Mapping[str, Any]) -> ContentBlock | None:
    """The ACP content block for an MCP one (same shapes), keeping only the fields ACP defines."""
    kind = block.get("type")
    out: dict[str, Any]
    if kind == "text" and isinstance(block.get("text"), str):
        out = {"type": "text", "text": block["text"]}
    elif kind in ("image", "audio") and isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str):
        out = {"type": kind, "data": block["data"], "mimeType": block["mimeType"]}
    elif kind == "resource_link" and isinstance(block.get("uri"), str):
        out = {"type": "resource_link", "uri": block["uri"], "name": str(block.get("name") or block["uri"])}
        for key, types in (("mimeType", str), ("title", str), ("description", str), ("size", int)):
            if isinstance(block.get(key), types) and not isinstance(block.get(key), bool):
                out[key] = block[key]
    elif kind == "resource" and isinstance(block.get("resource"), Mapping):
        resource = block["resource"]
        body = next((k for k in ("text", "blob") if isinstance(resource.get(k), str)), None)
        if body is None or not isinstance(resource.get("uri"), str):
            return None
        inner: dict[str, Any] = {"uri": resource["uri"], body: resource[body]}
        if isinstance(resource.get("mimeType"), str):
            inner["mimeType"] = resource["mimeType"]
        out = {"type": "resource", "resource": inner}
    else:
        return None
    annotations = _annotations(block.get("annotations"))
    if annotations:
        out["annotations"] = annotations
    return out


def _annotations(value: Any) -> dict[str, Any]:
    """MCP's annotations as ACP's (the same three fields); anything malformed is dropped."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, Any] = {}
    audience = value.get("audience")
    if isinstance(audience, list) and all(a in ("user", "assistant") for a in audience):
        out["audience"] = list(audience)
    priority = value.get("priority")
    if isinstance(priority, int | float) and not isinstance(priority, bool):
        out["priority"] = priority
    if isinstance(value.get("lastModified"), str):
        out["lastModified"] = value["lastModified"]
    return out


def _carried_by(structured: Any, texts: list[str], blocks: list[Any]) -> bool:
    """Whether the content already says what ``structured`` does: a text block holds its JSON; or, for
    the ``{"result": x}`` wrapper the Python SDK puts around a value that is not an object, a text block
    holds ``x``, or ``x`` is the content blocks themselves (a tool that returned a list of blocks)."""
    wrapped = structured["result"] if isinstance(structured, dict) and list(structured) == ["result"] else None
    if (
        isinstance(wrapped, list)
        and len(wrapped) == len(blocks) > 0
        and all(
            isinstance(w, dict) and isinstance(b, Mapping) and w.get("type") == b.get("type")
            for w, b in zip(wrapped, blocks, strict=True)
        )
    ):
        return True
    for text in texts:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        if parsed == structured or (wrapped is not None and (parsed == wrapped or text == wrapped)):
            return True
    return False


def _size(base64_data: Any) -> str:
    if not isinstance(base64_data, str):
        return "? bytes"
    size = len(base64_data) * 3 // 4 - base64_data[-2:].count("=")
    return f"{size} bytes" if size < 10_000 else f"{size // 1024} KiB"


def _cut(text: str) -> str:
    if len(text) <= MAX_MODEL_CHARS:
        return text
    half = MAX_MODEL_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def _without_payloads(value: Any) -> Any:
    """``rawOutput``: the result, with base64 payloads replaced by their size (the blocks carry them)."""
    if isinstance(value, Mapping):
        return {
            k: (f"<{_size(v)} of base64>" if k in ("data", "blob") and isinstance(v, str) else _without_payloads(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_without_payloads(v) for v in value]
    return value
