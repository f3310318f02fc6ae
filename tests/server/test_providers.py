"""ACP's unstable ``providers/*``: the editor lists, routes (base URL, protocol, headers) and disables the
agent's model endpoints, through the in-memory editor, prompts going to the scripted server on 127.0.0.1.
Every message is checked against the schema (the unstable one for these methods)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from refagent import cli
from refagent.acp.errors import RequestError
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, Turn

pytestmark = pytest.mark.anyio

GATEWAY_TOKEN = "gateway-token-0123456789"


def settings_for(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    settings = cli.load_settings(cli.build_parser().parse_args(["--config", str(path)]))
    return dataclasses.replace(settings, store=None)


async def model_choices(editor: Editor, cwd: Path) -> list[str]:
    result = await editor.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    [model] = [o for o in result["configOptions"] if o["id"] == "model"]
    return [choice["value"] for choice in model["options"]]


async def error_of(editor: Editor, method: str, params: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await editor.request(method, params)
    return caught.value


async def test_an_editor_routes_a_provider_through_its_gateway_with_its_headers(tmp_path: Path, check: Any) -> None:
    text = '[profiles.work]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "file-key"\nmodel = "m"\n'
    with ScriptedOpenAIServer(fallback=Turn(text="routed"), api_key=GATEWAY_TOKEN) as gateway:
        async with connect(settings_for(tmp_path, text), check=check) as editor:
            init = await editor.initialize()
            assert init["agentCapabilities"]["providers"] == {}
            listed = await editor.request("providers/list", {})
            assert listed == {
                "providers": [
                    {
                        "providerId": "work",
                        "supported": ["openai", "anthropic"],
                        "required": False,
                        "current": {"apiType": "openai", "baseUrl": "http://127.0.0.1:9/v1"},
                    }
                ]
            }
            headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Route": "team-a"}
            route = {"providerId": "work", "apiType": "openai", "baseUrl": gateway.base_url, "headers": headers}
            assert await editor.request("providers/set", route) == {}
            sid = await editor.new_session(str(tmp_path))
            assert (await editor.prompt(sid, "hi"))["stopReason"] == "end_turn"
            assert editor.text(sid) == "routed"
            sent = gateway.chat_requests[-1].headers
            assert (sent["authorization"], sent["x-route"]) == (f"Bearer {GATEWAY_TOKEN}", "team-a")
            [work] = (await editor.request("providers/list", {}))["providers"]
            assert work["current"] == {"apiType": "openai", "baseUrl": gateway.base_url}


async def test_a_disabled_provider_leaves_the_picker_and_lists_without_routing(tmp_path: Path, check: Any) -> None:
    text = (
        '[profiles.one]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = ""\nmodel = "a"\n'
        '[profiles.two]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = ""\nmodel = "b"\n'
    )
    async with connect(settings_for(tmp_path, text), check=check) as editor:
        await editor.initialize()
        assert await model_choices(editor, tmp_path) == ["one", "two"]
        assert await editor.request("providers/disable", {"providerId": "one"}) == {}
        assert await model_choices(editor, tmp_path) == ["two"]
        listed = {p["providerId"]: p["current"] for p in (await editor.request("providers/list", {}))["providers"]}
        assert listed == {"two": {"apiType": "openai", "baseUrl": "http://127.0.0.1:9/v1"}, "one": None}
        await editor.request("providers/disable", {"providerId": "two"})
        assert await model_choices(editor, tmp_path) == ["scripted"]  # the built-in model, not nothing


async def test_a_known_provider_the_configuration_lacks_is_added_when_routed(tmp_path: Path, check: Any) -> None:
    async with connect(settings_for(tmp_path, "max_requests = 5\n"), check=check) as editor:
        await editor.initialize()
        route = {"providerId": "openrouter", "apiType": "openai", "baseUrl": "https://gw.example.com/v1"}
        await editor.request("providers/set", {**route, "headers": {"Authorization": "Bearer t"}})
        assert "openrouter" in await model_choices(editor, tmp_path)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"providerId": "work", "apiType": "bedrock", "baseUrl": "https://x"}, "apiType 'bedrock'"),
        ({"providerId": "work", "apiType": "openai", "baseUrl": "file:///etc"}, "baseUrl must be"),
        ({"providerId": "nobody", "apiType": "openai", "baseUrl": "https://x"}, "unknown provider 'nobody'"),
        ({"providerId": "work", "apiType": "openai", "baseUrl": "https://x", "headers": {"A": "b\r\nC: d"}}, "line"),
        ({"providerId": "work", "apiType": "openai", "baseUrl": "https://x", "headers": {"A": 1}}, "headers must"),
    ],
)
async def test_a_routing_refagent_cannot_use_is_refused(
    tmp_path: Path, check: Any, params: dict[str, Any], message: str
) -> None:
    text = '[profiles.work]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "k"\nmodel = "m"\n'
    async with connect(settings_for(tmp_path, text), check=check) as editor:
        await editor.initialize()
        error = await error_of(editor, "providers/set", params)
        assert error.code == -32602
        assert message in error.message
        assert (await error_of(editor, "providers/disable", {"providerId": "nobody"})).code == -32602
