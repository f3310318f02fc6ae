"""What loading and listing saved sessions cost, next to simply reading the same files' bytes, in one run.

load: a session of 2,000 visible updates (what ``session/load`` replays), written the way the agent
writes it (the :class:`~refagent.persistence.recorder.Recorder` and
:class:`~refagent.persistence.conversation.Conversation` on a :class:`~refagent.persistence.store.SessionStore`
log): per turn a prompt, a thought and messages streamed in small
chunks, a ``read_file`` call with the file's text, an ``edit_file`` call with its diff (whole file before
and after, as preview and as result), a plan, the model-facing messages and the ``/undo`` checkpoints.
A session is two files (:mod:`refagent.persistence.records`): its records, and its replay file. Measured each on a
fresh agent (a restart) or a fresh store:

- ``session/load`` over the agent's :class:`~refagent.acp.connection.Connection`, as a stdio agent
  serves it: from the request line read to the response written, the notifications and the response
  written as bytes to a sink. This is the agent's cost, and the one the target is for;
- ``session/load`` over the in-memory editor (:func:`refagent.testing.memory.connect`): the same plus
  the fake editor's side, which decodes every line twice (its transcript and its connection);
- ``SessionStore.load`` alone (the replay file read whole, the record file's first record and its last
  ``meta`` and ``hold`` read from its end), and :meth:`~refagent.persistence.reader.StoredSession.model_state` (the
  conversation and the ``/undo`` records: not part of a load; parsed in a worker thread when the first
  prompt or slash command needs them, which it waits for);
- ``json.loads`` of each line of the record file: what a load that parsed every record would cost at
  least;

next to reading the session's two files' bytes (and, for scale, the record file's alone). Target: load
within 5x of the raw read.

list: 1,000 sessions of a few turns each. ``session/list`` over the in-memory editor, all 20 pages of 50
through the cursor, on a fresh agent; the first page alone; and the store's list with its index removed
(rebuilt from the record files), next to reading the 1,000 session files' bytes. Target: within 3x.

Runs are interleaved (drift on the machine hits all alike); medians of ``--repeats``.

    .venv/bin/python benchmarks/sessions.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio

from refagent.acp import updates
from refagent.acp.connection import Connection
from refagent.llm.scripted import ScriptedModel
from refagent.persistence.conversation import Conversation
from refagent.persistence.recorder import VISIBLE, Recorder, replay
from refagent.persistence.store import SessionStore
from refagent.server.agent import Agent, Settings
from refagent.testing.memory import connect

LOAD_UPDATES = 2_000
LIST_SESSIONS = 1_000
LOAD_TARGET = 5.0
LIST_TARGET = 3.0

CODE = "".join(
    f"def function_{n}(value: int) -> int:\n    '''Return value plus {n}.'''\n    return value + {n}\n\n"
    for n in range(40)
)
PROSE = (
    "I looked at the failing test and the function it calls. The loop stops one element early, so the "
    "last item is never counted; the fix is to iterate over the whole range and add a regression test. "
)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def write_session(store: SessionStore, session_id: str, cwd: str, visible: int) -> int:
    """Write a session with ``visible`` replayable updates; return how many updates were sent live."""
    log = store.create(session_id, cwd, [])
    recorder = Recorder(session_id, log)
    history = Conversation([], log)
    sent = 0
    shown = 0
    turn = 0

    def show(*live: dict[str, Any]) -> bool:
        """Record the live updates of one replayed update; False once there are enough."""
        nonlocal sent, shown
        for update in live:
            recorder.record(update)
        recorder.flush()
        sent += len(live)
        shown += 1
        return shown < visible

    while True:
        turn += 1
        path = f"{cwd}/src/module_{turn % 17}.py"
        before = CODE.replace("value + 3", f"value + {turn}")
        after = before.replace("value + 7", f"value - {turn}")
        diff = {"type": "diff", "path": path, "oldText": before, "newText": after}
        numbered = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(before.splitlines(), 1))
        prompt = f"Turn {turn}: the tests in tests/test_module_{turn % 17}.py fail; please fix the function."
        history.append({"role": "user", "content": prompt})
        read_id, edit_id = f"call_r{turn}", f"call_e{turn}"
        steps = [
            [updates.user_message_chunk(updates.text(prompt), f"user_{turn}")],
            [updates.agent_thought_chunk(updates.text(p), f"thought_{turn}") for p in pieces(PROSE * 2, 12)],
            [updates.agent_message_chunk(updates.text(p), f"msg_{turn}a") for p in pieces(PROSE, 8)],
            [
                updates.tool_call(read_id, f"Read {path}", "read", raw_input={"path": path}),
                updates.tool_call_update(read_id, locations=[{"path": path, "line": 1}]),
                updates.tool_call_update(read_id, status="in_progress"),
                updates.tool_call_update(
                    read_id,
                    status="completed",
                    content=[{"type": "content", "content": updates.text(numbered)}],
                    locations=[{"path": path, "line": 1}],
                    raw_output={"path": path, "first_line": 1, "last_line": numbered.count("\n") + 1},
                ),
            ],
            [
                updates.tool_call(edit_id, f"Edit {path}", "edit", raw_input={"path": path, "old_string": "x"}),
                updates.tool_call_update(edit_id, content=[diff], locations=[{"path": path}]),
                updates.tool_call_update(edit_id, status="in_progress"),
                updates.tool_call_update(
                    edit_id,
                    status="completed",
                    content=[diff],
                    locations=[{"path": path, "line": 3}],
                    raw_output={"path": path, "replacements": 1, "created": False},
                ),
            ],
            [
                updates.plan(
                    [
                        {"content": "Find the bug", "status": "completed", "priority": "high"},
                        {"content": f"Fix module {turn % 17}", "status": "completed", "priority": "high"},
                        {"content": "Run the tests", "status": "in_progress", "priority": "medium"},
                    ]
                )
            ],
            [updates.agent_message_chunk(updates.text(p), f"msg_{turn}b") for p in pieces(PROSE * 3, 8)],
        ]
        for step in steps:
            if not show(*step):
                log.close()
                return sent
            if step[0]["sessionUpdate"] == "tool_call":
                calls = [
                    {"id": step[0]["toolCallId"], "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
                history.append({"role": "assistant", "content": PROSE, "tool_calls": calls})
                result = numbered if step[0]["kind"] == "read" else f"Edited {path}: 1 replacement."
                history.append({"role": "tool", "tool_call_id": step[0]["toolCallId"], "content": result})
                if step[0]["kind"] == "edit":
                    log.append({"kind": "change", "turn": turn, "path": path, "before": before, "after": after})
        history.append({"role": "assistant", "content": PROSE * 3})
        recorder.settle()
        stamp = f"2026-01-01T00:{turn // 60 % 60:02}:{turn % 60:02}.000Z"
        log.append(
            {
                "kind": "meta",
                "title": "Fix the tests",
                "modeId": "ask",
                "profileId": "default",
                "updatedAt": stamp,
                "turns": turn,
            }
        )


def settings(root: Path) -> Settings:
    model = ScriptedModel()
    return Settings(make_model=lambda profile: model, store=lambda: SessionStore(root))


async def load_over_editor(root: Path, session_id: str, cwd: str) -> tuple[float, int]:
    async with connect(settings(root)) as editor:
        await editor.initialize()
        start = time.perf_counter()
        await editor.request("session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []})
        elapsed = time.perf_counter() - start
        return elapsed, sum(u["sessionUpdate"] in VISIBLE for u in editor.updates(session_id))


async def load_over_connection(root: Path, session_id: str, cwd: str) -> tuple[float, int]:
    """``session/load`` as a stdio agent serves it: its :class:`Connection` reads the request line and
    writes the notifications and the response as bytes (here to nowhere: no client decodes them)."""
    to_agent, from_client = anyio.create_memory_object_stream[bytes](16)
    answered = {0: anyio.Event(), 1: anyio.Event()}
    replayed = 0

    async def lines() -> AsyncIterator[bytes]:
        async with from_client:
            async for line in from_client:
                yield line

    async def write(data: bytes) -> None:  # as little work as a pipe's: count, and watch for the answers
        nonlocal replayed
        for msg_id, event in answered.items():
            if event.is_set():
                continue
            end = data.find(b'{"jsonrpc":"2.0","id":%d,' % msg_id)
            if msg_id == 1:  # the notifications before the load's response
                replayed += data.count(b'{"jsonrpc":"2.0","method":"session/update"', 0, len(data) if end < 0 else end)
            if end >= 0:
                event.set()

    def request(msg_id: int, method: str, params: dict[str, Any]) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()

    connection = Connection(lines(), write)
    async with Agent(connection, settings(root)) as agent, anyio.create_task_group() as tg:
        tg.start_soon(connection.serve, agent)
        await to_agent.send(request(0, "initialize", {"protocolVersion": 1}))
        await answered[0].wait()
        start = time.perf_counter()
        await to_agent.send(request(1, "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}))
        await answered[1].wait()
        elapsed = time.perf_counter() - start
        await to_agent.aclose()
    return elapsed, replayed


async def list_over_editor(root: Path, pages: int | None) -> tuple[float, int]:
    async with connect(settings(root)) as editor:
        await editor.initialize()
        listed = 0
        cursor: str | None = None
        start = time.perf_counter()
        for _ in range(pages or 10**9):
            result = await editor.request("session/list", {"cursor": cursor} if cursor else {})
            listed += len(result["sessions"])
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        return time.perf_counter() - start, listed


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def read_bytes(paths: list[Path]) -> None:
    for path in paths:
        path.read_bytes()


def report(title: str, base_name: str, base: list[float], rows: dict[str, list[float]], target: float) -> None:
    base_s = statistics.median(base)
    print(f"  {base_name:<46} {base_s * 1000:>9.2f} ms   1.00x")
    for name, values in rows.items():
        median = statistics.median(values)
        mark = f"   (target {target:g}x)" if name == title else ""
        print(f"  {name:<46} {median * 1000:>9.2f} ms {median / base_s:>6.2f}x{mark}")


async def bench_load(temp: Path, repeats: int) -> None:
    root = temp / "load"
    cwd = str(temp / "project")
    await anyio.Path(cwd).mkdir()
    store = SessionStore(root)
    sent = write_session(store, "sess_big", cwd, LOAD_UPDATES)
    records, replay_file = root / "sess_big.jsonl", root / "sess_big.replay"
    stored = SessionStore(root).load("sess_big")
    assert stored is not None
    assert not stored.held
    shown = [json.loads(line)["params"]["update"] for line in stored.shown.splitlines()]
    assert len(shown) == LOAD_UPDATES, len(shown)
    assert replay(shown) == shown  # already folded: each message whole, each tool call once
    print(
        f"load: {len(shown):,} replayed updates ({sent:,} sent live, {len(stored.messages):,} model messages); "
        f"record file {records.stat().st_size / 1e6:.1f} MB, replay file {replay_file.stat().st_size / 1e6:.1f} MB;"
        f" median of {repeats}"
    )
    names = {
        "connection": "session/load over the agent's Connection",
        "editor": "session/load over the in-memory editor",
        "records": "read the record file alone",
        "store": "SessionStore.load alone",
        "model": "model_state() (paid by the first prompt)",
        "parse": "json.loads of each record (a full parse)",
    }
    times: dict[str, list[float]] = {key: [] for key in ["raw", *names]}
    await load_over_editor(root, "sess_big", cwd)  # warm up: imports, page cache
    for _ in range(repeats):
        times["raw"].append(timed(lambda: read_bytes([records, replay_file])))
        times["records"].append(timed(records.read_bytes))
        elapsed, count = await load_over_editor(root, "sess_big", cwd)
        assert count == LOAD_UPDATES, count
        times["editor"].append(elapsed)
        elapsed, count = await load_over_connection(root, "sess_big", cwd)
        assert count == LOAD_UPDATES, count
        times["connection"].append(elapsed)
        times["store"].append(timed(lambda: SessionStore(root).load("sess_big")))
        fresh = SessionStore(root).load("sess_big")
        assert fresh is not None
        times["model"].append(timed(fresh.model_state))
        times["parse"].append(timed(lambda: [json.loads(line) for line in records.read_bytes().split(b"\n") if line]))
    report(
        names["connection"],
        "read the session's two files' bytes",
        times["raw"],
        {names[k]: times[k] for k in names},
        LOAD_TARGET,
    )


async def bench_list(temp: Path, repeats: int) -> None:
    root = temp / "list"
    store = SessionStore(root)
    for n in range(LIST_SESSIONS):
        cwd = f"/work/project-{n % 7}"
        write_session(store, f"sess_{n:04}", cwd, 14)
        store.touch(
            f"sess_{n:04}", title=f"Fix the tests of module {n}", updated_at=f"2026-01-{1 + n % 28:02}T00:00:00.000Z"
        )
    paths = sorted(root.glob("*.jsonl"))
    assert len(paths) == LIST_SESSIONS
    size = sum(p.stat().st_size for p in paths)
    print(f"list: {LIST_SESSIONS:,} sessions, {size / 1e6:.1f} MB of record files; median of {repeats}")
    names = {
        "all": "session/list, all 20 pages (editor, new agent)",
        "first": "session/list, first page (editor, new agent)",
        "store": "SessionStore.list, all pages (new store)",
        "rebuild": "SessionStore.list, first page, index rebuilt",
    }
    times: dict[str, list[float]] = {key: [] for key in ["raw", *names]}

    def store_all_pages() -> None:
        fresh = SessionStore(root)
        cursor: str | None = None
        while True:
            _, cursor = fresh.list(cursor=cursor)
            if cursor is None:
                return

    def rebuilt_first_page() -> None:
        (root / "index.json").unlink()
        SessionStore(root).list()

    await list_over_editor(root, None)  # warm up
    for _ in range(repeats):
        times["raw"].append(timed(lambda: read_bytes(paths)))
        elapsed, count = await list_over_editor(root, None)
        assert count == LIST_SESSIONS, count
        times["all"].append(elapsed)
        elapsed, count = await list_over_editor(root, 1)
        assert count == 50, count
        times["first"].append(elapsed)
        times["store"].append(timed(store_all_pages))
        times["rebuild"].append(timed(rebuilt_first_page))
    report(
        names["all"],
        f"read the {LIST_SESSIONS:,} files' bytes",
        times["raw"],
        {names[k]: times[k] for k in names},
        LIST_TARGET,
    )


async def main(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as temp:
        base = Path(await anyio.Path(temp).resolve())
        await bench_load(base, repeats)
        print()
        await bench_list(base, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    anyio.run(main, parser.parse_args().repeats)
