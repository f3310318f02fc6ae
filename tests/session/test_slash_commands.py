"""Slash commands through the in-memory editor, with the real tools in a ``tmp_path`` project and a store:
``/undo`` (and its refusals), ``/compact`` and automatic compaction, ``/mode``, ``/model``, ``/init``, and
words that only look like commands."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from refagent.errors import ModelError
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import Fail, Response, ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.session.compaction import SUMMARY_PREFIX, estimate_tokens
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect

pytestmark = pytest.mark.anyio

ORIGINAL = "def add(a, b):\n    return a - b\n"
FIXED = ORIGINAL.replace("a - b", "a + b")


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


def edit_and_create(n: int = 0) -> list[Response]:
    """One turn: fix calc.py (read, edit twice) and create notes.md."""
    return [
        [call(n + 1, "read_file", path="calc.py")],
        [call(n + 2, "edit_file", path="calc.py", old_string="a - b", new_string="a - b + 0")],
        [call(n + 3, "edit_file", path="calc.py", old_string="a - b + 0", new_string="a + b")],
        [call(n + 4, "write_file", path="notes.md", content="# Notes\n")],
        text("Fixed calc.py and wrote notes.md."),
    ]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "calc.py").write_text(ORIGINAL)
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@asynccontextmanager
async def agent(sessions_dir: Path, model: ScriptedModel, check: Any, **extra: Any) -> AsyncIterator[Editor]:
    client = extra.pop("client", None) or FakeClient()
    settings = Settings(make_model=lambda profile: model, store=lambda: SessionStore(sessions_dir), **extra)
    async with connect(settings, client=client, check=check) as editor:
        await editor.initialize()
        yield editor


async def said(editor: Editor, sid: str, prompt: str) -> str:
    """Send ``prompt``; return the agent's messages for it (it must end the turn)."""
    mark = len(editor.updates(sid))
    assert await editor.prompt(sid, prompt) == {"stopReason": "end_turn"}
    return "".join(
        u["content"]["text"] for u in editor.updates(sid)[mark:] if u["sessionUpdate"] == "agent_message_chunk"
    )


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)]


# -- /undo ------------------------------------------------------------------------------------------


