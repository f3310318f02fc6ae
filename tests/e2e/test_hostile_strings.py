"""One bad string does not poison a session, and one huge argument does not flood the editor or the disk.

Each entry point of text is driven end to end through the agent: a lone surrogate in the prompt (a raw
``\\ud83d`` escape on the wire), in a slash command, in a file name that is not UTF-8 (glob and grep list
it as ``\\udcff``), in a model stream that splits a pair across chunks, in a tool's output, in a note of
changed files. After each, the session takes another prompt, every model request body is valid UTF-8 JSON,
nothing the agent sent holds a surrogate, and the saved session loads and goes on. Then a 20 MB
``write_file``: the messages stay under the cap, the session files stay small, the file is written whole,
and ``/undo`` (after a reload) restores it.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from refagent.acp.text import StreamJoiner, clean, has_surrogates, shorten
from refagent.llm.openai_client import OpenAIModel
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ModelClient, ModelRequest, TextDelta, ToolCallRequest, ToolSpec
from refagent.llm.retry import RetryPolicy
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.conversation import Conversation
from refagent.persistence.reader import read_records
from refagent.persistence.store import SessionStore
from refagent.persistence.writer import SessionLog
from refagent.session.messages import MAX_KEPT_ARGUMENTS, kept_arguments
from refagent.session.turn import Turn as PromptTurn
from refagent.settings import Settings, default_tools
from refagent.testing.memory import Editor, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult
from refagent.tools.runner import (
    MAX_CONTENT_BYTES,
    MAX_RAW_BYTES,
    MAX_RESULT_CHARS,
    bounded_content,
    bounded_raw,
    for_model,
)

pytestmark = pytest.mark.anyio

KEY = "sk-test"
MESSAGE_CAP = MAX_CONTENT_BYTES + 2 * MAX_RAW_BYTES + 64 * 1024
"""The largest message the agent may send about a tool call: its content, its raw input and output, and
room for the rest (title, locations, framing)."""


@pytest.fixture(scope="module", autouse=True)
def _openai_imported() -> None:
    """Import ``openai`` (~1 s) before the first test, so that its cost is not charged to one of them."""
    import openai  # noqa: F401


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


# -- helpers ------------------------------------------------------------------------------------------


def surrogates(value: Any) -> list[str]:
    """The strings (keys too) in a decoded JSON value that hold a surrogate code point."""
    if isinstance(value, str):
        return [value] if has_surrogates(value) else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in surrogates(k) + surrogates(v)]
    if isinstance(value, list):
        return [s for item in value for s in surrogates(item)]
    return []


def assert_wire_clean(editor: Editor) -> None:
    """Nothing the agent sent decodes to a lone surrogate (a strict client would reject the line)."""
    bad = [m for sender, m in editor.transcript.messages if sender == "agent" and surrogates(m)]
    assert bad == []


def assert_bodies_clean(bodies: list[Any]) -> None:
    """Each model request arrived, was a JSON object, and is valid UTF-8 through and through."""
    for body in bodies:
        assert isinstance(body, dict), body  # the scripted server could not parse it otherwise
        assert surrogates(body) == []
        json.dumps(body, ensure_ascii=False).encode("utf-8")  # raises for a surrogate


def assert_requests_clean(model: ScriptedModel) -> None:
    assert_bodies_clean([{"messages": r.messages} for r in model.requests])


def settings(sessions_dir: Path, model: ModelClient, profile: ModelProfile | None = None, **extra: Any) -> Settings:
    more: dict[str, Any] = {"profiles": [profile]} if profile is not None else {}
    return Settings(make_model=lambda p: model, store=lambda: SessionStore(sessions_dir), **more, **extra)


@asynccontextmanager
async def agent(settings: Settings, check: Any) -> AsyncIterator[Editor]:
    async with connect(settings, check=check) as editor:
        await editor.initialize()
        yield editor


@asynccontextmanager
async def openai_model(server: ScriptedOpenAIServer) -> AsyncIterator[tuple[OpenAIModel, ModelProfile]]:
    """The real adapter (the ``openai`` client) against the scripted server."""
    profile = ModelProfile("test", "Test", model="gpt-test", base_url=server.base_url, api_key=KEY)
    model = OpenAIModel(profile, retry=RetryPolicy(attempts=1), rand=lambda: 0.0)
    try:
        yield model, profile
    finally:
        await model.aclose()


_raw_ids = iter(range(1, 1_000_000))


async def raw_prompt(editor: Editor, session_id: str, escaped_text: str) -> dict[str, Any]:
    """Send ``session/prompt`` as a raw line whose text is ``escaped_text`` as it stands in the JSON (so
    ``\\ud83d`` is a lone surrogate escape, which no encoder of ours would write); return its response."""
    ident = f"raw-{next(_raw_ids)}"
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "TEXT"}]}
    line = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "session/prompt", "params": params})
    await editor.connection.send_lines(line.replace('"TEXT"', f'"{escaped_text}"').encode("ascii") + b"\n")

    def answered(sender: str, message: dict[str, Any]) -> bool:
        return sender == "agent" and message.get("id") == ident and "method" not in message

    response = await editor.transcript.wait_for(answered)
    assert "error" not in response, response
    result: dict[str, Any] = response["result"]
    return result


async def load(editor: Editor, session_id: str, project: Path) -> list[dict[str, Any]]:
    """``session/load`` in ``editor``; the updates it replayed."""
    mark = len(editor.transcript.messages)
    await editor.request("session/load", {"sessionId": session_id, "cwd": str(project), "mcpServers": []})
    return [
        m["params"]["update"]
        for sender, m in editor.transcript.messages[mark:]
        if sender == "agent" and m.get("method") == "session/update"
    ]


def said(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"].get("text", "") for u in updates if u["sessionUpdate"] == kind)


def call(n: int, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=f"c{n}", name=name, arguments=json.dumps(args))


# -- the prompt and slash commands -----------------------------------------------------------------------


@dataclass
class Run:
    """A session run twice through the real ``openai`` client: two prompts, then a reload and one more."""

    updates: list[dict[str, Any]]
    """What the first agent showed of the session."""
    replayed: list[dict[str, Any]]
    """What the second agent replayed on ``session/load``."""
    bodies: list[dict[str, Any]]
    """Every request to the model."""


async def run_and_reload(
    server: ScriptedOpenAIServer,
    project: Path,
    sessions_dir: Path,
    check: Any,
    first: Callable[[Editor, str], Awaitable[dict[str, Any]]],
    *,
    mode: str | None = None,
    after_reload: str = "after a reload",
) -> Run:
    """``first`` prompts, then "next"; a second agent loads the session and sends ``after_reload``. Every
    prompt must end its turn, and nothing either agent writes may hold a lone surrogate."""
    async with openai_model(server) as (model, profile):
        async with agent(settings(sessions_dir, model, profile), check) as editor:
            sid = await editor.new_session(str(project))
            if mode is not None:
                await editor.request("session/set_mode", {"sessionId": sid, "modeId": mode})
            assert (await first(editor, sid))["stopReason"] == "end_turn"
            assert (await editor.prompt(sid, "next"))["stopReason"] == "end_turn"
            updates = editor.updates(sid)
            assert_wire_clean(editor)
        async with agent(settings(sessions_dir, model, profile), check) as editor:
            replayed = await load(editor, sid, project)
            assert (await editor.prompt(sid, after_reload))["stopReason"] == "end_turn"
            assert_wire_clean(editor)
    return Run(updates, replayed, [r.body for r in server.chat_requests])


async def test_lone_surrogate_in_the_prompt(project: Path, sessions_dir: Path, check: Any) -> None:
    turns = [Turn(text="Half an emoji."), Turn(text="Still here."), Turn(text="And after a reload.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        run = await run_and_reload(
            server,
            project,
            sessions_dir,
            check,
            lambda editor, sid: raw_prompt(editor, sid, "half \\ud83d emoji \\udcff"),
        )
    bodies, replayed = run.bodies, run.replayed
    titles = [u["title"] for u in run.updates if u["sessionUpdate"] == "session_info_update"]
    assert titles == ["half \ufffd emoji \ufffd"]
    assert_bodies_clean(bodies)
    users = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["half \ufffd emoji \ufffd", "next", "after a reload"]
    assert said(replayed, "user_message_chunk") == "half \ufffd emoji \ufffdnext"


async def test_lone_surrogate_in_slash_commands(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([text("I will look at the project."), text("Fine.")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        assert (await raw_prompt(editor, sid, "/mode \\ud83d"))["stopReason"] == "end_turn"
        assert (await raw_prompt(editor, sid, "/init and \\ude00 this"))["stopReason"] == "end_turn"
        assert (await editor.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert "'\ufffd'" in editor.text(sid)  # the unknown mode, as the user typed it (near enough)
        assert_wire_clean(editor)
    assert_requests_clean(model)
    prompts = [m["content"] for m in model.requests[0].messages if m["role"] == "user"]
    assert any("The user adds: and \ufffd this" in p for p in prompts)
    async with agent(settings(sessions_dir, ScriptedModel([text("ok")])), check) as editor:
        await load(editor, sid, project)
        assert (await editor.prompt(sid, "again"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)


# -- file names and outputs from the tools ----------------------------------------------------------------


def not_utf8(directory: Path, name: bytes, content: bytes = b"needle here\ncaf\xff needle\n") -> Path:
    """A file whose name is not UTF-8 (Python gives it as ``surrogateescape``: byte 0xff is ``\\udcff``)."""
    path = directory / os.fsdecode(name)
    path.write_bytes(content)
    return path


async def test_file_names_that_are_not_utf8(project: Path, sessions_dir: Path, check: Any) -> None:
    not_utf8(project, b"caf\xff.txt")
    not_utf8(project, b"n\xffme.md")
    turns = [
        Turn(tool_calls=[ToolCall("glob", {"pattern": "*.txt"}), ToolCall("grep", {"pattern": "needle"})]),
        Turn(text="Two odd files."),
        Turn(text="Yes."),
        Turn(text="Loaded."),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        run = await run_and_reload(
            server,
            project,
            sessions_dir,
            check,
            lambda editor, sid: editor.prompt(sid, "list them"),
            after_reload="still there?",
        )
    updates, replayed, bodies = run.updates, run.replayed, run.bodies
    assert_bodies_clean(bodies)
    results = [m["content"] for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert "caf\ufffd.txt" in results[0]  # glob
    assert "n\ufffdme.md" in results[1]  # grep: the name, and the line that is not UTF-8 either
    final = [u for u in updates if u.get("status") == "completed"]
    assert len(final) == 2
    assert [u["status"] for u in replayed if u["sessionUpdate"] == "tool_call"] == ["completed", "completed"]


async def test_command_output_that_is_not_utf8(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([[call(1, "run_command", command="printf 'caf\\377\\n'")], text("Odd."), text("ok")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        assert (await editor.prompt(sid, "run it"))["stopReason"] == "end_turn"
        assert (await editor.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    assert_requests_clean(model)
    result = next(m["content"] for m in model.requests[1].messages if m["role"] == "tool")
    assert "caf\ufffd" in result


class OddTool(BaseTool):
    """A tool (custom, or an MCP server's) whose output, title and raw output hold lone surrogates."""

    name = "odd"
    description = "Says something odd."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}

    def title(self, args: dict[str, Any]) -> str:
        return "Odd \udcff"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        async def execute() -> ToolResult:
            shown: Any = [{"type": "content", "content": {"type": "text", "text": "shown \ud83d"}}]
            return ToolResult("half \ud83d and caf\udcff", content=shown, raw_output={"k\udcff": "v\ud83d"})

        return Plan(title="Odd \ude00", execute=execute)


