"""The pure parts of refagent.mcp: the ``McpServer`` entries, tool names and kinds, and the conversion of
results for the model and the editor (every content block checked against the ACP schema). No server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from refagent.acp import updates
from refagent.mcp.config import HttpServer, ServerConfigError, StdioServer, parse_server
from refagent.mcp.hub import McpHub
from refagent.mcp.results import MAX_MODEL_CHARS, convert_result
from refagent.mcp.tools import MAX_NAME_LENGTH, ToolNames, input_schema, make_tool, model_name, tool_kind
from refagent.tools.registry import default_tools
from tests.support.tool_fakes import check_update

PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAA"

# -- entries ---------------------------------------------------------------------------------


def test_stdio_entry_without_type_and_with_type_stdio() -> None:
    entry = {"name": "fs", "command": "/bin/fs", "args": ["-v"], "env": [{"name": "A", "value": "1"}]}
    expected = StdioServer("fs", "/bin/fs", ("-v",), (("A", "1"),))
    assert parse_server(entry) == expected
    assert parse_server({**entry, "type": "stdio"}) == expected


def test_stdio_entry_missing_args_and_env_read_as_empty() -> None:
    assert parse_server({"name": "fs", "command": "fs"}) == StdioServer("fs", "fs")


def test_env_given_as_a_map_is_accepted() -> None:
    server = parse_server({"name": "fs", "command": "fs", "args": [], "env": {"A": "1"}})
    assert isinstance(server, StdioServer)
    assert server.env == (("A", "1"),)


def test_http_and_sse_entries() -> None:
    headers = [{"name": "Authorization", "value": "Bearer t"}]
    http = parse_server({"type": "http", "name": "gh", "url": "https://x/mcp", "headers": headers})
    assert http == HttpServer("gh", "https://x/mcp", "http", (("Authorization", "Bearer t"),))
    assert "Bearer" not in repr(http)
    sse = parse_server({"type": "sse", "name": "old", "url": "http://x/sse", "headers": []})
    assert sse == HttpServer("old", "http://x/sse", "sse")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("fs", "not an object"),
        ({"command": "fs"}, "no name"),
        ({"name": "fs"}, "needs a command"),
        ({"name": "fs", "command": "fs", "args": "-v"}, "args must be"),
        ({"name": "fs", "command": "fs", "env": [{"name": "A"}]}, "string value"),
        ({"name": "fs", "command": "fs", "env": [{"name": "A=B", "value": "1"}]}, "not valid"),
        ({"type": "http", "name": "gh", "url": "ftp://x", "headers": []}, "http:// or https://"),
        ({"type": "acp", "name": "x", "serverId": "1"}, "'acp' is not supported"),
    ],
)
def test_unusable_entries_say_why(entry: Any, message: str) -> None:
    with pytest.raises(ServerConfigError, match=message):
        parse_server(entry)


def test_hub_keeps_broken_entries_for_reporting_and_names_duplicates_apart() -> None:
    hub = McpHub([{"name": "fs", "command": "a"}, {"name": "fs", "command": "b"}, {"name": "bad"}, 42], "/tmp", env={})
    assert [(s.name, s.state) for s in hub.status()] == [
        ("bad", "invalid"),
        ("server 4", "invalid"),
        ("fs", "connecting"),
        ("fs (2)", "connecting"),
    ]
    assert hub.tools() == []


def test_importing_refagent_mcp_does_not_import_the_sdk() -> None:
    code = "import sys, refagent.mcp, refagent.mcp.tools, refagent.mcp.results; print('mcp' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "False"


# -- names and kinds ---------------------------------------------------------------------------


def test_names_are_namespaced_and_in_the_function_name_charset() -> None:
    assert model_name("github", "create_issue") == "mcp__github__create_issue"
    assert model_name("my server.v2", "get/thing:x") == "mcp__my_server_v2__get_thing_x"


def test_long_names_are_cut_to_64_and_stay_distinct() -> None:
    a = model_name("s" * 30, "tool_" + "x" * 60 + "a")
    b = model_name("s" * 30, "tool_" + "x" * 60 + "b")
    assert len(a) == len(b) == MAX_NAME_LENGTH
    assert a != b
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", a)


def test_colliding_names_get_suffixes_and_stay_stable() -> None:
    names = ToolNames(reserved=[t.name for t in default_tools()])
    first = names.name("fs", "a.b")
    second = names.name("fs", "a_b")
    other_server = names.name("fs (2)", "a.b")
    assert (first, second, other_server) == ("mcp__fs__a_b", "mcp__fs__a_b_2", "mcp__fs__2___a_b")
    assert names.name("fs", "a.b") == first  # the same tool keeps its name
    long = "t" * 80
    cut = [names.name("srv", long + suffix) for suffix in ("", "?", "!")]
    assert len(set(cut)) == 3
    assert all(len(n) <= MAX_NAME_LENGTH for n in cut)


def test_reserved_names_are_never_given() -> None:
    names = ToolNames(reserved=["mcp__a__b"])
    assert names.name("a", "b") == "mcp__a__b_2"


@pytest.mark.parametrize(
    ("name", "annotations", "kind"),
    [
        ("create_issue", {}, "other"),
        ("create_issue", {"readOnlyHint": False}, "other"),
        ("get_page", {"openWorldHint": True}, "other"),
        ("read_thing", {"readOnlyHint": True}, "read"),
        ("search_issues", {"readOnlyHint": True}, "search"),
        ("web_search", {"readOnlyHint": True, "openWorldHint": True}, "search"),
        ("get_page", {"readOnlyHint": True, "openWorldHint": True}, "fetch"),
        ("fetch", {"readOnlyHint": True}, "fetch"),
    ],
)
def test_kinds_follow_the_annotations(name: str, annotations: dict[str, Any], kind: str) -> None:
    assert tool_kind(name, annotations) == kind


def test_input_schema_is_an_object_schema_with_properties() -> None:
    assert input_schema(None) == {"type": "object", "properties": {}}
    assert input_schema({"type": "object"}) == {"type": "object", "properties": {}}
    rich = {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
    assert input_schema(rich) == rich


class Link:
    name = "gh"

    def check_available(self) -> None:
        pass

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"{tool} {json.dumps(arguments)}"}]}


def test_a_tool_is_a_refagent_tool_with_its_own_class_attributes() -> None:
    spec = {
        "name": "create_issue",
        "title": "Create an issue",
        "description": "Opens an issue.",
        "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
    }
    one = make_tool(Link(), spec, "mcp__gh__create_issue")
    two = make_tool(Link(), {"name": "list", "inputSchema": {"type": "object"}}, "mcp__gh__list")
    assert (one.name, one.description, one.kind) == ("mcp__gh__create_issue", "Opens an issue.", "other")
    assert one.parameters["required"] == ["title"]
    assert (two.name, two.kind) == ("mcp__gh__list", "other")
    assert "MCP server gh" in two.description  # a tool without a description still says what it is
    assert one.title({"title": "Bug"}) == 'gh: Create an issue {"title": "Bug"}'


# -- results -----------------------------------------------------------------------------------


def check_content(content: list[Any]) -> None:
    check_update(updates.tool_call_update("call_1", status="completed", content=content))


def test_text_result() -> None:
    result = convert_result({"content": [{"type": "text", "text": "hello"}], "isError": False})
    assert (result.output, result.failed) == ("hello", False)
    assert result.content == [{"type": "content", "content": {"type": "text", "text": "hello"}}]
    check_content(result.content)


def test_every_block_kind_for_the_model_and_the_editor() -> None:
    blocks = [
        {"type": "text", "text": "plain", "annotations": {"audience": ["user", "assistant"], "priority": 0.5}},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "audio", "data": PNG, "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///n.md", "text": "# N", "mimeType": "text/markdown"}},
        {"type": "resource", "resource": {"uri": "file:///d.bin", "blob": PNG}},
        {"type": "resource_link", "uri": "https://x/doc", "name": "doc", "description": "The doc", "size": 12},
        {"type": "text", "text": "user only", "annotations": {"audience": ["user"]}},
        {"type": "text", "text": "model only", "annotations": {"audience": ["assistant"]}},
    ]
    result = convert_result({"content": blocks})
    assert result.output.split("\n\n") == [
        "plain",
        "[image (image/png, 24 bytes): shown to the user, not to you]",
        "[audio (audio/wav, 24 bytes): shown to the user, not to you]",
        "[resource file:///n.md (text/markdown)]\n# N",
        "[binary resource file:///d.bin, 24 bytes: not shown to you]",
        "[resource link: doc <https://x/doc>] The doc",
        "model only",
    ]
    shown = [c["content"] for c in result.content]
    assert [b["type"] for b in shown] == ["text", "image", "audio", "resource", "resource", "resource_link", "text"]
    assert shown[0]["annotations"] == {"audience": ["user", "assistant"], "priority": 0.5}
    assert shown[1] == {"type": "image", "data": PNG, "mimeType": "image/png"}
    assert shown[3]["resource"] == {"uri": "file:///n.md", "text": "# N", "mimeType": "text/markdown"}
    assert shown[4]["resource"] == {"uri": "file:///d.bin", "blob": PNG}
    assert shown[-1]["text"] == "user only"
    check_content(result.content)
    assert PNG not in json.dumps(result.raw_output)  # payloads are in the blocks, not repeated


def test_structured_content_is_given_as_json_unless_a_text_block_carries_it() -> None:
    alone = convert_result({"content": [], "structuredContent": {"city": "Oslo", "celsius": 21.5}})
    assert json.loads(alone.output) == {"city": "Oslo", "celsius": 21.5}
    assert alone.content[0]["content"]["text"].startswith("```json\n")
    check_content(alone.content)
    text = json.dumps({"city": "Oslo"})
    carried = convert_result({"content": [{"type": "text", "text": text}], "structuredContent": {"city": "Oslo"}})
    assert carried.output == text
    wrapped = convert_result({"content": [{"type": "text", "text": "42"}], "structuredContent": {"result": 42}})
    assert wrapped.output == "42"
    other = convert_result({"content": [{"type": "text", "text": "done"}], "structuredContent": {"id": 7}})
    assert other.output == 'done\n\n{\n  "id": 7\n}'


def test_is_error_fails_the_call_and_the_model_reads_why() -> None:
    result = convert_result({"content": [{"type": "text", "text": "no such repo"}], "isError": True})
    assert result.failed
    assert result.output == "Error: no such repo"
    assert convert_result({"content": [], "isError": True}).output == "Error: the tool failed without saying why."


def test_empty_and_unknown_content() -> None:
    assert convert_result({"content": []}).output == "(the tool returned no output)"
    odd = convert_result({"content": [{"type": "hologram", "data": "x"}]})
    assert odd.output == "[hologram content, which refagent cannot show]"
    assert odd.content == []


def test_long_output_is_cut_for_the_model_but_shown_whole() -> None:
    text = "a" * MAX_MODEL_CHARS + "b" * 100
    result = convert_result({"content": [{"type": "text", "text": text}]})
    assert len(result.output) < MAX_MODEL_CHARS + 100
    assert "characters omitted" in result.output
    assert result.output.endswith("b" * 100)
    assert result.content[0]["content"]["text"] == text
