"""The session store on disk: record files flushed per event, loads that survive crashes and corruption,
the index (rebuilt when broken, kept in step with the files), and listing with opaque cursors. Also the
recorder that writes the visible history and :func:`replay`, which folds it for ``session/load``."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from refagent.acp import updates
from refagent.acp.errors import InvalidParams
from refagent.acp.text import one_line
from refagent.persistence.conversation import STOPPED_RESULT, Conversation
from refagent.persistence.reader import StoredSession, fold
from refagent.persistence.recorder import FLUSH_SECONDS, Recorder, load, replay
from refagent.persistence.records import replay_line
from refagent.persistence.store import PAGE_SIZE, SessionStore

CWD = "/work/project"


def lines(path: Path) -> list[dict[str, Any]]:
    """The complete records of a file as it is on disk now (a partial last line is left out)."""
    text = path.read_bytes().decode()
    return [json.loads(line) for line in text.split("\n")[:-1]]


def new_store(root: Path) -> SessionStore:
    """A fresh store on ``root``: what a new agent process sees."""
    return SessionStore(root)


def make(store: SessionStore, session_id: str, *, cwd: str = CWD, stamp: str | None = None, **meta: Any) -> None:
    log = store.create(session_id, cwd, [])
    if meta:
        log.append({"kind": "meta", **meta})
    log.close()
    if stamp is not None or "title" in meta:
        store.touch(session_id, title=meta.get("title"), updated_at=stamp)


def ids(page: list[dict[str, Any]]) -> list[str]:
    return [info["sessionId"] for info in page]


# -- writing ----------------------------------------------------------------------------------------


def test_each_record_is_on_disk_as_soon_as_it_is_appended(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, ["/work/lib"])
    path = tmp_path / "s1.jsonl"
    assert [r["kind"] for r in lines(path)] == ["session"]
    log.append({"kind": "message", "message": {"role": "user", "content": "hi"}})
    assert lines(path)[-1] == {"kind": "message", "message": {"role": "user", "content": "hi"}}
    log.append({"kind": "meta", "title": "Greetings"})
    assert len(lines(path)) == 3  # still open, already readable by another process
    log.close()
    stored = store.load("s1")
    assert stored is not None
    assert stored.additional_directories == ["/work/lib"]
    assert stored.messages == [{"role": "user", "content": "hi"}]
    assert stored.title == "Greetings"


def test_sessions_are_private_to_their_user(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    store.create("s1", CWD, []).close()
    for path in (tmp_path / "sessions", tmp_path / "sessions" / "s1.jsonl", tmp_path / "sessions" / "index.json"):
        assert path.stat().st_mode & 0o077 == 0, path


def shown_file(path: Path) -> list[dict[str, Any]]:
    """The updates in a replay file (whole lines), checked to be this session's notifications."""
    notes = [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]
    assert all(n["method"] == "session/update" and set(n["params"]) == {"sessionId", "update"} for n in notes)
    return [n["params"]["update"] for n in notes]


def test_the_recorder_holds_what_follows_a_running_tool_call_until_it_ends(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    path, replay_path = tmp_path / "s1.jsonl", tmp_path / "s1.replay"
    recorder = Recorder("s1", log)
    recorder.record(updates.agent_message_chunk(updates.text("Hel"), "m1"))
    recorder.record(updates.agent_message_chunk(updates.text("lo"), "m1"))
    assert shown_file(replay_path) == []  # still streaming: one line per message, not per token
    recorder.record(updates.tool_call("c1", "Read a.txt", "read"))
    assert shown_file(replay_path) == [updates.agent_message_chunk(updates.text("Hello"), "m1")]
    recorder.record(updates.agent_thought_chunk(updates.text("hmm"), "t1"))
    recorder.record(updates.usage(10, 100))  # not part of the visible history
    recorder.flush()
    assert len(shown_file(replay_path)) == 1  # the call has not ended: it and what follows it are held
    assert [r["kind"] for r in lines(path)[1:]] == ["hold", "update", "update"]
    assert lines(path)[1] == {"kind": "hold", "replayed": replay_path.stat().st_size}
    recorder.record(updates.tool_call_update("c1", status="completed"))
    assert shown_file(replay_path)[1:] == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Read a.txt",
            "kind": "read",
            "status": "completed",
        },
        updates.agent_thought_chunk(updates.text("hmm"), "t1"),
    ]
    assert [r["kind"] for r in lines(path)[1:]] == ["hold", "update", "update", "update", "release"]


