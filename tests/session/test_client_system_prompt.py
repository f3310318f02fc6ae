"""A client's system prompt (unstable ``sessionCapabilities.systemPrompt``): appended to the agent's, or in
place of its built-in instructions with the tool contract kept; saved with the session and used again on
load, resume and fork; refused whole (no session) when the agent cannot apply it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.acp.errors import InvalidParams, RequestError
from refagent.acp.requests import MAX_SYSTEM_PROMPT_CHARS, ClientSystemPrompt, NewSessionParams
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.session.system_prompt import CLIENT_HEADING, make_system_prompt, template
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import env_for, prompt, said

pytestmark = pytest.mark.anyio

BUILT_IN = "You are refagent, a coding agent"
CONTRACT = "# Tools, permissions and the sandbox"
ENVIRONMENT = "# Environment"


def system(mode: str, *texts: str) -> dict[str, Any]:
    return {"mode": mode, "content": [{"type": "text", "text": t} for t in texts]}


# -- the params ----------------------------------------------------------------------------------------


def test_a_system_prompt_is_read_from_the_session_requests() -> None:
    assert ClientSystemPrompt.parse({}) is None
    assert ClientSystemPrompt.parse({"systemPrompt": None}) is None
    assert ClientSystemPrompt.parse({"systemPrompt": system("append", "One.", "Two.")}) == ClientSystemPrompt(
        "append", "One.\n\nTwo."
    )
    parsed = NewSessionParams.parse({"cwd": "/w", "mcpServers": [], "systemPrompt": system("override", "Be brief.")})
    assert parsed.system_prompt == ClientSystemPrompt("override", "Be brief.")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("be brief", "must be an object"),
        ({"content": [{"type": "text", "text": "x"}]}, "missing required field 'mode'"),
        (system("replace", "x"), "mode 'replace' is not supported; the modes are append and override"),
        (system("_custom", "x"), "mode '_custom' is not supported"),
        ({"mode": "append"}, "missing required field 'content'"),
        ({"mode": "append", "content": []}, "must not be empty"),
        ({"mode": "append", "content": [{"type": "image", "data": "", "mimeType": "image/png"}]}, "must be a text"),
        ({"mode": "append", "content": ["just a string"]}, r"content\[0\] must be a text block"),
        (system("append", "x" * (MAX_SYSTEM_PROMPT_CHARS + 1)), "at most 100,000 are taken"),
        (system("append", "a\0b"), "NUL"),
    ],
)
def test_a_system_prompt_the_agent_cannot_apply_is_refused(value: Any, message: str) -> None:
    with pytest.raises(InvalidParams, match=message):
        ClientSystemPrompt.parse({"systemPrompt": value})


# -- the prompt the model gets -------------------------------------------------------------------------


async def built(tmp_path: Path, client: ClientSystemPrompt | None) -> str:
    cwd = str(tmp_path)
    return await make_system_prompt(cwd, [cwd], policy=RootPolicy(cwd), disk=LocalFileSystem(), client=client)


async def test_append_comes_after_the_agents_own_instructions(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    prompt_text = await built(tmp_path, ClientSystemPrompt("append", "Answer in French. {not a field}"))
    for part in (BUILT_IN, CONTRACT, ENVIRONMENT, "Use tabs.", CLIENT_HEADING):
        assert part in prompt_text
    assert prompt_text.index(ENVIRONMENT) < prompt_text.index(CLIENT_HEADING)
    assert prompt_text.endswith(f"{CLIENT_HEADING}\nAnswer in French. {{not a field}}\n")


async def test_override_replaces_the_built_in_instructions_and_keeps_the_tool_contract(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    prompt_text = await built(tmp_path, ClientSystemPrompt("override", "You are Pirate, a terse assistant."))
    assert prompt_text.startswith("You are Pirate, a terse assistant.\n\n")
    assert BUILT_IN not in prompt_text
    assert "# How you work" not in prompt_text
    # what the tools, the permissions and the sandbox need the model to know stays, and so does the workspace
    assert template("tools.md").strip() in prompt_text
    for part in (ENVIRONMENT, f"Working directory: {tmp_path}", "Use tabs."):
        assert part in prompt_text
    assert CLIENT_HEADING not in prompt_text


async def test_without_one_the_prompt_is_the_agents_three_parts(tmp_path: Path) -> None:
    prompt_text = await built(tmp_path, None)
    assert prompt_text.index(BUILT_IN) < prompt_text.index(CONTRACT) < prompt_text.index(ENVIRONMENT)
    assert CLIENT_HEADING not in prompt_text


# -- through sessions: new, load, resume, fork -------------------------------------------------------------


def system_message(model: ScriptedModel, index: int = -1) -> str:
    message = model.requests[index].messages[0]
    assert message["role"] == "system"
    content: str = message["content"]
    return content


def store_settings(tmp_path: Path, model: ScriptedModel) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(tmp_path / "sessions"))


async def open_session(editor: Editor, method: str, sid: str, cwd: Path, **extra: Any) -> dict[str, Any]:
    params = {"sessionId": sid, "cwd": str(cwd), "mcpServers": [], **extra}
    result: dict[str, Any] = await editor.request(method, params)
    await editor.settled(result.get("sessionId", sid))
    return result


async def test_a_system_prompt_is_saved_and_used_again_on_load_resume_and_fork(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([text(f"answer {n}") for n in range(6)])
    async with connect(store_settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project), systemPrompt=system("append", "Always answer in French."))
        await editor.prompt(sid, "hello")
    assert "Always answer in French." in system_message(model)

    # a later agent: a load that sends none keeps the saved one
    async with connect(store_settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        await open_session(editor, "session/load", sid, project)
        await editor.prompt(sid, "again")
        assert "Always answer in French." in system_message(model)
        assert BUILT_IN in system_message(model)

        # a resume that sends one replaces it, and the new one is saved
        await open_session(editor, "session/resume", sid, project, systemPrompt=system("override", "You are Terse."))
        await editor.prompt(sid, "once more")
        assert system_message(model).startswith("You are Terse.")
        assert "Always answer in French." not in system_message(model)

        # a fork starts with the session's; the source keeps its own
        forked = (await open_session(editor, "session/fork", sid, project))["sessionId"]
        await editor.prompt(forked, "in the fork")
        assert system_message(model).startswith("You are Terse.")
        forked_2 = (await open_session(editor, "session/fork", sid, project, systemPrompt=system("append", "Fork.")))[
            "sessionId"
        ]
        await editor.prompt(forked_2, "in the second fork")
        assert system_message(model).endswith(f"{CLIENT_HEADING}\nFork.\n")
        await editor.prompt(sid, "in the source")
        assert system_message(model).startswith("You are Terse.")


async def test_a_system_prompt_that_cannot_be_applied_opens_no_session(tmp_path: Path, check: Any) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([text("hi")])
    async with connect(store_settings(tmp_path, model), check=check) as editor:
        await editor.initialize()
        with pytest.raises(RequestError, match="mode 'replace' is not supported") as refused:
            await editor.new_session(str(project), systemPrompt=system("replace", "x"))
        assert refused.value.code == -32602
        assert editor.agent.sessions == {}
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "hello")
        with pytest.raises(RequestError, match="must not be empty"):
            await open_session(editor, "session/resume", sid, project, systemPrompt={"mode": "append", "content": []})
        assert (await editor.request("session/list", {}))["sessions"][0]["sessionId"] == sid
    assert CLIENT_HEADING not in system_message(model)


# -- a real agent process, with and without a client system prompt -------------------------------------


@pytest.mark.slow
async def test_an_agent_process_applies_the_clients_system_prompt(tmp_path: Path, check: Any) -> None:
    with ScriptedOpenAIServer(fallback=Turn(text="ok")) as server:
        async with AgentProcess.start(tmp_path, check=check, env=env_for(tmp_path, server)) as agent:
            capabilities = (await agent.initialize())["agentCapabilities"]["sessionCapabilities"]
            assert capabilities["systemPrompt"] == {"mode": {"override": {}}}
            plain = await agent.new_session(tmp_path)
            _, shown = await prompt(agent, plain, "hi")
            assert said(shown) == "ok"
            plain_system = server.chat_requests[-1].body["messages"][0]["content"]
            params = {"cwd": str(tmp_path), "mcpServers": [], "systemPrompt": system("override", "You are Brief.")}
            sid = (await agent.result("session/new", params))["sessionId"]
            await prompt(agent, sid, "hi")
            overridden = server.chat_requests[-1].body["messages"][0]["content"]
    assert plain_system.startswith(BUILT_IN)
    assert CONTRACT in plain_system
    assert overridden.startswith("You are Brief.")
    assert BUILT_IN not in overridden
    assert CONTRACT in overridden
