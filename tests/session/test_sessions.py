"""Sessions that outlive the agent, through the in-memory editor with a store in ``tmp_path``: load replays
the visible history (then the conversation goes on), resume does not replay, list pages newest first,
titles, close, delete, additionalDirectories on load and resume, and the capabilities that advertise them.

A second ``connect`` with the same store is an agent restart: nothing is shared but the files."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.acp.errors import RequestError
from refagent.llm.protocol import ReasoningDelta, ToolCallRequest
from refagent.llm.scripted import Hang, Response, ScriptedModel, text
from refagent.persistence.recorder import VISIBLE, replay
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, FakeClient, connect

pytestmark = pytest.mark.anyio

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("a - b", "a + b")
PROMPT = "The tests fail. Fix the bug in calc.py please."
LIMIT = 5  # seconds: a safety net for waits, never a pause


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


def plan(*statuses: str) -> list[dict[str, str]]:
    steps = ["Find the bug", "Fix it"]
    return [{"content": s, "status": st, "priority": "high"} for s, st in zip(steps, statuses, strict=True)]


def fix_the_bug() -> list[Response]:
    """A turn with thoughts, streamed text, a plan, a read, an edit with a diff, and a final message."""
    return [
        [
            ReasoningDelta("The tests "),
            ReasoningDelta("fail, so "),
            ReasoningDelta("look at calc.py."),
            *text("Let me look at calc.py first.", chunk=4),
            call(1, "update_plan", entries=plan("in_progress", "pending")),
        ],
        [*text("Reading it."), call(2, "read_file", path="calc.py")],
        [call(3, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")],
        [
            ReasoningDelta("Edited; the plan is done."),
            call(4, "update_plan", entries=plan("completed", "completed")),
        ],
        text("Fixed: `add` subtracted instead of adding.", chunk=5),
    ]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "calc.py").write_text(BUGGY)
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "sessions"


def settings(sessions_dir: Path, model: ScriptedModel, **extra: Any) -> Settings:
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(sessions_dir), **extra)


@asynccontextmanager
async def agent(
    sessions_dir: Path, model: ScriptedModel, check: Any, client: FakeClient | None = None, **extra: Any
) -> AsyncIterator[Editor]:
    """A fresh agent on the store in ``sessions_dir``, initialized."""
    async with connect(settings(sessions_dir, model, **extra), client=client, check=check) as editor:
        await editor.initialize()
        yield editor


def visible(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] in VISIBLE]


def around(editor: Editor, mark: int, method: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The updates the agent sent after ``mark`` before and after its response to ``method``."""
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    answered = False
    requests = {m["id"]: m["method"] for s, m in editor.transcript.messages if s == "client" and "method" in m}
    for sender, message in editor.transcript.messages[mark:]:
        if sender != "agent":
            continue
        if message.get("method") == "session/update":
            (after if answered else before).append(message["params"]["update"])
        elif "id" in message and "method" not in message and requests.get(message["id"]) == method:
            answered = True
    assert answered, f"no response to {method}"
    return before, after


async def request(
    editor: Editor, method: str, params: dict[str, Any], *, after: int = 0
) -> tuple[Any, list[Any], list[Any]]:
    """Send a request; return its result, the updates sent before the response, and the first ``after``
    updates sent after it (waiting for them)."""
    mark = len(editor.transcript.messages)
    result = await editor.request(method, params)
    with anyio.fail_after(LIMIT):
        while len(around(editor, mark, method)[1]) < after:
            seen = len(editor.transcript.messages)
            await editor.transcript.wait_for(lambda sender, message, seen=seen: len(editor.transcript.messages) > seen)
    before, later = around(editor, mark, method)
    return result, before, later


