"""The hub against a real MCP server (the ``mcp`` SDK's) over streamable HTTP and HTTP+SSE on 127.0.0.1:
tools listed with their schemas, called, permission-gated through the real tool runner, results
converted, tool-list changes, headers, timeouts, a server that goes away, and closing."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.errors import ToolError
from refagent.llm.protocol import ToolCallRequest
from refagent.testing.memory import allow_once, select
from refagent.tools.permissions import Permissions
from refagent.tools.runner import ToolRunner
from tests.support.clients import session_client
from tests.support.mcp_servers.harness import http_entry, run, running_hub, tool
from tests.support.mcp_servers.http_server import Urls, running
from tests.support.tool_fakes import DirectPeer, make_ctx, sent

pytestmark = pytest.mark.anyio


@pytest.fixture
def urls() -> Iterator[Urls]:
    with running() as urls:
        yield urls


async def test_tools_are_listed_with_namespaced_names_schemas_and_kinds(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, problems):
        assert problems == []
        [status] = hub.status()
        assert (status.state, status.tools) == ("connected", 13)
        tools = {t.name: t for t in hub.tools()}
        assert all(name.startswith("mcp__web__") for name in tools)
        echo = tools["mcp__web__echo"]
        assert echo.description == "Return the text."
        assert echo.parameters["properties"]["text"]["type"] == "string"
        assert echo.parameters["required"] == ["text"]
        kinds = {name.removeprefix("mcp__web__"): t.kind for name, t in tools.items()}
        assert kinds["echo"] == "read"
        assert kinds["search_docs"] == "search"
        assert kinds["get_page"] == "fetch"
        assert kinds["write_note"] == "other"
        assert tools["mcp__web__search_docs"].title({"query": "x"}) == 'web: Search the docs {"query": "x"}'


async def test_results_of_every_kind(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, _):
        echo = await run(hub, "mcp__web__echo", text="hi")
        assert (echo.output, echo.failed) == ("hi", False)

        mixed = await run(hub, "mcp__web__mixed")
        assert mixed.output.split("\n\n") == [
            "plain text",
            "[image (image/png, 24 bytes): shown to the user, not to you]",
            "[resource file:///notes.md (text/markdown)]\n# Notes\nin",
            "[binary resource file:///data.bin (application/octet-stream), 24 bytes: not shown to you]",
            "[resource link: doc <https://example.com/doc>] The doc",
        ]
        kinds = [c["content"]["type"] for c in mixed.content]
        assert kinds == ["text", "image", "resource", "resource", "resource_link", "text"]

        weather = await run(hub, "mcp__web__weather", city="Oslo")
        assert json.loads(weather.output) == {"city": "Oslo", "celsius": 21.5}

        failed = await run(hub, "mcp__web__fail", reason="the repo is archived")
        assert failed.failed
        assert failed.output.startswith("Error: ")
        assert "the repo is archived" in failed.output


async def test_arguments_the_server_rejects_come_back_to_the_model(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, _):
        result = await run(hub, "mcp__web__echo", text=["not", "a", "string"])
        assert result.failed
        assert "text" in result.output


async def test_headers_are_sent_on_both_transports(urls: Urls) -> None:
    servers = [
        http_entry("web", urls.http, headers={"Authorization": "Bearer t1"}),
        http_entry("old", urls.sse, "sse", headers={"X-Api-Key": "k2"}),
    ]
    async with running_hub(servers, "/tmp") as (hub, problems):
        assert problems == []
        web = json.loads((await run(hub, "mcp__web__headers")).output)
        old = json.loads((await run(hub, "mcp__old__headers")).output)
    assert web["authorization"] == "Bearer t1"
    assert old["x-api-key"] == "k2"


@pytest.mark.parametrize("kind", ["http", "sse"])
async def test_a_tool_list_change_is_picked_up(urls: Urls, kind: str) -> None:
    url = urls.http if kind == "http" else urls.sse
    async with running_hub([http_entry("web", url, kind)], "/tmp") as (hub, _):
        assert "mcp__web__extra" not in {t.name for t in hub.tools()}
        before = hub.version
        assert (await run(hub, "mcp__web__grow")).output == "grown"
        with anyio.fail_after(5):
            while "mcp__web__extra" not in {t.name for t in hub.tools()}:
                before = await hub.wait_changed(before)
        assert (await run(hub, "mcp__web__extra", x=1)).output == "2"


async def test_permission_through_the_runner(urls: Urls, tmp_path: Path) -> None:
    """Read-only tools run without asking; the others ask, with an "always" scope per tool, and follow
    the session's mode."""
    asked: list[dict[str, Any]] = []
    answer = {"policy": allow_once}
    mode = {"id": "ask"}

    async def editor(method: str, params: dict[str, Any]) -> Any:
        assert method == "session/request_permission"
        asked.append(params)
        return await answer["policy"](params)

    request_permission = session_client(DirectPeer(editor)).request_permission

    async with running_hub([http_entry("web", urls.http)], str(tmp_path)) as (hub, _):
        ctx = make_ctx(str(tmp_path))
        runner = ToolRunner(hub.tools(), ctx, Permissions(), lambda: mode["id"], request_permission, lambda: None)

        async def call(name: str, **args: Any) -> str:
            return await runner.run(ToolCallRequest("c", f"mcp__web__{name}", json.dumps(args)))

        assert await call("echo", text="free") == "free"
        assert await call("search_docs", query="q") == "3 results for q"
        assert asked == []

        note = str(tmp_path / "note.txt")
        assert await call("write_note", path=note, text="one") == f"wrote 3 characters to {note}"
        [request] = asked
        assert request["toolCall"]["kind"] == "other"
        assert request["toolCall"]["title"].startswith("web: write_note")
        assert "```json" in request["toolCall"]["content"][0]["content"]["text"]
        names = [o["name"] for o in request["options"]]
        assert "Always allow calls to write_note on web" in names

        mode["id"] = "read-only"
        refused = await call("write_note", path=note, text="two")
        assert "read-only mode" in refused
        assert (tmp_path / "note.txt").read_text() == "one"

        mode["id"] = "ask"
        answer["policy"] = select("allow_always")
        await call("write_note", path=note, text="three")
        await call("write_note", path=note, text="four")
        assert len(asked) == 2  # remembered: mcp:web:write_note
        assert (tmp_path / "note.txt").read_text() == "four"

        mode["id"] = "full-access"
        await call("fail", reason="x")
        assert len(asked) == 2
        statuses = [u.get("status") for u in sent(ctx) if u["sessionUpdate"] == "tool_call_update" and "status" in u]
        assert statuses.count("failed") == 2  # refused in read-only mode, and fail's isError


