"""Plans by id over real pipes: a real ``refagent`` process, against the scripted OpenAI-compatible server, sends
a client that advertises ``clientCapabilities.plan`` each plan by its id and says when one is removed, and
replays them so to such a client after a restart; one that advertises nothing gets the whole v1 ``plan``.
Every message is validated against the unstable schema as well as the stable one."""

from __future__ import annotations

from pathlib import Path

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.acp_schema import validate_agent_message_unstable
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import env_for, load, prompt

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CODE = [{"content": "Write the parser", "status": "in_progress", "priority": "high"}]
DOCS = [{"content": "Document it", "status": "pending", "priority": "low"}]
KINDS = ("plan", "plan_update", "plan_removed")


async def test_plans_by_id_live_and_replayed_and_whole_for_a_client_without_the_capability(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [
        Turn(
            tool_calls=[
                ToolCall("update_plan", {"entries": CODE}),
                ToolCall("update_plan", {"entries": DOCS, "plan_id": "docs"}),
            ]
        ),
        Turn(tool_calls=[ToolCall("update_plan", {"entries": [], "plan_id": "docs"})]),
        Turn(text="Started."),
    ]
    check = validate_agent_message_unstable
    with ScriptedOpenAIServer(script, api_key="sk-test-key") as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize({"plan": {}})
            sid = await agent.new_session(project)
            _, shown = await prompt(agent, sid, "Write a parser")
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize({"plan": {}})
            _, by_id = await load(agent, sid, project)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize()
            _, whole = await load(agent, sid, project)
    live = [u for u in shown if u["sessionUpdate"] in KINDS]
    assert live == [
        {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "main", "entries": CODE}},
        {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "docs", "entries": DOCS}},
        {"sessionUpdate": "plan_removed", "planId": "docs"},
    ]
    assert [u for u in by_id if u["sessionUpdate"] in KINDS] == live
    assert [u for u in whole if u["sessionUpdate"] in KINDS] == [
        {"sessionUpdate": "plan", "entries": CODE},
        {"sessionUpdate": "plan", "entries": [*CODE, *DOCS]},
        {"sessionUpdate": "plan", "entries": CODE},
    ]