async def error_of(editor: Editor, method: str, params: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await editor.request(method, params)
    return caught.value


def user_chunk_text(updates: list[dict[str, Any]]) -> list[str]:
    return [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"]


def without_ids(update: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in update.items() if k != "messageId"}


# -- load -------------------------------------------------------------------------------------------


async def test_load_after_a_restart_replays_the_visible_history_and_continues(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = ScriptedModel([*fix_the_bug(), text("You are welcome.")])
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        for prompt in (PROMPT, "Thanks!"):
            mark = len(editor.updates(sid))
            assert await editor.prompt(sid, prompt) == {"stopReason": "end_turn"}
            turns.append((prompt, editor.updates(sid)[mark:]))
        asked = len(editor.client.permission_requests)
    assert asked == 1  # the edit
    assert (project / "calc.py").read_text() == FIXED
    earlier = [*model.requests[-1].messages[1:], {"role": "assistant", "content": "You are welcome."}]

    later = ScriptedModel([text("Yes, calc.py is fixed.")])
    async with agent(sessions_dir, later, check) as editor:
        result, replayed, after = await request(
            editor, "session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []}, after=2
        )
        assert set(result) == {"modes", "configOptions"}
        # what was shown, in order: each prompt, then what the agent showed for it, folded
        expected: list[dict[str, Any]] = []
        for prompt, sent in turns:
            expected.append({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": prompt}})
            expected += replay(visible(sent))
        assert [without_ids(u) if u["sessionUpdate"] == "user_message_chunk" else u for u in replayed] == expected
        # only after the response: the commands and the title
        assert [u["sessionUpdate"] for u in after] == ["available_commands_update", "session_info_update"]
        assert after[1]["title"] == PROMPT

        # the conversation goes on where it stopped
        assert await editor.prompt(sid, "Is it fixed?") == {"stopReason": "end_turn"}
        messages = later.requests[0].messages
        assert messages[0]["role"] == "system"
        assert messages[1:-1] == earlier
        assert messages[-1] == {"role": "user", "content": "Is it fixed?"}

    # the replay kept the original ids, merged each message, and showed each tool call once, finished
    sent_ids = {u["messageId"] for _, s in turns for u in s if "messageId" in u}
    replayed_chunks = [u for u in replayed if u["sessionUpdate"] in ("agent_message_chunk", "agent_thought_chunk")]
    assert {u["messageId"] for u in replayed_chunks} <= sent_ids
    assert len({u["messageId"] for u in replayed_chunks}) == len(replayed_chunks)
    assert [u["content"]["text"] for u in replayed_chunks if u["sessionUpdate"] == "agent_thought_chunk"] == [
        "The tests fail, so look at calc.py.",
        "Edited; the plan is done.",
    ]
    calls = [u for u in replayed if u["sessionUpdate"] == "tool_call"]
    assert [(c["kind"], c["status"]) for c in calls] == [("read", "completed"), ("edit", "completed")]
    assert {"type": "diff", "path": str(project / "calc.py"), "oldText": BUGGY, "newText": FIXED} in calls[1]["content"]
    assert [[e["status"] for e in u["entries"]] for u in replayed if u["sessionUpdate"] == "plan"] == [
        ["in_progress", "pending"],
        ["completed", "completed"],
    ]
    assert user_chunk_text(replayed) == [PROMPT, "Thanks!"]


async def test_load_twice_replays_the_same_and_includes_the_turns_after_the_first_load(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = ScriptedModel(fallback=lambda request: text("ok " + str(len(request.messages))))
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "one")
    params = {"sessionId": sid, "cwd": str(project), "mcpServers": []}
    async with agent(sessions_dir, model, check) as editor:
        _, first, _ = await request(editor, "session/load", params)
        await editor.prompt(sid, "two")
        _, second, _ = await request(editor, "session/load", params)  # a live session, loaded again
    async with agent(sessions_dir, model, check) as editor:
        _, third, _ = await request(editor, "session/load", params)
    assert user_chunk_text(first) == ["one"]
    assert user_chunk_text(second) == ["one", "two"]
    assert second == third
    assert second[: len(first)] == first


async def test_load_of_a_prompt_with_a_file_link(project: Path, sessions_dir: Path, check: Any) -> None:
    """Editors send an @-mentioned file as a ``resource_link`` between texts: all three blocks come back."""
    link = {"type": "resource_link", "uri": (project / "calc.py").as_uri(), "name": "calc.py"}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "What does "}, link, {"type": "text", "text": " do?"}]
    model = ScriptedModel([text("It subtracts.")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, *blocks) == {"stopReason": "end_turn"}
    assert BUGGY in model.requests[0].messages[-1]["content"]  # the link was read for the model
    async with agent(sessions_dir, model, check) as editor:
        params = {"sessionId": sid, "cwd": str(project), "mcpServers": []}
        _, replayed, _ = await request(editor, "session/load", params)
    users = [u for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
    assert [u["content"] for u in users] == blocks
    assert len({u["messageId"] for u in users}) == 1
    assert replayed[-1]["content"] == {"type": "text", "text": "It subtracts."}


async def test_load_of_an_unknown_session_is_not_found(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        for method in ("session/load", "session/resume"):
            error = await error_of(editor, method, {"sessionId": "sess_nope", "cwd": str(project), "mcpServers": []})
            assert error.code == -32002
            error = await error_of(editor, method, {"sessionId": "../../etc", "cwd": str(project), "mcpServers": []})
            assert error.code in (-32002, -32602)


async def test_load_needs_an_absolute_cwd_and_mcp_servers(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        sid = await editor.new_session(str(project))
        error = await error_of(editor, "session/load", {"sessionId": sid, "cwd": "relative", "mcpServers": []})
        assert error.code == -32602
        error = await error_of(editor, "session/load", {"sessionId": sid, "cwd": str(project)})
        assert error.code == -32602
        # resume does not require mcpServers
        await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})


# -- resume -----------------------------------------------------------------------------------------


async def test_resume_does_not_replay_and_the_history_continues(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("Hello!")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "hi")
    later = ScriptedModel([text("You said hi.")])
    async with agent(sessions_dir, later, check) as editor:
        result, before, after = await request(
            editor, "session/resume", {"sessionId": sid, "cwd": str(project)}, after=2
        )
        assert before == []
        assert set(result) == {"modes", "configOptions"}
        assert [u["sessionUpdate"] for u in after] == ["available_commands_update", "session_info_update"]
        await editor.prompt(sid, "what did I say?")
    assert [(m["role"], m["content"]) for m in later.requests[0].messages[1:]] == [
        ("user", "hi"),
        ("assistant", "Hello!"),
        ("user", "what did I say?"),
    ]


async def test_mode_and_model_survive_a_restart(project: Path, sessions_dir: Path, check: Any) -> None:
    from refagent.llm.profiles import ModelProfile

    profiles = [
        ModelProfile(id="small", name="Small", needs_key=False),
        ModelProfile(id="big", name="Big", needs_key=False),
    ]
    model = ScriptedModel(fallback=lambda request: text("ok"))
    async with agent(sessions_dir, model, check, profiles=profiles) as editor:
        sid = await editor.new_session(str(project))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "read-only"})
        await editor.request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "big"})
    async with agent(sessions_dir, model, check, profiles=profiles) as editor:
        result = await editor.request("session/resume", {"sessionId": sid, "cwd": str(project)})
    assert result["modes"]["currentModeId"] == "read-only"
    assert {o["id"]: o["currentValue"] for o in result["configOptions"]} == {"mode": "read-only", "model": "big"}


# -- list and titles --------------------------------------------------------------------------------


async def test_titles_come_after_the_first_exchange_and_show_in_the_list(
    tmp_path: Path, sessions_dir: Path, check: Any
) -> None:
    model = ScriptedModel(fallback=lambda request: text("ok"))
    long_prompt = "Please refactor the payment module so that it " + "really " * 20 + "works"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    async with agent(sessions_dir, model, check) as editor:
        first = await editor.new_session(str(a))
        second = await editor.new_session(str(b))
        third = await editor.new_session(str(a))
        assert [u for u in editor.updates() if u["sessionUpdate"] == "session_info_update"] == []
        _, before, _ = await request(
            editor, "session/prompt", {"sessionId": first, "prompt": [{"type": "text", "text": "Fix   the\nbug"}]}
        )
        titles = [u for u in before if u["sessionUpdate"] == "session_info_update"]
        assert [t["title"] for t in titles] == ["Fix the bug"]  # before the prompt's response
        assert "updatedAt" in titles[0]
        await editor.prompt(second, long_prompt)
        await editor.prompt(third, "Third")
        await editor.prompt(first, "another prompt does not rename it")
        infos = [u for u in editor.updates(first) if u["sessionUpdate"] == "session_info_update"]
        assert len(infos) == 1
        listed = (await editor.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [first, third, second]  # newest first: first was used last
        assert [s.get("title") for s in listed] == ["Fix the bug", "Third", listed[2]["title"]]
        assert listed[2]["title"].endswith("…")
        assert len(listed[2]["title"]) <= 60
        assert long_prompt.startswith(listed[2]["title"][:-1])
        assert all(s["updatedAt"] >= "2020" for s in listed)
        in_a = (await editor.request("session/list", {"cwd": str(a)}))["sessions"]
        assert [s["sessionId"] for s in in_a] == [first, third]
        assert all(s["cwd"] == str(a) for s in in_a)
        nothing = await editor.request("session/list", {"cwd": str(tmp_path / "none")})
        assert nothing == {"sessions": []}
    async with agent(sessions_dir, model, check) as editor:  # the same after a restart
        assert (await editor.request("session/list", {}))["sessions"] == listed


async def test_list_pages_with_an_opaque_cursor(project: Path, sessions_dir: Path, check: Any) -> None:
    store = SessionStore(sessions_dir)
    for n in range(55):
        store.create(f"s{n:02}", str(project), []).close()
        store.touch(f"s{n:02}", updated_at=f"2026-01-01T00:00:{n:02}.000Z")
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        page = await editor.request("session/list", {})
        assert len(page["sessions"]) == 50
        assert isinstance(page["nextCursor"], str)
        rest = await editor.request("session/list", {"cursor": page["nextCursor"]})
        assert "nextCursor" not in rest
        listed = [s["sessionId"] for s in page["sessions"] + rest["sessions"]]
        assert listed == [f"s{n:02}" for n in reversed(range(55))]
        for cursor in ("garbage", "", 42):
            error = await error_of(editor, "session/list", {"cursor": cursor})
            assert error.code == -32602
        error = await error_of(editor, "session/list", {"cwd": "relative/path"})
        assert error.code == -32602


# -- close ------------------------------------------------------------------------------------------


async def test_close_cancels_the_running_turn_and_frees_the_session(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    model = ScriptedModel([[*text("Working on it"), Hang()]], fallback=lambda request: text("again"))
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await editor.prompt(sid, "a long task"))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt)
                await editor.transcript.wait_for_update("agent_message_chunk")
                assert await editor.request("session/close", {"sessionId": sid}) == {}
        assert answers == [{"stopReason": "cancelled"}]
        error = await error_of(editor, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
        assert error.code == -32002
        error = await error_of(editor, "session/close", {"sessionId": sid})
        assert error.code == -32002
        error = await error_of(editor, "session/set_mode", {"sessionId": sid, "modeId": "ask"})
        assert error.code == -32002
        # closed is not deleted: it can be loaded again, with what the cancelled turn showed
        _, replayed, _ = await request(
            editor, "session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []}
        )
        assert [u["content"]["text"] for u in replayed] == ["a long task", "Working on it"]
        assert await editor.prompt(sid, "go on") == {"stopReason": "end_turn"}


def answered(messages: list[dict[str, Any]]) -> bool:
    """Every tool call of an assistant message has its tool result (the API refuses the request otherwise)."""
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return sorted(asked) == sorted(results)


@pytest.mark.parametrize("method", ["session/load", "session/resume"])
async def test_reopening_a_session_during_its_turn_keeps_the_history_valid(
    project: Path, sessions_dir: Path, check: Any, method: str
) -> None:
    """The turn is cancelled; its last records (the results of the calls it did not run) must be part of
    the reopened session's conversation, or the next request is one the model API refuses."""
    asked = anyio.Event()

    async def wait_forever(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError

    model = ScriptedModel(
        [
            [
                call(1, "read_file", path="calc.py"),
                call(2, "edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
            ]
        ],
        fallback=lambda request: text("ok"),
    )
    async with agent(sessions_dir, model, check, client=FakeClient(permission=wait_forever)) as editor:
        sid = await editor.new_session(str(project))
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await editor.prompt(sid, "fix it"))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt)
                await asked.wait()
                await editor.request(method, {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        assert answers == [{"stopReason": "cancelled"}]
        assert await editor.prompt(sid, "again") == {"stopReason": "end_turn"}
    assert answered(model.requests[-1].messages)
    stored = SessionStore(sessions_dir).load(sid)
    assert stored is not None
    assert answered(stored.messages)


async def test_close_of_an_unknown_session_is_an_error(sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        error = await error_of(editor, "session/close", {"sessionId": "sess_unknown"})
        assert error.code == -32002
        error = await error_of(editor, "session/close", {})
        assert error.code == -32602


async def test_close_of_an_idle_session_keeps_its_history(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("first answer")])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "first")
        await editor.request("session/close", {"sessionId": sid})
        listed = (await editor.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
    stored = SessionStore(sessions_dir).load(sid)
    assert stored is not None
    assert [m["content"] for m in stored.messages] == ["first", "first answer"]


# -- delete -----------------------------------------------------------------------------------------


async def test_delete_removes_the_session_from_disk_and_list(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel(fallback=lambda request: text("ok"))
    async with agent(sessions_dir, model, check) as editor:
        keep = await editor.new_session(str(project))
        gone = await editor.new_session(str(project))
        await editor.prompt(gone, "soon deleted")
        assert (sessions_dir / f"{gone}.jsonl").exists()
        assert await editor.request("session/delete", {"sessionId": gone}) == {}
        assert not (sessions_dir / f"{gone}.jsonl").exists()
        assert [s["sessionId"] for s in (await editor.request("session/list", {}))["sessions"]] == [keep]
        error = await error_of(editor, "session/prompt", {"sessionId": gone, "prompt": [{"type": "text", "text": "x"}]})
        assert error.code == -32002
        error = await error_of(editor, "session/load", {"sessionId": gone, "cwd": str(project), "mcpServers": []})
        assert error.code == -32002
        for unknown in (gone, "sess_never", "../../x"):
            assert await editor.request("session/delete", {"sessionId": unknown}) == {}
    async with agent(sessions_dir, model, check) as editor:
        assert [s["sessionId"] for s in (await editor.request("session/list", {}))["sessions"]] == [keep]


async def test_delete_during_a_turn_leaves_nothing_behind(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([[*text("Working"), Hang()]])
    async with agent(sessions_dir, model, check) as editor:
        sid = await editor.new_session(str(project))
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await editor.prompt(sid, "a long task"))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt)
                await editor.transcript.wait_for_update("agent_message_chunk")
                assert await editor.request("session/delete", {"sessionId": sid}) == {}
        assert answers == [{"stopReason": "cancelled"}]
        assert sorted([p.name async for p in anyio.Path(sessions_dir).iterdir()]) == ["index.json"]
        assert (await editor.request("session/list", {}))["sessions"] == []


# -- additionalDirectories --------------------------------------------------------------------------


def reads_and_writes_lib(lib: Path) -> Callable[[Any], Response]:
    """Each turn: read lib/util.py, then try to change it, then say done."""
    steps: list[Response] = []
    for n in range(3):
        steps += [
            [call(10 * n + 1, "read_file", path=str(lib / "util.py"))],
            [call(10 * n + 2, "write_file", path=str(lib / "util.py"), content=f"VALUE = {n}\n")],
            text("done"),
        ]

    def next_step(request: Any) -> Response:
        return steps.pop(0)

    return next_step


async def test_on_load_and_resume_the_clients_directories_are_the_roots(
    tmp_path: Path, project: Path, sessions_dir: Path, check: Any
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "util.py").write_text("VALUE = 1\n")
    model = ScriptedModel(fallback=reads_and_writes_lib(lib))
    client = FakeClient()
    async with agent(sessions_dir, model, check, client=client) as editor:
        sid = await editor.new_session(str(project), additionalDirectories=[str(lib)])
        await editor.prompt(sid, "change lib")
        # inside the roots: the read did not ask, the write asked (as any edit) and happened
        assert [r["toolCall"]["kind"] for r in client.permission_requests] == ["edit"]
        assert (lib / "util.py").read_text() == "VALUE = 0\n"
        assert str(lib) in model.requests[0].messages[0]["content"]  # the prompt's environment names it
        listed = (await editor.request("session/list", {}))["sessions"]
        assert listed[0]["additionalDirectories"] == [str(lib)]

    client = FakeClient()
    async with agent(sessions_dir, model, check, client=client) as editor:
        # loaded without the directory: lib is outside the roots now
        await editor.request("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []})
        mark = len(editor.updates(sid))
        await editor.prompt(sid, "change lib again")
        assert [r["toolCall"]["title"] for r in client.permission_requests] == [
            f"Read {lib / 'util.py'} (outside the workspace)"
        ] or all("outside" in r["toolCall"]["title"] for r in client.permission_requests)
        assert [r["toolCall"]["kind"] for r in client.permission_requests] == ["read"]  # the write did not ask
        assert (lib / "util.py").read_text() == "VALUE = 0\n"  # and was refused
        finals = [u for u in editor.updates(sid)[mark:] if u.get("status") in ("completed", "failed")]
        assert [u["status"] for u in finals] == ["completed", "failed"]
        assert "outside" in json.dumps(finals[1]["content"])
        assert str(lib) not in model.requests[-1].messages[0]["content"]

    client = FakeClient()
    async with agent(sessions_dir, model, check, client=client) as editor:
        # resumed with the directory: inside again
        await editor.request(
            "session/resume", {"sessionId": sid, "cwd": str(project), "additionalDirectories": [str(lib)]}
        )
        await editor.prompt(sid, "and once more")
        assert [r["toolCall"]["kind"] for r in client.permission_requests] == ["edit"]
        assert (lib / "util.py").read_text() == "VALUE = 2\n"


async def test_additional_directories_must_be_absolute(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        sid = await editor.new_session(str(project))
        for method in ("session/new", "session/load", "session/resume"):
            params = {"sessionId": sid, "cwd": str(project), "mcpServers": [], "additionalDirectories": ["rel"]}
            error = await error_of(editor, method, params)
            assert error.code == -32602


# -- capabilities and announcements -----------------------------------------------------------------


async def test_capabilities_with_a_store(sessions_dir: Path, check: Any) -> None:
    async with connect(settings(sessions_dir, ScriptedModel()), check=check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]
    assert capabilities["loadSession"] is True
    assert capabilities["sessionCapabilities"] == {
        "list": {},
        "resume": {},
        "close": {},
        "delete": {},
        "fork": {},  # unstable
        "title": {},  # unstable
        "additionalDirectories": {},
        "systemPrompt": {"mode": {"override": {}}},  # unstable
        "archive": {},  # unstable
        "status": {},  # unstable
    }


async def test_capabilities_without_a_store(project: Path, check: Any) -> None:
    async with connect(Settings(make_model=lambda p: ScriptedModel(), store=None), check=check) as editor:
        capabilities = (await editor.initialize())["agentCapabilities"]
        assert capabilities.get("loadSession", False) is False
        assert capabilities["sessionCapabilities"] == {
            "close": {},
            "additionalDirectories": {},
            "systemPrompt": {"mode": {"override": {}}},  # a session's, saved or not
            "status": {},  # open or not (unstable)
        }
        sid = await editor.new_session(str(project))
        assert await editor.request("session/close", {"sessionId": sid}) == {}


async def test_without_a_store_the_session_methods_are_not_found(project: Path, check: Any) -> None:
    async with connect(Settings(make_model=lambda p: ScriptedModel(), store=None), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        codes = []
        for method, params in [
            ("session/load", {"sessionId": sid, "cwd": str(project), "mcpServers": []}),
            ("session/resume", {"sessionId": sid, "cwd": str(project)}),
            ("session/list", {}),
            ("session/delete", {"sessionId": sid}),
        ]:
            codes.append((await error_of(editor, method, params)).code)
        assert codes == [-32601] * 4


async def test_commands_are_announced_after_new_load_and_resume(project: Path, sessions_dir: Path, check: Any) -> None:
    async with agent(sessions_dir, ScriptedModel(), check) as editor:
        result, before, after = await request(editor, "session/new", {"cwd": str(project), "mcpServers": []}, after=1)
        sid = result["sessionId"]
        assert before == []
        assert [u["sessionUpdate"] for u in after] == ["available_commands_update"]  # no title yet
        commands = {c["name"]: c for c in after[0]["availableCommands"]}
        assert set(commands) == {"init", "compact", "undo", "rewind", "jobs", "stop", "mode", "model", "mcp"}
        for method in ("session/load", "session/resume"):
            params = {"sessionId": sid, "cwd": str(project), "mcpServers": []}
            _, before, after = await request(editor, method, params, after=1)
            assert before == []  # nothing to replay: no prompt yet
            assert [u["sessionUpdate"] for u in after] == ["available_commands_update"]
            assert {c["name"] for c in after[0]["availableCommands"]} == set(commands)


async def test_an_unwritable_data_dir_does_not_stop_sessions(
    tmp_path: Path, project: Path, check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only or broken data directory costs the saving, not the session; and it is said once, not
    for every record (a stderr pipe nobody reads fills up)."""
    (tmp_path / "not-a-dir").write_text("a file where the data directory should be")
    model = ScriptedModel(fallback=lambda request: text("still works"))
    with caplog.at_level(logging.WARNING, logger="refagent"):
        async with agent(tmp_path / "not-a-dir" / "sessions", model, check) as editor:
            sid = await editor.new_session(str(project))
            for _ in range(3):
                assert await editor.prompt(sid, "hello") == {"stopReason": "end_turn"}
            assert editor.text(sid) == "still works" * 3
            assert await editor.request("session/list", {}) == {"sessions": []}
    assert 1 <= len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 3


async def test_sessions_are_saved_under_the_user_data_dir_by_default(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: Any
) -> None:
    data = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    model = ScriptedModel([text("ok")])
    async with connect(Settings(make_model=lambda p: model), check=check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "saved?")
    assert (data / "refagent" / "sessions" / f"{sid}.jsonl").exists()


async def test_a_title_is_one_visible_line(project: Path, sessions_dir: Path, check: Any) -> None:
    """The title comes from the user's prompt (pasted text can carry escape sequences): the editor's tab bar
    and a terminal client get it as one line with its control characters shown, live and in the list."""
    async with agent(sessions_dir, ScriptedModel([text("ok")]), check) as editor:
        sid = await editor.new_session(str(project))
        await editor.prompt(sid, "fix\x1b]0;owned\x07 it\r\nnow\x9b2J")
        [info] = [u for u in editor.updates(sid) if u["sessionUpdate"] == "session_info_update"]
        listed = await editor.request("session/list", {})
    expected = "fix\\x1b]0;owned\\x07 it now\\x9b2J"
    assert info["title"] == expected
    assert [s["title"] for s in listed["sessions"]] == [expected]