async def test_a_call_that_takes_too_long_is_cancelled_and_the_server_stays(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp", call_timeout=0.3) as (hub, _):
        with pytest.raises(ToolError, match=r"did not answer within 0.3 s"):
            await run(hub, "mcp__web__slow", seconds=10)
        assert (await run(hub, "mcp__web__echo", text="still here")).output == "still here"


async def test_a_cancelled_call_is_cancelled_on_the_server_too(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, _):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(functools.partial(run, hub, "mcp__web__slow", seconds=10))
            await anyio.wait_all_tasks_blocked()  # the call is waiting for its answer
            tasks.cancel_scope.cancel()  # as session/cancel does to a turn
        assert (await run(hub, "mcp__web__echo", text="next")).output == "next"
        assert [s.state for s in hub.status()] == ["connected"]


async def test_a_server_that_goes_away(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, problems):
        echo = tool(hub, "mcp__web__echo")
        await anyio.to_thread.run_sync(urls.stop)
        with pytest.raises(ToolError, match="stopped while running echo") as first:
            await run(hub, "mcp__web__echo", text="x")
        assert "unavailable for the rest of this session" in str(first.value)
        with pytest.raises(ToolError, match="is disconnected"):
            await echo.prepare({"text": "x"}, make_ctx("/tmp"))
        assert hub.tools() == []
        assert [s.state for s in hub.status()] == ["lost"]
        [(server, message)] = problems
        assert server == "web"
        assert message.startswith("disconnected")


async def test_a_server_that_cannot_be_reached_is_reported_and_the_rest_work(urls: Urls) -> None:
    servers = [http_entry("nowhere", "http://127.0.0.1:1/mcp"), http_entry("web", urls.http)]
    async with running_hub(servers, "/tmp") as (hub, problems):
        assert [s.state for s in hub.status()] == ["failed", "connected"]
        assert problems == [("nowhere", "cannot connect: All connection attempts failed")]
        assert {t.name for t in hub.tools()} >= {"mcp__web__echo"}


async def test_close_ends_the_connections_and_the_tools(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp") as (hub, problems):
        echo = tool(hub, "mcp__web__echo")
        version = hub.version
        await hub.aclose()
        assert hub.version != version
        assert hub.tools() == []
        assert [s.state for s in hub.status()] == ["closed"]
        with pytest.raises(ToolError, match="closed"):
            await echo.prepare({"text": "x"}, make_ctx("/tmp"))
        await hub.aclose()  # twice is fine
    assert problems == []


async def test_the_tool_cap_leaves_tools_out_and_says_so(urls: Urls) -> None:
    async with running_hub([http_entry("web", urls.http)], "/tmp", max_tools=5) as (hub, problems):
        assert len(hub.tools()) == 5
        assert problems == [("web", problems[0][1])]
        assert "at most 5 MCP tools" in problems[0][1]