def test_parallel_tool_calls_are_shown_in_the_order_they_began(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    recorder = Recorder("s1", log)
    for update in [
        updates.tool_call("a", "A", "read"),
        updates.tool_call("b", "B", "read"),
        updates.tool_call_update("b", status="completed"),
        updates.agent_message_chunk(updates.text("between"), "m1"),
    ]:
        recorder.record(update)
    recorder.flush()
    assert shown_file(tmp_path / "s1.replay") == []  # b has ended, but a, before it, has not
    recorder.record(updates.tool_call_update("a", status="failed"))
    assert [(u.get("toolCallId"), u.get("status")) for u in shown_file(tmp_path / "s1.replay")] == [
        ("a", "failed"),
        ("b", "completed"),
        (None, None),
    ]


def test_the_end_of_a_turn_shows_calls_that_never_ended_as_they_are(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    recorder = Recorder("s1", log)
    recorder.record(updates.tool_call("a", "Run", "execute"))
    recorder.record(updates.tool_call_update("a", status="in_progress"))
    recorder.record(updates.agent_message_chunk(updates.text("cancelled"), "m1"))
    recorder.settle()
    assert [u["sessionUpdate"] for u in shown_file(tmp_path / "s1.replay")] == ["tool_call", "agent_message_chunk"]
    assert shown_file(tmp_path / "s1.replay")[0]["status"] == "in_progress"
    assert lines(tmp_path / "s1.jsonl")[-1] == {"kind": "release"}
    recorder.record(updates.tool_call_update("a", status="completed"))  # a late word on a call already shown
    assert shown_file(tmp_path / "s1.replay")[-1] == updates.tool_call_update("a", status="completed")
    stored = new_store(tmp_path).load("s1")
    assert stored is not None
    assert replay(stored.updates)[0]["status"] == "completed"


def test_a_message_that_streams_long_is_written_as_it_goes(tmp_path: Path) -> None:
    """A crash mid-message loses at most FLUSH_SECONDS of its text."""
    log = SessionStore(tmp_path).create("s1", CWD, [])
    now = [0.0]
    recorder = Recorder("s1", log, clock=lambda: now[0])
    for n in range(10):
        now[0] = n * FLUSH_SECONDS / 4
        recorder.record(updates.agent_message_chunk(updates.text(f"{n} "), "m1"))
    on_disk = [u["content"]["text"] for u in shown_file(tmp_path / "s1.replay")]
    assert on_disk == ["0 1 2 3 4 ", "5 6 7 8 9 "]
    now[0] += FLUSH_SECONDS / 4
    recorder.record(updates.agent_message_chunk(updates.text("end"), "m1"))
    recorder.flush()
    stored = SessionStore(tmp_path).load("s1")
    assert stored is not None
    assert replay(stored.updates) == [updates.agent_message_chunk(updates.text("0 1 2 3 4 5 6 7 8 9 end"), "m1")]


@pytest.mark.anyio
async def test_the_recorder_records_only_the_visible(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    recorder = Recorder("s1", log)
    shown = [
        updates.agent_message_chunk(updates.text("a"), "m1"),
        updates.usage(1, 2),
        updates.available_commands([]),
        updates.plan([{"content": "x", "status": "pending", "priority": "low"}]),
    ]
    for update in shown:
        recorder.record(update)
    recorder.flush()
    assert [u["sessionUpdate"] for u in shown_file(tmp_path / "s1.replay")] == ["agent_message_chunk", "plan"]


def test_a_long_message_is_written_in_parts_that_replay_as_one(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    recorder = Recorder("s1", log)
    chunk = "x" * 1000
    for _ in range(200):
        recorder.record(updates.agent_message_chunk(updates.text(chunk), "m1"))
    assert len(shown_file(tmp_path / "s1.replay")) >= 2  # the buffer does not grow without bound
    recorder.flush()
    stored = SessionStore(tmp_path).load("s1")
    assert stored is not None
    assert replay(stored.updates) == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk * 200}, "messageId": "m1"}
    ]


def test_the_conversation_records_messages_and_replacements(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    history = Conversation([], log)
    history.append({"role": "user", "content": "one"})
    history.append({"role": "assistant", "content": "two"})
    history.replace([{"role": "user", "content": "summary"}])
    history.append({"role": "user", "content": "three"})
    stored = store.load("s1")
    assert stored is not None
    assert stored.messages == [{"role": "user", "content": "summary"}, {"role": "user", "content": "three"}]
    assert stored.messages == list(history)


def test_after_close_records_still_reach_the_file_but_never_recreate_it(tmp_path: Path) -> None:
    """A turn cancelled by session/close writes its last records after the close; after session/delete
    those records must not start a new file without its session record."""
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    log.close()
    log.append({"kind": "meta", "title": "late"})
    assert lines(tmp_path / "s1.jsonl")[-1] == {"kind": "meta", "title": "late"}
    store.delete("s1")
    log.append({"kind": "meta", "title": "too late"})
    assert not (tmp_path / "s1.jsonl").exists()
    reopened = store.reopen("s1")  # a session deleted by another agent meanwhile
    reopened.append({"kind": "meta", "title": "nowhere"})
    reopened.close()
    assert not (tmp_path / "s1.jsonl").exists()
    assert store.list() == ([], None)


def test_a_full_disk_does_not_raise(tmp_path: Path) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    log.append({"kind": "meta", "title": object()})  # not JSON: logged, not raised
    (tmp_path / "s1.jsonl").unlink()
    (tmp_path / "s1.jsonl").mkdir()
    log.close()
    log.append({"kind": "meta", "title": "x"})


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\r", "\r\n", "\x0b"])
def test_text_with_line_separators_survives(tmp_path: Path, separator: str) -> None:
    """Records are one per ``\n``; other line breaks inside a text (pasted from a PDF, a web page, a
    Windows file) are part of it."""
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    text = f"first{separator}second"
    Conversation([], log).append({"role": "user", "content": text})
    recorder = Recorder("s1", log)
    recorder.record(updates.agent_message_chunk(updates.text(text), "m1"))
    recorder.settle()
    log.append({"kind": "meta", "title": text})
    log.close()
    stored = new_store(tmp_path).load("s1")
    assert stored is not None
    assert stored.messages == [{"role": "user", "content": text}]
    assert stored.updates[0]["content"]["text"] == text
    assert stored.title == text
    (tmp_path / "index.json").unlink()
    assert new_store(tmp_path).list()[0][0]["title"] == one_line(text)  # kept whole; listed as one visible line


# -- loading what a crash or a bug left -------------------------------------------------------------


def test_a_truncated_last_record_is_skipped(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    log.append({"kind": "message", "message": {"role": "user", "content": "kept"}})
    log.close()
    with (tmp_path / "s1.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"kind":"message","message":{"role":"assistant","cont')  # the crash cut it here
    stored = new_store(tmp_path).load("s1")
    assert stored is not None
    assert stored.messages == [{"role": "user", "content": "kept"}]


def test_appending_after_a_truncated_record_keeps_the_new_record(tmp_path: Path) -> None:
    """The reopened session's first record must not be glued to the partial line a crash left."""
    store = SessionStore(tmp_path)
    store.create("s1", CWD, []).close()
    with (tmp_path / "s1.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"kind":"message","mess')
    again = new_store(tmp_path)
    log = again.reopen("s1")
    log.append({"kind": "message", "message": {"role": "user", "content": "after the crash"}})
    log.close()
    stored = again.load("s1")
    assert stored is not None
    assert stored.messages == [{"role": "user", "content": "after the crash"}]


def test_corrupt_lines_are_skipped_and_the_rest_is_kept(tmp_path: Path) -> None:
    good = [
        {"kind": "session", "sessionId": "s1", "cwd": CWD, "createdAt": "2026-01-01T00:00:00.000Z"},
        {"kind": "message", "message": {"role": "user", "content": "one"}},
        {"kind": "message", "message": {"role": "assistant", "content": "two"}},
        {"kind": "meta", "title": "T"},
    ]
    text = "\n".join(
        [
            json.dumps(good[0]),
            "this is not json",
            json.dumps(good[1]),
            "[1, 2, 3]",
            '"a string"',
            "",
            json.dumps({"kind": "from-a-newer-agent", "x": 1}),
            json.dumps({"kind": "message", "message": "not an object"}),
            json.dumps(good[2]),
            "\x00\x00\x00",
            json.dumps(good[3]),
        ]
    )
    (tmp_path / "s1.jsonl").write_text(text + "\n", encoding="utf-8")
    stored = SessionStore(tmp_path).load("s1")
    assert stored is not None
    assert stored.messages == [good[1]["message"], good[2]["message"]]
    assert stored.title == "T"


def test_a_file_of_garbage_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Warnings go to stderr, which some editors read only after a failure: thousands of lines would fill
    the pipe and block the agent."""
    good = json.dumps({"kind": "session", "sessionId": "s1", "cwd": CWD})
    (tmp_path / "s1.jsonl").write_text(good + "\n" + "garbage\n" * 5000)
    with caplog.at_level(logging.WARNING, logger="refagent"):
        assert SessionStore(tmp_path).load("s1") is not None
    assert len(caplog.records) == 1
    assert "5000" in caplog.records[0].getMessage()


CORRUPT_FILES: dict[str, bytes] = {
    "garbage": b"\x89PNG\r\n\x1a\n\xff\xfe not a session at all",
    "empty": b"",
    "records-first": b'{"kind":"message","message":{"role":"user","content":"x"}}\n'
    b'{"kind":"session","sessionId":"records-first","cwd":"/work/project"}\n',
    "no-cwd": b'{"kind":"session","sessionId":"no-cwd"}\n',
    "not-objects": b"[1]\n[2]\n",
}


def test_corrupt_session_files_never_hide_the_others(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    make(store, "good-1", title="First")
    make(store, "good-2", title="Second")
    for name, data in CORRUPT_FILES.items():
        (tmp_path / f"{name}.jsonl").write_bytes(data)
    (tmp_path / "a-directory.jsonl").mkdir()
    (tmp_path / "index.json").unlink()  # force a rebuild from the files
    fresh = new_store(tmp_path)
    page, cursor = fresh.list()
    assert sorted(ids(page)) == ["good-1", "good-2"]
    assert cursor is None
    for name in [*CORRUPT_FILES, "a-directory"]:
        assert fresh.load(name) is None
    assert fresh.load("good-1") is not None


def test_records_before_the_session_record_make_the_file_unloadable(tmp_path: Path) -> None:
    lines_ = CORRUPT_FILES["records-first"].decode().splitlines()
    assert fold(lines_, "x") is None


@pytest.mark.parametrize(
    "index",
    [b"", b"{not json", b"[]", b'"text"', b'{"s1": "not an object", "s2": {"no": "cwd"}}', b"\xff\xfe\x00"],
    ids=["empty", "not-json", "array", "string", "bad-entries", "binary"],
)
def test_a_corrupt_index_is_rebuilt_from_the_files(tmp_path: Path, index: bytes) -> None:
    store = SessionStore(tmp_path)
    make(store, "s1", title="One", stamp="2026-01-01T00:00:01.000Z")
    make(store, "s2", title="Two", stamp="2026-01-01T00:00:02.000Z")
    (tmp_path / "index.json").write_bytes(index)
    page, _ = new_store(tmp_path).list()
    assert [(i["sessionId"], i.get("title")) for i in page] == [("s2", "Two"), ("s1", "One")]
    assert json.loads((tmp_path / "index.json").read_text())["s1"]["title"] == "One"  # and saved again


def test_a_missing_index_is_rebuilt_with_titles_and_times(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, ["/work/lib"])
    log.append({"kind": "meta", "title": "Fix the parser"})
    log.append({"kind": "meta", "updatedAt": "2030-01-01T00:00:00.000Z"})
    log.close()
    (tmp_path / "index.json").unlink()
    page, _ = new_store(tmp_path).list()
    assert page == [
        {
            "sessionId": "s1",
            "cwd": CWD,
            "additionalDirectories": ["/work/lib"],
            "title": "Fix the parser",
            "updatedAt": "2030-01-01T00:00:00.000Z",
            "archived": False,
        }
    ]
    assert (tmp_path / "index.json").exists()


def test_an_index_that_is_a_directory_does_not_stop_listing(tmp_path: Path) -> None:
    make(SessionStore(tmp_path), "s1")
    (tmp_path / "index.json").unlink()
    (tmp_path / "index.json").mkdir()
    store = new_store(tmp_path)
    assert ids(store.list()[0]) == ["s1"]
    make(store, "s2")  # writing the index fails: logged, not raised
    assert sorted(ids(store.list()[0])) == ["s1", "s2"]


def test_no_directory_yet_lists_nothing(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "not-created-yet")
    assert store.list() == ([], None)
    assert store.load("s1") is None
    store.delete("s1")


def test_two_agents_sharing_the_directory_both_see_their_sessions(tmp_path: Path) -> None:
    """Two editor windows run two agents on the same data directory: neither may drop the other's sessions
    from the index."""
    first, second = SessionStore(tmp_path), SessionStore(tmp_path)
    assert first.list() == ([], None)
    assert second.list() == ([], None)
    make(first, "from-first", title="A")
    make(second, "from-second", title="B")
    first.touch("from-first", title="A, renamed")
    for store in (first, second, new_store(tmp_path)):
        page, _ = store.list()
        assert sorted(ids(page)) == ["from-first", "from-second"]


def test_the_index_follows_files_it_does_not_know_and_files_that_are_gone(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    make(store, "s1")
    make(store, "s2")
    # a crash between writing a record file and the index, or another agent's race: a file not in the index
    (tmp_path / "s3.jsonl").write_text(json.dumps({"kind": "session", "sessionId": "s3", "cwd": CWD}) + "\n")
    # and a file removed by hand
    (tmp_path / "s1.jsonl").unlink()
    for listing in (store, new_store(tmp_path)):
        assert sorted(ids(listing.list()[0])) == ["s2", "s3"]


# -- listing ----------------------------------------------------------------------------------------


def test_list_is_newest_first_and_filters_by_cwd(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    make(store, "old", stamp="2026-01-01T00:00:00.000Z", title="Old")
    make(store, "elsewhere", cwd="/work/other", stamp="2026-01-02T00:00:00.000Z")
    make(store, "new", stamp="2026-01-03T00:00:00.000Z", title="New")
    make(store, "mid", stamp="2026-01-02T12:00:00.000Z")
    page, cursor = store.list()
    assert ids(page) == ["new", "mid", "elsewhere", "old"]
    assert cursor is None
    assert ids(store.list(cwd=CWD)[0]) == ["new", "mid", "old"]
    assert ids(store.list(cwd="/work/other")[0]) == ["elsewhere"]
    assert store.list(cwd="/nowhere") == ([], None)
    assert page[0] == {
        "sessionId": "new",
        "cwd": CWD,
        "title": "New",
        "updatedAt": "2026-01-03T00:00:00.000Z",
        "archived": False,
    }


def test_pages_cover_every_session_once(tmp_path: Path) -> None:
    for n in range(120):  # written as files, indexed at the first listing (quicker than 120 index updates)
        records = [
            {"kind": "session", "sessionId": f"s{n:03}", "cwd": CWD},
            {"kind": "meta", "updatedAt": f"2026-01-01T00:{n // 60:02}:{n % 60:02}.000Z"},
        ]
        (tmp_path / f"s{n:03}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store = SessionStore(tmp_path)
    seen: list[str] = []
    sizes = []
    cursor: str | None = None
    while True:
        page, cursor = store.list(cursor=cursor)
        sizes.append(len(page))
        seen += ids(page)
        if cursor is None:
            break
        if len(sizes) == 1:  # a session added between pages goes to the front, not into a later page
            make(store, "added-meanwhile", stamp="2027-01-01T00:00:00.000Z")
    assert PAGE_SIZE == 50
    assert sizes == [50, 50, 20]
    assert seen == [f"s{n:03}" for n in reversed(range(120))]  # newest first, no gaps, no duplicates
    assert ids(store.list()[0])[0] == "added-meanwhile"


def test_pages_over_sessions_with_the_same_time(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    for n in range(7):
        make(store, f"s{n}", stamp="2026-01-01T00:00:00.000Z")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = store.list(cursor=cursor, page_size=3)
        seen += ids(page)
        if cursor is None:
            break
    assert sorted(seen) == [f"s{n}" for n in range(7)]
    assert len(seen) == 7


def test_a_cursor_keeps_working_in_a_new_agent_and_with_the_filter(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    for n in range(6):
        make(store, f"s{n}", cwd=CWD if n % 2 else "/work/other", stamp=f"2026-01-01T00:00:0{n}.000Z")
    page, cursor = store.list(cwd=CWD, page_size=2)
    assert ids(page) == ["s5", "s3"]
    assert cursor is not None
    assert new_store(tmp_path).list(cwd=CWD, cursor=cursor, page_size=2) == (
        [info for info in store.list(cwd=CWD)[0] if info["sessionId"] == "s1"],
        None,
    )


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not a cursor!",
        "%%%",
        "é",
        base64.urlsafe_b64encode(b"null").decode(),
        base64.urlsafe_b64encode(b'["only one"]').decode(),
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_an_invalid_cursor_is_invalid_params(tmp_path: Path, cursor: str) -> None:
    store = SessionStore(tmp_path)
    make(store, "s1")
    with pytest.raises(InvalidParams) as caught:
        store.list(cursor=cursor)
    assert caught.value.code == -32602


# -- deleting ---------------------------------------------------------------------------------------


def test_delete_removes_the_file_and_the_entry(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    make(store, "s1")
    make(store, "s2")
    store.delete("s1")
    assert not (tmp_path / "s1.jsonl").exists()
    assert ids(store.list()[0]) == ["s2"]
    assert ids(new_store(tmp_path).list()[0]) == ["s2"]
    assert store.load("s1") is None


@pytest.mark.parametrize("session_id", ["never-existed", "../index", "", "a/b", "x" * 500, "index"])
def test_deleting_an_unknown_or_malformed_id_is_silent(tmp_path: Path, session_id: str) -> None:
    store = SessionStore(tmp_path)
    make(store, "s1")
    store.delete(session_id)
    store.delete(session_id)
    assert ids(store.list()[0]) == ["s1"]
    assert (tmp_path / "index.json").exists()


@pytest.mark.parametrize("session_id", ["../s1", "/etc/passwd", "", "a/b", "x" * 500])
def test_loading_a_malformed_id_finds_nothing(tmp_path: Path, session_id: str) -> None:
    assert SessionStore(tmp_path).load(session_id) is None


# -- undo records -----------------------------------------------------------------------------------


def test_an_undo_record_drops_the_changes_of_its_turn(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    for turn, path in [(1, "/p/a.py"), (2, "/p/b.py"), (2, "/p/c.py"), (3, "/p/d.py")]:
        log.append({"kind": "meta", "turns": turn})
        log.append({"kind": "change", "turn": turn, "path": path, "before": "old", "after": "new"})
    log.append({"kind": "undo", "turn": 3})
    log.append({"kind": "undo", "turn": 2})
    log.close()
    stored = store.load("s1")
    assert stored is not None
    assert [c["path"] for c in stored.changes] == ["/p/a.py"]
    assert stored.turns == 3  # the turn count goes on: a new turn is 4, not a reused 2


# -- replay -----------------------------------------------------------------------------------------


def test_replay_merges_messages_and_folds_tool_calls() -> None:
    diff = {"type": "diff", "path": "/p/a.py", "oldText": "a", "newText": "b"}
    sent = [
        updates.user_message_chunk(updates.text("fix "), "u1"),
        updates.user_message_chunk(updates.text("it"), "u1"),
        updates.agent_thought_chunk(updates.text("Let me "), "t1"),
        updates.agent_thought_chunk(updates.text("think."), "t1"),
        updates.agent_message_chunk(updates.text("On "), "m1"),
        updates.agent_message_chunk(updates.text("it."), "m1"),
        updates.tool_call("c1", "Edit a.py", "edit", raw_input={"path": "a.py"}),
        updates.plan([{"content": "edit", "status": "in_progress", "priority": "high"}]),
        updates.tool_call_update("c1", content=[diff], locations=[{"path": "/p/a.py"}]),
        updates.tool_call_update("c1", status="in_progress"),
        updates.tool_call_update("c1", status="completed", content=[diff], raw_output={"output": "ok"}),
        updates.agent_message_chunk(updates.text("Done"), "m2"),
        updates.agent_message_chunk(updates.text("Other"), "m3"),
    ]
    assert replay(sent) == [
        updates.user_message_chunk(updates.text("fix it"), "u1"),
        updates.agent_thought_chunk(updates.text("Let me think."), "t1"),
        updates.agent_message_chunk(updates.text("On it."), "m1"),
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Edit a.py",
            "kind": "edit",
            "status": "completed",
            "rawInput": {"path": "a.py"},
            "content": [diff],
            "locations": [{"path": "/p/a.py"}],
            "rawOutput": {"output": "ok"},
        },
        updates.plan([{"content": "edit", "status": "in_progress", "priority": "high"}]),
        updates.agent_message_chunk(updates.text("Done"), "m2"),
        updates.agent_message_chunk(updates.text("Other"), "m3"),
    ]
    assert sent[4]["content"]["text"] == "On "  # the input is not changed


def test_replay_of_a_prompt_with_a_link_between_texts() -> None:
    """Blocks of one prompt share a messageId; only text merges with text."""
    link = {"type": "resource_link", "uri": "file:///p/a.py", "name": "a.py"}
    image = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    sent = [
        updates.user_message_chunk(updates.text("Look at "), "u1"),
        updates.user_message_chunk(link, "u1"),
        updates.user_message_chunk(updates.text(" and "), "u1"),
        updates.user_message_chunk(image, "u1"),
        updates.user_message_chunk(updates.text("fix it"), "u1"),
        updates.agent_message_chunk(link, "m1"),
        updates.agent_message_chunk(updates.text("done"), "m1"),
    ]
    assert replay(sent) == sent


@pytest.mark.parametrize(
    "broken",
    [
        {"sessionUpdate": "tool_call"},
        {"sessionUpdate": "tool_call", "toolCallId": 7},
        {"sessionUpdate": "tool_call_update"},
        {"sessionUpdate": "agent_message_chunk", "content": "not a block", "messageId": "m1"},
        {"sessionUpdate": "agent_message_chunk", "messageId": "m1"},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}, "messageId": "m1"},
        {"sessionUpdate": "plan"},
        {"no": "kind"},
    ],
)
def test_replay_skips_what_it_cannot_show(broken: dict[str, Any]) -> None:
    """Records that are JSON but not a sound update (another version, a flipped bit) cannot stop a load."""
    good = [
        updates.agent_message_chunk(updates.text("a"), "m1"),
        updates.tool_call("c1", "Run", "execute"),
        updates.tool_call_update("c1", status="completed"),
        updates.agent_message_chunk(updates.text("b"), "m1"),
    ]
    out = replay([good[0], broken, *good[1:], broken])
    assert [u for u in out if u in replay(good)] == replay(good)
    assert all(isinstance(u.get("sessionUpdate"), str) for u in out)


def test_folding_ignores_fields_of_the_wrong_type(tmp_path: Path) -> None:
    records = [
        {"kind": "session", "sessionId": "s1", "cwd": CWD, "additionalDirectories": "/not/a/list"},
        {"kind": "meta", "title": 42, "modeId": ["x"], "profileId": None, "updatedAt": {"a": 1}},
        {"kind": "change", "turn": "one", "path": "/p/a.py", "before": "a", "after": "b"},
        {"kind": "change", "turn": 1, "path": "/p/b.py", "before": "a", "after": "b"},
        {"kind": "turn", "turn": "2"},
    ]
    (tmp_path / "s1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store = SessionStore(tmp_path)
    stored = store.load("s1")
    assert stored is not None
    assert stored.additional_directories == []
    assert (stored.title, stored.mode_id, stored.profile_id, stored.updated_at) == (None, None, None, None)
    assert [c["path"] for c in stored.changes] == ["/p/b.py"]
    assert stored.turns == 0
    assert store.list()[0] == [{"sessionId": "s1", "cwd": CWD, "archived": False}]


def test_a_tool_call_update_without_its_call_still_shows() -> None:
    out = replay([updates.tool_call_update("c9", status="failed")])
    assert out == [{"sessionUpdate": "tool_call", "toolCallId": "c9", "status": "failed", "title": "Tool call"}]


def test_replay_of_the_recorded_updates_equals_replay_of_the_sent_ones(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    log = store.create("s1", CWD, [])
    recorder = Recorder("s1", log)
    sent = [
        updates.agent_thought_chunk(updates.text("a"), "t1"),
        updates.agent_message_chunk(updates.text("b"), "m1"),
        updates.agent_message_chunk(updates.text("c"), "m1"),
        updates.tool_call("c1", "Run", "execute"),
        updates.agent_message_chunk(updates.text("d"), "m1"),  # same id after a tool call: a new record
        updates.tool_call_update("c1", status="completed"),
        updates.agent_message_chunk(updates.text("e"), "m2"),
    ]
    for update in sent:
        recorder.record(update)
    recorder.flush()
    stored = store.load("s1")
    assert stored is not None
    assert replay(stored.updates) == replay(sent)


# -- the replay file --------------------------------------------------------------------------------


def loaded(tmp_path: Path) -> StoredSession:
    """``s1`` as ``session/load`` reads it in a new agent (repaired after a crash)."""
    stored = load(new_store(tmp_path), "s1")
    assert stored is not None
    return stored


def shown(stored: StoredSession) -> list[dict[str, Any]]:
    """What ``session/load`` sends, decoded: the replay file's lines, then what a repair could not write."""
    notes = [json.loads(line) for line in stored.shown.splitlines()]
    assert all(n == {"jsonrpc": "2.0", "method": "session/update", "params": n["params"]} for n in notes)
    assert all(n["params"]["sessionId"] == stored.session_id for n in notes)
    return [n["params"]["update"] for n in notes] + replay(stored.held)


def record_all(tmp_path: Path, sent: list[dict[str, Any]], *, settle: bool = True) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    recorder = Recorder("s1", log)
    for update in sent:
        recorder.record(update)
    if settle:
        recorder.settle()
        log.close()


def tool_call_turn(text: str = "done") -> list[dict[str, Any]]:
    diff = {"type": "diff", "path": "/p/a.py", "oldText": "a\n", "newText": "b\n"}
    return [
        updates.user_message_chunk(updates.text("fix it"), "u1"),
        updates.agent_message_chunk(updates.text("Let me "), "m1"),
        updates.agent_message_chunk(updates.text("look."), "m1"),
        updates.tool_call("c1", "Edit a.py", "edit", raw_input={"path": "/p/a.py"}),
        updates.tool_call_update("c1", content=[diff], locations=[{"path": "/p/a.py"}]),
        updates.tool_call_update("c1", status="in_progress"),
        updates.plan([{"content": "Edit", "status": "completed", "priority": "high"}]),
        updates.tool_call_update("c1", status="completed", content=[diff], raw_output={"replacements": 1}),
        updates.agent_message_chunk(updates.text(text), "m2"),
    ]


def test_the_replay_file_is_what_load_sends_byte_for_byte(tmp_path: Path) -> None:
    sent = tool_call_turn()
    record_all(tmp_path, sent)
    stored = loaded(tmp_path)
    assert stored.shown == (tmp_path / "s1.replay").read_bytes()
    assert stored.held == []
    assert shown(stored) == replay(sent)  # each message whole, the tool call once, in its final state
    assert stored.shown.splitlines()[0] == replay_line("s1", replay(sent)[0]).rstrip(b"\n")


def test_a_crash_while_updates_are_held_loses_none_of_them_and_the_file_is_repaired(tmp_path: Path) -> None:
    sent = tool_call_turn()
    record_all(tmp_path, sent[:7], settle=False)  # the agent dies while the edit runs
    with (tmp_path / "s1.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"kind":"update","update":{"sessionUpdate":"tool_call_upd')  # cut short
    assert len(shown_file(tmp_path / "s1.replay")) == 2  # the prompt and the first message
    stored = loaded(tmp_path)
    assert shown(stored) == replay(sent[:7])
    assert stored.held == []
    assert stored.shown == (tmp_path / "s1.replay").read_bytes()  # repaired
    assert (tmp_path / "s1.jsonl").read_text().endswith('"tool_call_upd\n{"kind":"release"}\n')
    assert shown(loaded(tmp_path)) == replay(sent[:7])  # loads the same again, from the replay file alone

    log = new_store(tmp_path).reopen("s1")  # and the session goes on
    recorder = Recorder("s1", log)
    recorder.record(updates.agent_message_chunk(updates.text("again"), "m9"))
    recorder.settle()
    assert shown(loaded(tmp_path)) == [*replay(sent[:7]), updates.agent_message_chunk(updates.text("again"), "m9")]


def test_a_crash_while_held_updates_are_being_written_shows_each_once(tmp_path: Path) -> None:
    """The held items went to the replay file, but the release record did not follow: what the replay file
    holds past the hold is cut off, and the held updates are folded again."""
    sent = tool_call_turn()[:8]  # up to the end of the tool call
    record_all(tmp_path, sent, settle=False)
    path = tmp_path / "s1.jsonl"
    assert path.read_text().endswith('{"kind":"release"}\n')
    path.write_text(path.read_text().removesuffix('{"kind":"release"}\n'))  # the crash came before it
    assert len(shown_file(tmp_path / "s1.replay")) == 4
    assert shown(loaded(tmp_path)) == replay(sent)
    assert shown_file(tmp_path / "s1.replay") == replay(sent)


def test_a_repair_that_cannot_be_written_still_shows_the_held_updates(tmp_path: Path) -> None:
    sent = tool_call_turn()[3:6]  # a tool call first: all of it is held
    record_all(tmp_path, sent, settle=False)
    (tmp_path / "s1.replay").unlink()
    (tmp_path / "s1.replay").mkdir()  # not a file: unreadable, and not to be replaced (even by root)
    stored = loaded(tmp_path)
    assert len(stored.held) == 3
    assert shown(stored) == replay(sent)


def test_a_file_of_an_older_agent_replays_and_gets_its_replay_file(tmp_path: Path) -> None:
    """Files written before replay files: every visible update a record, in either of two forms."""
    sent = tool_call_turn()
    records: list[dict[str, Any]] = [{"kind": "session", "sessionId": "s1", "cwd": CWD}]
    records += [{"kind": "update", "update": u} for u in sent[:5]]
    records += [{"kind": "turn", "turn": 3}, {"kind": "meta", "title": "Old"}, {"kind": "meta", "updatedAt": "x"}]
    records += [{"kind": "update", "sessionUpdate": u["sessionUpdate"], "id": None, "update": u} for u in sent[5:]]
    (tmp_path / "s1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    stored = loaded(tmp_path)
    assert (stored.title, stored.updated_at, stored.turns) == ("Old", "x", 3)
    assert shown(stored) == replay(sent)
    assert shown_file(tmp_path / "s1.replay") == replay(sent)


def test_a_cut_last_line_of_the_replay_file_is_left_out_and_then_cut_off(tmp_path: Path) -> None:
    sent = tool_call_turn()
    record_all(tmp_path, sent)
    whole = (tmp_path / "s1.replay").read_bytes()
    with (tmp_path / "s1.replay").open("ab") as file:
        file.write(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","upd')
    assert shown(loaded(tmp_path)) == replay(sent)
    log = new_store(tmp_path).reopen("s1")
    log.show(updates.agent_message_chunk(updates.text("next"), "m3"))
    log.close()
    assert (tmp_path / "s1.replay").read_bytes() == whole + replay_line(
        "s1", updates.agent_message_chunk(updates.text("next"), "m3")
    )


def test_lines_in_the_replay_file_that_are_not_this_sessions_updates_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sent = tool_call_turn()
    record_all(tmp_path, sent)
    good = (tmp_path / "s1.replay").read_bytes().splitlines(keepends=True)
    bad = [b"garbage\n", replay_line("s2", sent[0]), good[1][:40] + b"}}\n", b"\n"]
    (tmp_path / "s1.replay").write_bytes(b"".join([good[0], *bad, *good[1:]]))
    with caplog.at_level(logging.WARNING, logger="refagent"):
        assert shown(loaded(tmp_path)) == replay(sent)
    assert len(caplog.records) == 1


def test_a_message_in_parts_and_text_beyond_ascii_replay_as_sent(tmp_path: Path) -> None:
    text = "caf\u00e9 \u2028 \U0001f600 \x85 end"
    sent = [updates.agent_message_chunk(updates.text(c), "m1") for c in text]
    sent += [updates.agent_thought_chunk({"type": "image", "data": "AAAA", "mimeType": "image/png"}, "t1")]
    log = SessionStore(tmp_path).create("s1", CWD, [])
    now = [0.0]
    recorder = Recorder("s1", log, clock=lambda: now[0])
    for update in sent:
        now[0] += FLUSH_SECONDS / 3  # written in several lines
        recorder.record(update)
    recorder.settle()
    assert len(shown_file(tmp_path / "s1.replay")) > 3
    assert (tmp_path / "s1.replay").read_bytes().isascii()
    assert replay(shown(loaded(tmp_path))) == replay(sent)
    assert replay(shown(loaded(tmp_path)))[0]["content"]["text"] == text


def test_deleting_removes_both_files_and_listing_ignores_replay_files(tmp_path: Path) -> None:
    record_all(tmp_path, tool_call_turn())
    (tmp_path / "index.json").unlink()
    assert ids(new_store(tmp_path).list()[0]) == ["s1"]
    new_store(tmp_path).delete("s1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]


def test_the_conversation_is_read_only_when_asked_for(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = SessionStore(tmp_path).create("s1", CWD, [])
    history = Conversation([], log)
    history.append({"role": "user", "content": "one"})
    log.append({"kind": "change", "turn": 1, "path": "/p/a.py", "before": "a", "after": "b"})
    log.close()
    with (tmp_path / "s1.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"kind":"message","message":{"role":"assis')  # cut short
    with caplog.at_level(logging.WARNING, logger="refagent"):
        stored = new_store(tmp_path).load("s1")
        assert stored is not None
        assert caplog.records == []  # the message records were not parsed: the cut one is not seen yet
        messages, changes, _ = stored.model_state()
    assert messages == [{"role": "user", "content": "one"}]
    assert [c["path"] for c in changes] == ["/p/a.py"]
    assert "1 corrupt conversation record" in caplog.records[0].getMessage()


def test_a_restored_conversation_gives_each_unanswered_tool_call_a_result() -> None:
    """A crash during a tool call leaves the model's call without a result, which APIs reject."""
    call = {"id": "call_1", "type": "function", "function": {"name": "run_command", "arguments": "{}"}}
    other = {**call, "id": "call_2"}
    saved = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call, other]},
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    history = Conversation()
    history.restore(saved)
    stopped = {"role": "tool", "tool_call_id": "call_1", "content": STOPPED_RESULT}
    assert list(history) == [*saved[:3], stopped, *saved[3:], stopped]
    history.restore(list(history))
    assert len(history) == 7  # answered calls are left alone


def test_a_reopened_session_that_first_holds_a_call_keeps_its_history_through_a_crash(tmp_path: Path) -> None:
    """The hold must know the replay file's size before anything is shown in this agent."""
    sent = tool_call_turn()
    record_all(tmp_path, sent)
    log = new_store(tmp_path).reopen("s1")
    recorder = Recorder("s1", log)
    recorder.record(updates.tool_call("c2", "Run", "execute"))  # then the agent dies
    assert lines(tmp_path / "s1.jsonl")[-2] == {"kind": "hold", "replayed": (tmp_path / "s1.replay").stat().st_size}
    late = {"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "Run", "kind": "execute", "status": "pending"}
    assert shown(loaded(tmp_path)) == [*replay(sent), late]


def test_a_title_utf8_cannot_hold_does_not_break_the_index(tmp_path: Path) -> None:
    """Nothing should bring a lone surrogate this far (the edges clean them), but if one does, the
    index keeps what it had and the agent goes on."""
    store = SessionStore(tmp_path / "sessions")
    log = store.create("sess_1", str(tmp_path), [])
    store.touch("sess_1", title="a fine title")
    store.touch("sess_1", title="half an emoji \ud83d")  # must not raise
    log.close()
    reopened = SessionStore(tmp_path / "sessions")
    [listed] = reopened.list()[0]
    assert listed["title"] == "a fine title"
    assert not [p for p in (tmp_path / "sessions").iterdir() if p.name.startswith(".index-")]
