"""Prompt content blocks -> the model's user message, and how the agent answers blocks it cannot use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import InvalidParams, RequestError
from refagent.llm.scripted import ScriptedModel, text
from refagent.session.content import file_path, user_message
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect

pytestmark = pytest.mark.anyio


async def read(path: str) -> str:
    if path == "/p/a.py":
        return "print('a')\n"
    raise FileNotFoundError(path)


async def test_text_only_is_a_plain_string() -> None:
    message = await user_message([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], images=False)
    assert message == {"role": "user", "content": "one\n\ntwo"}


async def test_resource_link_to_a_file_is_read_with_its_path() -> None:
    link = {"type": "resource_link", "uri": "file:///p/a.py", "name": "a.py"}
    message = await user_message([{"type": "text", "text": "look"}, link], images=False, read_text=read)
    assert "<file path='/p/a.py'>\nprint('a')\n</file>" in message["content"]


async def test_unreadable_link_is_reported_not_fatal() -> None:
    link = {"type": "resource_link", "uri": "file:///p/missing.py", "name": "missing.py"}
    message = await user_message([link], images=False, read_text=read)
    assert "error=" in message["content"]


async def test_non_file_link_is_a_reference() -> None:
    link = {"type": "resource_link", "uri": "https://example.com/x", "name": "x"}
    message = await user_message([link], images=False, read_text=read)
    assert "https://example.com/x" in message["content"]


async def test_embedded_resource_text_and_blob() -> None:
    blocks = [
        {"type": "resource", "resource": {"uri": "file:///p/b.txt", "text": "hello"}},
        {"type": "resource", "resource": {"uri": "file:///p/c.bin", "blob": "AAAA", "mimeType": "application/zip"}},
    ]
    message = await user_message(blocks, images=False)
    assert "<file path='/p/b.txt'>\nhello\n</file>" in message["content"]
    assert "binary content not shown" in message["content"]


async def test_image_only_when_the_model_accepts_images() -> None:
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    with pytest.raises(InvalidParams, match="does not accept images"):
        await user_message([image], images=False)
    message = await user_message([{"type": "text", "text": "see"}, image], images=True)
    assert message["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.mark.parametrize(
    "block",
    [
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "hologram"},
        {"type": "text"},
        {"type": "resource", "resource": {}},
        "not a block",
    ],
)
async def test_unusable_blocks_are_invalid_params(block: Any) -> None:
    with pytest.raises(InvalidParams):
        await user_message([block], images=False)


def test_file_uris() -> None:
    assert file_path("file:///a/b%20c.py") == "/a/b c.py"
    assert file_path("file://localhost/a") == "/a"
    assert file_path("file://otherhost/a") is None
    assert file_path("https://x/y") is None


async def test_agent_reads_links_through_the_editor_when_offered(tmp_path: Path, check: Any) -> None:
    model = ScriptedModel([text("ok")])
    client = FakeClient(files={"/proj/buffer.py": "unsaved = True\n"})
    settings = Settings(make_model=lambda p: model)
    async with connect(settings, client=client, check=check) as editor:
        await editor.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
        sid = await editor.new_session(str(tmp_path))
        link = {"type": "resource_link", "uri": "file:///proj/buffer.py", "name": "buffer.py"}
        await editor.prompt(sid, "explain", link)
        with pytest.raises(RequestError) as info:
            await editor.prompt(sid, {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"})
        assert info.value.code == -32602
    assert "unsaved = True" in model.requests[0].messages[-1]["content"]