async def test_tool_output_with_lone_surrogates(project: Path, sessions_dir: Path, check: Any) -> None:
    model = ScriptedModel([[call(1, "odd")], text("Odd indeed."), text("ok"), text("loaded")])
    tools = lambda: [*default_tools(), OddTool()]  # noqa: E731
    async with agent(settings(sessions_dir, model, tools=tools), check) as editor:
        sid = await editor.new_session(str(project))
        assert (await editor.prompt(sid, "be odd"))["stopReason"] == "end_turn"
        assert (await editor.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    async with agent(settings(sessions_dir, model, tools=tools), check) as editor:
        replayed = await load(editor, sid, project)
        assert (await editor.prompt(sid, "still?"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    assert_requests_clean(model)
    result = next(m["content"] for m in model.requests[-1].messages if m["role"] == "tool")
    assert result == "half \ufffd and caf\ufffd"
    shown = next(u for u in replayed if u["sessionUpdate"] == "tool_call")
    assert shown["rawOutput"] == {"k\ufffd": "v\ufffd"}


async def test_a_note_of_changed_files_with_odd_names() -> None:
    model = ScriptedModel([text("noted")])
    history = Conversation()

    async def send(update: dict[str, Any]) -> None:
        pass

    turn = PromptTurn(model=model, history=history, send_update=send, changed_files=lambda: ["/p/caf\udcff.txt"])
    assert await turn.run({"role": "user", "content": "go \ud83d"}) == "end_turn"
    assert_requests_clean(model)
    assert "/p/caf\ufffd.txt" in model.requests[0].messages[1]["content"]


# -- the model's stream ------------------------------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def arguments(piece: str, *, first: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
    if first:
        entry.update(id="call_e", type="function", function={"name": "write_file", "arguments": piece})
    return chunk({"tool_calls": [entry]})


async def test_a_stream_that_splits_surrogate_pairs(project: Path, sessions_dir: Path, check: Any) -> None:
    split = [  # each half its own escape, in its own chunk, as some servers stream byte-level tokens
        chunk({"role": "assistant", "reasoning_content": "think \ud83c"}),
        chunk({"reasoning_content": "\udf89 done"}),
        chunk({"content": "Hi \ud83d"}),
        chunk({"content": "\ude00 there \ud83d"}),
        arguments('{"path": "e.txt", "content": "\ud83d', first=True),
        arguments('\ude00 and \ud83d"}'),
        chunk({}, "tool_calls"),
    ]
    turns = [Turn(raw_chunks=split), Turn(text=["Wrote ", "it \ud83d"]), Turn(text="Next."), Turn(text="Loaded.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        run = await run_and_reload(
            server, project, sessions_dir, check, lambda editor, sid: editor.prompt(sid, "go"), mode="accept-edits"
        )
    updates, replayed, bodies = run.updates, run.replayed, run.bodies
    assert said(updates) == "Hi 😀 there \ufffdWrote it \ufffdNext."
    assert said(updates, "agent_thought_chunk") == "think 🎉 done"
    assert (project / "e.txt").read_text(encoding="utf-8") == "😀 and \ufffd"
    assert_bodies_clean(bodies)
    assistant = bodies[1]["messages"][2]
    assert assistant["content"] == "Hi 😀 there \ufffd"
    written = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert written == {"path": "e.txt", "content": "😀 and \ufffd"}
    assert said(replayed).startswith("Hi 😀 there \ufffd")


async def test_a_model_that_writes_a_lone_surrogate_escape(project: Path, sessions_dir: Path, check: Any) -> None:
    # Valid JSON arguments whose string holds a lone surrogate: no file can hold it, the model is told.
    bad = ToolCallRequest("c1", "write_file", '{"path": "f.txt", "content": "a\\ud83db"}')
    model = ScriptedModel([[bad], text("I see."), text("ok")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "accept-edits"})
        assert (await editor.prompt(sid, "write"))["stopReason"] == "end_turn"
        assert (await editor.prompt(sid, "next"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    assert_requests_clean(model)
    result = next(m["content"] for m in model.requests[1].messages if m["role"] == "tool")
    assert "unpaired surrogate" in result
    assert not (project / "f.txt").exists()


async def test_the_adapter_cleans_a_request_that_cannot_be_encoded(caplog: pytest.LogCaptureFixture) -> None:
    # The last net: a lone surrogate that got past the boundaries (here a tool's description) is sent
    # cleaned, with a warning, instead of failing this and every later request.
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi \ud83d"}],
        tools=[ToolSpec("t", "caf\udcff", {"type": "object", "description": "\ude00"})],
    )
    with ScriptedOpenAIServer([Turn(text="fine")], api_key=KEY) as server:
        async with openai_model(server) as (model, _):
            events = [event async for event in model.stream(request)]
        bodies = [r.body for r in server.chat_requests]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fine"]
    assert_bodies_clean(bodies)
    assert bodies[0]["messages"] == [{"role": "user", "content": "hi \ufffd"}]
    assert bodies[0]["tools"][0]["function"]["description"] == "caf\ufffd"
    assert "lone surrogate" in caplog.text


# -- records -------------------------------------------------------------------------------------------


def test_a_record_with_a_lone_surrogate_is_written_and_reads_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog(path, "s", create=True)
    log.append({"kind": "session", "sessionId": "s", "cwd": "/p", "additionalDirectories": [], "createdAt": ""})
    change = {"kind": "change", "turn": 1, "path": "/p/caf\udcff.txt", "before": "é", "after": "ü"}
    log.append(change)
    log.append({"kind": "message", "message": {"role": "user", "content": "日本"}})
    log.close()
    lines = path.read_bytes().splitlines()
    assert lines[1].isascii()  # that one record as ASCII JSON: the surrogate as its escape
    assert "日本".encode() in lines[2]  # the others as before
    stored = read_records(path)
    assert stored is not None
    assert stored.changes == [change]  # the exact name: /undo restores that file, not another


async def test_undo_after_reload_restores_a_file_whose_name_is_not_utf8(
    project: Path, sessions_dir: Path, check: Any
) -> None:
    odd = not_utf8(project, b"caf\xff.txt", b"old\n")
    before = odd.read_bytes()
    # A model can name the file: the escape in its arguments is plain ASCII text until they are parsed.
    write = ToolCallRequest("c1", "write_file", '{"path": "caf\\udcff.txt", "content": "new\\n"}')
    model = ScriptedModel([[write], text("Done.")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "accept-edits"})
        assert (await editor.prompt(sid, "overwrite"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    assert odd.read_bytes() == b"new\n"
    async with agent(settings(sessions_dir, ScriptedModel()), check) as editor:
        await load(editor, sid, project)
        assert (await editor.prompt(sid, "/undo"))["stopReason"] == "end_turn"
        assert "Restored 1 file to its state" in editor.text(sid)
        assert_wire_clean(editor)
    assert odd.read_bytes() == before


async def test_a_replay_written_before_the_fix_loads_clean(project: Path, sessions_dir: Path, check: Any) -> None:
    # An older agent wrote lone surrogates into the replay file as escapes (ASCII, so they were kept).
    async with agent(settings(sessions_dir, ScriptedModel([text("first")])), check) as editor:
        sid = await editor.new_session(str(project))
        assert (await editor.prompt(sid, "hi"))["stopReason"] == "end_turn"
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old \ud83d"}}
    old = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": update}}
    with (sessions_dir / f"{sid}.replay").open("ab") as replay:
        replay.write(json.dumps(old, separators=(",", ":")).encode("ascii") + b"\n")
    async with agent(settings(sessions_dir, ScriptedModel([text("ok")])), check) as editor:
        replayed = await load(editor, sid, project)
        assert (await editor.prompt(sid, "again"))["stopReason"] == "end_turn"
        assert_wire_clean(editor)
    assert said(replayed) == "firstold \ufffd"


def test_conversation_cleans_every_message_it_takes() -> None:
    history = Conversation([{"role": "user", "content": "a\ud83d"}])
    history.append({"role": "tool", "tool_call_id": "c\udcff", "content": "x\ud83d\ude00"})
    assert list(history) == [
        {"role": "user", "content": "a\ufffd"},
        {"role": "tool", "tool_call_id": "c\ufffd", "content": "x😀"},
    ]
    history.replace([{"role": "user", "content": "\ude00"}])
    assert list(history) == [{"role": "user", "content": "\ufffd"}]
    history.restore([{"role": "user", "content": "\udcff"}])
    assert list(history) == [{"role": "user", "content": "\ufffd"}]


def test_stream_joiner_and_clean() -> None:
    joiner = StreamJoiner()
    pieces = [joiner.feed(p) for p in ["a\ud83d", "\ude00b\ud83d", "c", "\ud83d"]]
    assert [*pieces, joiner.flush()] == ["a", "😀b", "\ufffdc", "", "\ufffd"]
    value = {"k": ["ok", 1, None, {"x": "é"}]}
    assert clean(value) is value  # nothing to clean: not even copied


# -- huge things stay bounded --------------------------------------------------------------------------------


def big_content() -> str:
    line = "0123456789abcdefghijklmnopqrstuvwxyz 0123456789abcdefghijklmnopqrstuvwxyz\n"
    return line * (20_000_000 // len(line))


def message_sizes(editor: Editor) -> Iterator[int]:
    """The size of each message the agent sent, as it was on the wire (compact JSON)."""
    for sender, message in editor.transcript.messages:
        if sender == "agent":
            yield len(json.dumps(message, separators=(",", ":")))


@pytest.mark.slow
def directory_size(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.iterdir())


async def test_a_20_mb_write_stays_bounded_and_undoable(project: Path, sessions_dir: Path, check: Any) -> None:
    content = big_content()
    assert len(content) > 19_900_000
    target = project / "big.txt"
    target.write_text("old\n")
    model = ScriptedModel([[call(1, "write_file", path="big.txt", content=content)], text("Written."), text("ok")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        assert await editor.prompt(sid, "write it") == {"stopReason": "end_turn"}  # asks, and is allowed
        assert max(message_sizes(editor)) < MESSAGE_CAP
        updates = editor.updates(sid)
        asked = editor.client.permission_requests[0]["toolCall"]
    assert target.read_text() == content  # the change itself is whole

    announced = next(u for u in updates if u["sessionUpdate"] == "tool_call")
    assert announced["rawInput"]["path"] == "big.txt"
    assert announced["rawInput"]["content"].endswith(f"… [{len(content) - 4096:,} more characters not shown]")
    assert asked["rawInput"] == announced["rawInput"]
    summary = asked["content"][0]["content"]["text"]
    assert summary.startswith(f"Large change to {target}, not shown as a diff: before, 1 lines, 4 bytes; after, ")
    assert f"{len(content):,} bytes" in summary
    # The model's next request carries its own call cut, not 20 MB again (and so does the record).
    kept = model.requests[1].messages[2]["tool_calls"][0]["function"]["arguments"]
    assert len(kept) < 2 * 100_000
    assert json.loads(kept)["content"].startswith(content[:1000])

    replay = sessions_dir / f"{sid}.replay"
    records = (sessions_dir / f"{sid}.jsonl").read_bytes().splitlines()
    assert replay.stat().st_size < MESSAGE_CAP
    assert max(len(line) for line in records) < MESSAGE_CAP
    # /undo needs the text before ("old") whole, and recognises the 20 MB after by its digest.
    assert directory_size(sessions_dir) < 3 * MESSAGE_CAP

    async with agent(settings(sessions_dir, ScriptedModel([text("hello")])), check) as editor:
        replayed = await load(editor, sid, project)
        assert len(replayed) < 20
        assert (await editor.prompt(sid, "/undo"))["stopReason"] == "end_turn"
        assert "Restored 1 file to its state" in editor.text(sid)
        assert (await editor.prompt(sid, "and now?"))["stopReason"] == "end_turn"
        assert max(message_sizes(editor)) < MESSAGE_CAP
    assert target.read_text() == "old\n"


async def test_a_large_write_changed_since_is_not_undone(project: Path, sessions_dir: Path, check: Any) -> None:
    """The digest /undo keeps of a large text recognises only that text: a file edited since is kept."""
    content = "line\n" * 400_000  # 2 MB: over the size kept whole in the change record
    target = project / "big.txt"
    target.write_text("old\n")
    model = ScriptedModel([[call(1, "write_file", path="big.txt", content=content)], text("Written.")])
    async with agent(settings(sessions_dir, model), check) as editor:
        sid = await editor.new_session(str(project))
        assert (await editor.prompt(sid, "write it"))["stopReason"] == "end_turn"
        target.write_text(content + "the user's own line\n")
        assert (await editor.prompt(sid, "/undo"))["stopReason"] == "end_turn"
        assert "Undo refused" in editor.text(sid)
    assert target.read_text().endswith("the user's own line\n")


def test_bounded_content_keeps_what_fits_and_summarises_the_rest() -> None:
    small: Any = {"type": "diff", "path": "/p/a", "oldText": "a\n", "newText": "b\n"}
    huge: Any = {"type": "diff", "path": "/p/b", "oldText": None, "newText": "x\n" * MAX_CONTENT_BYTES}
    text_block: Any = {"type": "content", "content": {"type": "text", "text": "é" * MAX_CONTENT_BYTES}}
    image: Any = {"type": "content", "content": {"type": "image", "mimeType": "image/png", "data": "A" * (2 << 20)}}
    terminal: Any = {"type": "terminal", "terminalId": "t1"}
    assert bounded_content([small, terminal]) == [small, terminal]
    shown = bounded_content([small, huge, text_block, image, terminal])
    assert shown[0] == small
    assert shown[1]["content"]["text"] == (
        f"Large change to /p/b, not shown as a diff: before, no file; after, {MAX_CONTENT_BYTES:,} lines, "
        f"{2 * MAX_CONTENT_BYTES:,} bytes."
    )
    cut_text = shown[2]["content"]["text"]
    assert cut_text.startswith("éé")
    assert cut_text.endswith("more characters not shown]")
    assert shown[3]["content"] == {"type": "text", "text": "[image (image/png) content not shown: too large]"}
    assert shown[4] == terminal
    assert len(json.dumps(shown, separators=(",", ":"))) < MAX_CONTENT_BYTES + 1024


def test_bounded_raw() -> None:
    small = {"path": "a", "content": "x" * 100}
    assert bounded_raw(small) is small
    cut_raw = bounded_raw({"path": "a", "content": "x" * 100_000})
    assert cut_raw == {"path": "a", "content": "x" * 4096 + f"… [{100_000 - 4096:,} more characters not shown]"}
    many = bounded_raw({"items": ["y" * 5000] * 100})
    assert isinstance(many, str)
    assert many.startswith("[not shown: ")
    assert bounded_raw(None) is None


def test_kept_arguments_and_results_for_the_model() -> None:
    normal = json.dumps({"path": "a", "content": "x" * 500_000})
    assert kept_arguments(normal) is normal
    huge = json.dumps({"path": "a", "content": "x" * (2 * MAX_KEPT_ARGUMENTS)})
    kept = json.loads(kept_arguments(huge))
    assert kept["path"] == "a"
    assert kept["content"] == shorten("x" * (2 * MAX_KEPT_ARGUMENTS), 100_000)
    many = json.dumps({"items": ["y" * 200_000] * 20})
    assert json.loads(kept_arguments(many)) == {"omitted": f"{len(many):,} characters of arguments, too long to keep"}
    broken = "{" + "z" * (2 * MAX_KEPT_ARGUMENTS)
    assert len(kept_arguments(broken)) < MAX_KEPT_ARGUMENTS + 100
    output = "h" * MAX_RESULT_CHARS + "t" * 10
    shown = for_model(output)
    assert shown.startswith("h" * 1000)
    assert shown.endswith("t" * 10)
    assert "characters omitted" in shown
    assert for_model("short") == "short"
