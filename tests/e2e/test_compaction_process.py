"""``/compact`` in a real ``refagent`` process, over real pipes, with the real OpenAI adapter against the scripted
server, for a client with ``session.compaction`` (``compaction_update`` ``in_progress``, the summary's chunks,
``completed`` with the summary) and one without (the old messages); then, after a restart, ``session/load``
of each session by a client with the capability and by one without: a recorded compaction is replayed once,
in its final state, at its place, or as an agent message to a client that does not show compactions; the
conversation goes on from the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from refagent.session.compaction import SUMMARY_PREFIX
from refagent.testing.openai_server import ScriptedOpenAIServer, Turn
from tests.support.helpers_process import AgentProcess
from tests.support.process_sessions import KEY, env_for, load, prompt, said, sessions_dir, thread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COMPACTION: dict[str, Any] = {"session": {"compaction": {}}}
SUMMARY = "The user asked three questions and each was answered."
QUESTIONS = ("question one", "question two", "question three")
EARLIER = [
    ("user_message_chunk", "question one"),
    ("agent_message_chunk", "answer one"),
    ("user_message_chunk", "question two"),
    ("agent_message_chunk", "answer two"),
    ("user_message_chunk", "question three"),
    ("agent_message_chunk", "answer three"),
    ("user_message_chunk", "/compact"),
]


def capabilities(capable: bool) -> dict[str, Any]:
    return COMPACTION if capable else {}


@pytest.mark.parametrize("capable", [True, False], ids=["compaction", "no-compaction"])
async def test_compact_then_load_by_either_client(tmp_path: Path, check: Any, capable: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [
        Turn(text="answer one"),
        Turn(text="answer two"),
        Turn(text="answer three"),
        Turn(text=SUMMARY),  # the summariser, word by word
        Turn(text="answer four"),
        Turn(text="answer five"),
    ]
    with ScriptedOpenAIServer(script, api_key=KEY) as server:
        env = env_for(tmp_path, server)
        async with AgentProcess.start(tmp_path, check=check, env=env) as agent:
            await agent.initialize(capabilities(capable))
            sid = await agent.new_session(project)
            for question in QUESTIONS:
                assert (await prompt(agent, sid, question))[0]["stopReason"] == "end_turn"
            result, shown = await prompt(agent, sid, "/compact")
            assert result["stopReason"] == "end_turn"
            await agent.close_stdin()
            assert await agent.wait_exit(10) == 0
        summariser = server.chat_requests[-1].body

        if capable:
            kinds = [(u["sessionUpdate"], u.get("status")) for u in shown]
            assert kinds[0] == ("compaction_update", "in_progress")
            assert {k for k, _ in kinds[1:-2]} == {"compaction_summary_chunk"}
            assert len(kinds) > 4  # streamed in pieces
            assert kinds[-2:] == [("compaction_update", "completed"), ("usage_update", None)]
            assert said(shown) == ""  # no message besides
            done = shown[-2]
            assert done["summary"] == [{"type": "text", "text": SUMMARY}]
            assert {u["compactionId"] for u in shown[:-1]} == {done["compactionId"]}
            replay_file = (sessions_dir(tmp_path) / f"{sid}.replay").read_bytes()
            assert replay_file.count(b'"sessionUpdate":"compaction_update"') == 1  # once, in its final state
            assert b"compaction_summary_chunk" not in replay_file
            shown_then = [*EARLIER, ("compaction_update", "completed")]
        else:
            assert not any(u["sessionUpdate"].startswith("compaction") for u in shown)
            message = said(shown)
            assert message.startswith("compacting 2 older messages into a summary:\n\n")
            assert SUMMARY in message
            assert "Compacted: about" in message
            shown_then = [*EARLIER, ("agent_message_chunk", message)]
        assert "question one" in summariser["messages"][-1]["content"]
        assert "tools" not in summariser  # a summary, not a turn

        as_message = ("agent_message_chunk", f"Compacted the older conversation into a summary:\n\n{SUMMARY}\n")
        for loader, answer in ((True, "answer four"), (False, "answer five")):
            async with AgentProcess.start(tmp_path, check=check, env=env) as agent:  # a restart
                await agent.initialize(capabilities(loader))
                _, replayed = await load(agent, sid, project)
                result, later = await prompt(agent, sid, f"after, for {loader}")
                assert result["stopReason"] == "end_turn"
                sent = agent.transcript.updates(sid)
            expected = shown_then[: len(EARLIER) + 1]
            if capable and not loader:
                expected = [*EARLIER, as_message]
            assert thread(replayed)[: len(EARLIER) + 1] == expected
            if capable and loader:
                assert replayed[len(EARLIER)] == done
            if not loader:
                assert not any(u["sessionUpdate"].startswith("compaction") for u in sent)
            assert said(later) == answer
            body = server.chat_requests[-1].body
            assert body["messages"][1] == {"role": "user", "content": SUMMARY_PREFIX + SUMMARY}
            users = [m["content"] for m in body["messages"] if m["role"] == "user"][1:]
            assert users[:2] == ["question two", "question three"]
            assert users[-1] == f"after, for {loader}"