async def test_undo_restores_the_files_of_the_last_turn(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([*edit_and_create(), text("What next?")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "fix it and take notes")
        assert (project / "calc.py").read_text() == FIXED
        assert (project / "notes.md").exists()
        requests = len(model.requests)
        answer = await said(editor, sid, "/undo")
        assert len(model.requests) == requests  # a command, not a model turn
        assert (project / "calc.py").read_text() == ORIGINAL  # as before the turn, not after its first edit
        assert not (project / "notes.md").exists()
        assert str(project / "calc.py") in answer
        assert str(project / "notes.md") in answer
        # the model is told, in its next request
        await said(editor, sid, "now what?")
        notes = [t for t in user_texts(model.requests[-1].messages) if "/undo" in t]
        assert len(notes) == 1
        assert str(project / "calc.py") in notes[0]
        assert user_texts(model.requests[-1].messages)[-1] == "now what?"
        # nothing changed in the last turn with changes any more: the undone one is gone, the next is older
        assert "nothing to undo" in (await said(editor, sid, "/undo")).lower()


async def test_undo_goes_back_one_turn_at_a_time(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel(
        [
            [call(1, "read_file", path="calc.py")],
            [call(2, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")],
            text("one"),
            [call(3, "write_file", path="calc.py", content="# rewritten\n")],
            text("two"),
        ]
    )
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "first")
        await said(editor, sid, "second")
        assert (project / "calc.py").read_text() == "# rewritten\n"
        await said(editor, sid, "/undo")
        assert (project / "calc.py").read_text() == FIXED
        await said(editor, sid, "/undo")
        assert (project / "calc.py").read_text() == ORIGINAL


async def test_undo_refuses_when_the_user_changed_a_file_since(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel(edit_and_create())
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "fix it and take notes")
        (project / "notes.md").write_text("# Notes\nmy own line\n")  # the user's edit
        answer = await said(editor, sid, "/undo")
        assert "refused" in answer.lower()
        assert str(project / "notes.md") in answer
        assert str(project / "calc.py") not in answer  # only the conflicting file is listed
        # nothing was restored, not even the file without a conflict
        assert (project / "calc.py").read_text() == FIXED
        assert (project / "notes.md").read_text() == "# Notes\nmy own line\n"
        # once the user's change is gone, undo works
        (project / "notes.md").write_text("# Notes\n")
        await said(editor, sid, "/undo")
        assert (project / "calc.py").read_text() == ORIGINAL


async def test_undo_refuses_when_a_created_file_was_removed_or_replaced(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = ScriptedModel(edit_and_create())
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "fix it and take notes")
        (project / "calc.py").unlink()
        (project / "notes.md").unlink()
        (project / "notes.md").mkdir()  # not a file any more: that is a change too, not a crash
        answer = await said(editor, sid, "/undo")
        assert "refused" in answer.lower()
        assert str(project / "calc.py") in answer
        assert str(project / "notes.md") in answer
        assert not (project / "calc.py").exists()


async def test_undo_after_a_restart(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel(edit_and_create())
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "fix it and take notes")
    later = ScriptedModel([text("ok")])
    async with agent(sessions_dir, later, check) as editor:
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        await said(editor, sid, "/undo")
        assert (project / "calc.py").read_text() == ORIGINAL
        assert not (project / "notes.md").exists()
    async with agent(sessions_dir, later, check) as editor:  # and the undo itself was saved
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        assert "nothing to undo" in (await said(editor, sid, "/undo")).lower()
        await said(editor, sid, "hello")
    assert any("/undo" in t for t in user_texts(later.requests[-1].messages))


async def test_undo_stays_inside_the_roots_in_force(
    tmp_path: Path, project: Path, sessions_dir: Path, check: Any
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "util.py").write_text("VALUE = 1\n")
    model = ScriptedModel(
        [
            [call(1, "read_file", path=str(lib / "util.py"))],
            [call(2, "write_file", path=str(lib / "util.py"), content="VALUE = 2\n")],
            text("ok"),
        ]
    )
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project), additionalDirectories=[str(lib)])
        await said(editor, sid, "change lib")
    assert (lib / "util.py").read_text() == "VALUE = 2\n"
    for directories, expected in (([], "VALUE = 2\n"), ([str(lib)], "VALUE = 1\n")):
        async with agent(sessions_dir, model, check) as editor:
            params = {"sessionId": sid, "cwd": str(project), "additionalDirectories": directories}
            await editor.request("session/resume", params)
            answer = await said(editor, sid, "/undo")
        assert (lib / "util.py").read_text() == expected
        assert str(lib / "util.py") in answer
        assert ("outside" in answer) == (not directories)


async def test_undo_does_not_follow_a_link_put_in_the_way(
    tmp_path: Path, project: Path, sessions_dir: Path, check: Any
) -> None:
    (project / "build").mkdir()
    (project / "build" / "old.txt").write_text("generated\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    model = ScriptedModel([[call(1, "delete_path", path="build/old.txt")], text("deleted")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "clean up")
        assert not (project / "build" / "old.txt").exists()
        (project / "build").rmdir()
        (project / "build").symlink_to(elsewhere)  # e.g. by a command the agent ran
        answer = await said(editor, sid, "/undo")
    assert "refused" in answer.lower()
    assert not (elsewhere / "old.txt").exists()


async def test_undo_restores_a_deleted_file(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([[call(1, "delete_path", path="calc.py")], text("deleted")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "delete calc.py")
        assert not (project / "calc.py").exists()
        await said(editor, sid, "/undo")
        assert (project / "calc.py").read_text() == ORIGINAL


async def test_undo_with_nothing_to_undo(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("hi")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        assert "nothing to undo" in (await said(editor, sid, "/undo")).lower()
        await said(editor, sid, "hello")
        assert "nothing to undo" in (await said(editor, sid, "/undo")).lower()


async def test_a_command_shows_in_the_replayed_history(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "/undo")
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        kinds = [u["sessionUpdate"] for u in editor.updates(sid)]
    assert kinds[:2] == ["user_message_chunk", "agent_message_chunk"]


# -- /compact ---------------------------------------------------------------------------------------


async def test_compact_replaces_older_messages_with_a_summary(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel(
        [
            text("answer one"),
            text("answer two"),
            text("answer three"),
            text("The user asked three questions; all answered.", chunk=7),
            text("answer four"),
        ]
    )
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in ("question one", "question two", "question three"):
            await said(editor, sid, prompt)
        before = [*model.requests[-1].messages[1:], {"role": "assistant", "content": "answer three"}]
        answer = await said(editor, sid, "/compact the questions")
        # the summariser saw the older part, with the focus
        summary_request = model.requests[-1]
        assert "Focus the summary on: the questions" in summary_request.messages[0]["content"]
        assert "question one" in summary_request.messages[-1]["content"]
        assert "question three" not in summary_request.messages[-1]["content"]  # kept, not summarised
        assert summary_request.tools == []
        # the user saw the summary
        assert "The user asked three questions; all answered." in answer
        await said(editor, sid, "question four")
    messages = model.requests[-1].messages[1:]
    assert messages[0] == {"role": "user", "content": SUMMARY_PREFIX + "The user asked three questions; all answered."}
    assert messages[1:-1] == before[2:]  # the two recent turns, verbatim
    assert messages[-1] == {"role": "user", "content": "question four"}
    later = ScriptedModel([text("ok")])
    async with agent(sessions_dir, later, check) as editor:  # the compacted conversation is what was saved
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        await said(editor, sid, "question five")
    assert later.requests[0].messages[1:-1] == [*messages, {"role": "assistant", "content": "answer four"}]


async def test_compact_of_a_short_conversation(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("one"), text("two")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        assert "nothing to compact" in (await said(editor, sid, "/compact")).lower()
        await said(editor, sid, "first")
        await said(editor, sid, "second")
        assert "nothing to compact" in (await said(editor, sid, "/compact")).lower()
    assert len(model.requests) == 2


async def test_compact_with_an_empty_summary_changes_nothing(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("1"), text("2"), text("3"), [], text("4")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in ("a", "b", "c"):
            await said(editor, sid, prompt)
        assert "nothing was changed" in await said(editor, sid, "/compact")
        await said(editor, sid, "d")
    assert user_texts(model.requests[-1].messages) == ["a", "b", "c", "d"]


async def test_compact_when_the_model_fails_says_so(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("1"), text("2"), text("3"), [Fail(ModelError("the model is down"))], text("4")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in ("a", "b", "c"):
            await said(editor, sid, prompt)
        assert "the model is down" in await said(editor, sid, "/compact")
        await said(editor, sid, "d")
    assert user_texts(model.requests[-1].messages) == ["a", "b", "c", "d"]


async def test_automatic_compaction_before_the_window_overflows(project: Path, sessions_dir: Path, check: Any) -> None:
    big = "x" * 20_000  # about 5,000 tokens a prompt
    profile = ModelProfile(id="tiny", name="Tiny window", context_window=22_000, needs_key=False)
    model = ScriptedModel([text("one"), text("two"), text("three"), text("Summary: four big prompts."), text("four")])
    async with agent(sessions_dir, model, check, profiles=[profile], tools=lambda: []) as editor:
        sid = await editor.new_session(str(project))
        for n in range(3):
            answer = await said(editor, sid, f"prompt {n} {big}")
            assert "compact" not in answer.lower()
        mark = len(editor.updates(sid))
        answer = await said(editor, sid, f"prompt 3 {big}")
        shown = editor.updates(sid)[mark:]
    assert "context window" in answer  # the user is told
    assert "Summary: four big prompts." in answer
    assert answer.endswith("four")  # and the turn went on
    final = model.requests[-1].messages[1:]
    assert final[0]["content"] == SUMMARY_PREFIX + "Summary: four big prompts."
    assert [m["content"][:8] for m in final[1:]] == ["prompt 2", "three", "prompt 3"]
    assert estimate_tokens(model.requests[-1].messages) < 0.8 * profile.context_window
    usage = [u for u in shown if u["sessionUpdate"] == "usage_update"]
    stored = SessionStore(sessions_dir).load(sid)
    assert stored is not None
    assert [(u["used"], u["size"]) for u in usage] == [(estimate_tokens(stored.messages[:-1]), 22_000)]
    assert usage[0]["used"] < estimate_tokens(model.requests[2].messages)  # smaller than three turns ago


# -- /mode and /model -------------------------------------------------------------------------------


PROFILES = [
    ModelProfile(id="fast", name="Fast", needs_key=False),
    ModelProfile(id="smart", name="Smart", needs_key=False),
]


async def test_mode_switches(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        sid = await editor.new_session(str(project))
        mark = len(editor.updates(sid))
        answer = await said(editor, sid, "/mode read-only")
        assert "read-only" in answer
        kinds = {u["sessionUpdate"]: u for u in editor.updates(sid)[mark:]}
        assert kinds["current_mode_update"]["currentModeId"] == "read-only"
        options = {o["id"]: o["currentValue"] for o in kinds["config_option_update"]["configOptions"]}
        assert options["mode"] == "read-only"
        result = await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
        assert result["modes"]["currentModeId"] == "read-only"


async def test_model_switches(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check, profiles=PROFILES) as editor:
        sid = await editor.new_session(str(project))
        mark = len(editor.updates(sid))
        answer = await said(editor, sid, "/model smart")
        assert "smart" in answer
        updates = [u for u in editor.updates(sid)[mark:] if u["sessionUpdate"] == "config_option_update"]
        assert {o["id"]: o["currentValue"] for o in updates[-1]["configOptions"]}["model"] == "smart"


async def test_an_unknown_model_lists_the_valid_ones(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check, profiles=PROFILES) as editor:
        sid = await editor.new_session(str(project))
        mark = len(editor.updates(sid))
        for argument in ("gpt-99", ""):
            answer = await said(editor, sid, f"/model {argument}".strip())
            assert "fast" in answer
            assert "smart" in answer
        assert all(u["sessionUpdate"] == "agent_message_chunk" for u in editor.updates(sid)[mark:])


async def test_an_unknown_mode_lists_the_valid_ones(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        sid = await editor.new_session(str(project))
        mark = len(editor.updates(sid))
        for argument in ("turbo", ""):
            answer = await said(editor, sid, f"/mode {argument}".strip())
            for mode in ("ask", "accept-edits", "read-only", "full-access"):
                assert mode in answer
        assert all(u["sessionUpdate"] == "agent_message_chunk" for u in editor.updates(sid)[mark:])


# -- /init and words that are not commands ----------------------------------------------------------


async def test_init_runs_a_turn_that_writes_agents_md(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([[call(1, "write_file", path="AGENTS.md", content="# Agents\n")], text("Wrote AGENTS.md.")])
    client = FakeClient()
    async with agent(sessions_dir, model, check, client=client) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "/init")
    request = model.requests[0].messages[-1]["content"]
    assert "AGENTS.md" in request
    assert str(project) in request
    assert [r["toolCall"]["kind"] for r in client.permission_requests] == ["edit"]  # the usual, gated path
    assert (project / "AGENTS.md").read_text() == "# Agents\n"


async def test_init_keeps_what_the_user_added(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("ok")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await said(editor, sid, "/init mention the benchmarks")
    assert "mention the benchmarks" in model.requests[0].messages[-1]["content"]


@pytest.mark.parametrize(
    "prompt",
    ["/frobnicate the widgets", "/Undo", "/undone", "/usr/bin/python crashes", "/", "please /undo that", " /mode-x y"],
)
async def test_other_words_go_to_the_model(project: Path, sessions_dir: Path, check: Any, prompt: str) -> None:
    model = ScriptedModel([text("sure")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        assert await said(editor, sid, prompt) == "sure"
    assert model.requests[0].messages[-1] == {"role": "user", "content": prompt}


async def test_commands_are_offered_with_input_hints(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check, profiles=PROFILES) as editor:
        sid = await editor.new_session(str(project))
        update = await editor.transcript.wait_for_update("available_commands_update")
    assert editor.updates(sid)[0] == update
    commands = {c["name"]: c for c in update["availableCommands"]}
    assert set(commands) == {"init", "compact", "undo", "rewind", "jobs", "stop", "mode", "model", "mcp"}
    assert all(c["description"] for c in commands.values())
    for name in ("compact", "rewind", "stop", "mode", "model"):
        assert commands[name]["input"]["hint"]
    assert "read-only" in commands["mode"]["input"]["hint"]
    assert "smart" in commands["model"]["input"]["hint"]
    assert "input" not in commands["undo"]


async def test_undo_skips_a_change_that_never_happened(project: Path, sessions_dir: Path, check: Any) -> None:
    """Changes are recorded before they are made; one whose write failed is not "changed since"."""
    from refagent.acp.errors import RequestError

    model = ScriptedModel(
        [[call(1, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")], text("tried")]
    )
    client = FakeClient(fs_error=RequestError("writes are disabled"))
    async with agent(sessions_dir, model, check, client=client) as editor:
        await editor.initialize({"fs": {"readTextFile": False, "writeTextFile": True}})
        sid = await editor.new_session(str(project))
        await said(editor, sid, "fix it")
        assert "nothing to undo" in await said(editor, sid, "/undo")
    assert (project / "calc.py").read_text() == ORIGINAL
