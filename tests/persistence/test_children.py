"""The subagents a record file keeps: read back whole records only, and replayed each on its parent
after the parent is announced (a subagent's own subagents after it), each once."""

from __future__ import annotations

import json
from pathlib import Path

from refagent.persistence.children import CUT_OFF, child_record, read_children, replayed

IDLE = {"state": {"state": "idle", "stopReason": "end_turn"}}


def chunk(text: str) -> dict[str, object]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_records_are_read_back_and_the_rest_skipped(tmp_path: Path) -> None:
    good = child_record("c1", "s1", {"title": "t", **IDLE}, [chunk("hi")])
    lines = [
        json.dumps({"kind": "session", "sessionId": "s1"}),
        json.dumps(good, separators=(",", ":")),
        '{"kind":"child","sessionId":"c2"',  # cut short by a crash
        json.dumps(
            {"kind": "child", "sessionId": "c3", "parent": "s1", "announce": {}, "updates": [1]}, separators=(",", ":")
        ),
    ]
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert read_children(str(path)) == [good]
    assert read_children(str(tmp_path / "gone.jsonl")) == []


def test_a_child_is_announced_before_its_own_children_and_once() -> None:
    grandchild = child_record("g1", "c1", {"title": "deeper", **IDLE}, [chunk("g")])  # ends first: recorded first
    child = child_record("c1", "s1", {"title": "task", **IDLE}, [chunk("c")])
    other = child_record("x1", "other-session", {**IDLE}, [chunk("x")])
    looped = child_record("s1", "c1", {**IDLE}, [chunk("loop")])  # a hostile file: the session its own grandchild
    sent = list(replayed([grandchild, child, other, looped], "s1"))
    assert sent == [
        ("s1", {"title": "task", **IDLE, "sessionUpdate": "subagent_update", "sessionId": "c1"}),
        ("c1", chunk("c")),
        ("c1", {"title": "deeper", **IDLE, "sessionUpdate": "subagent_update", "sessionId": "g1"}),
        ("g1", chunk("g")),
    ]


def message(text: str, ident: str = "m1") -> dict[str, object]:
    return {**chunk(text), "messageId": ident}


def test_a_childs_records_are_joined_and_folded() -> None:
    """Kept as it went: announced with its task, a record after each step, the last when it ended."""
    task = {"sessionUpdate": "session_message", "messageId": "r", "senderSessionId": "s1", "content": []}
    running = {"title": "task", "state": {"state": "running"}}
    call = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read a.txt", "status": "pending"}
    done = {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
    records = [
        child_record("c1", "s1", running, [task]),
        child_record("c1", "s1", running, [message("Look"), call]),
        child_record("c1", "other", running, [done, message("ing.")]),  # a later parent does not move it
        child_record("c1", "s1", {"title": "task", **IDLE}, []),
    ]
    assert [update for _, update in replayed(records, "s1")] == [
        {"title": "task", **IDLE, "sessionUpdate": "subagent_update", "sessionId": "c1"},
        task,
        message("Look"),
        {**call, "status": "completed"},  # once, in its final state
        message("ing."),
    ]


def test_a_child_cut_off_is_announced_failed_with_what_it_showed() -> None:
    running = {"title": "task", "state": {"state": "running"}}
    records = [
        child_record("c1", "s1", running, [chunk("start")]),
        child_record("c1", "s1", {**running, "state": {"state": "requires_action"}}, [message("so far")]),
    ]
    sent = list(replayed(records, "s1"))
    assert sent[0][1]["state"] == CUT_OFF
    assert sent[0][1]["title"] == "task"
    assert [update for _, update in sent[1:]] == [chunk("start"), message("so far")]


def test_the_parents_copy_of_the_instructions_is_replayed_on_the_parent() -> None:
    """The message that gave the child its task was shown in both sessions: the child's copy (received) is
    its record's first update and names the parent's (sent), which the load makes again on the parent."""
    received = {
        "sessionUpdate": "session_message",
        "messageId": "msg-r",
        "senderSessionId": "s1",
        "recipientSessionId": "c1",
        "senderMessageId": "msg-s",
        "content": [{"type": "text", "text": "Fix a.txt"}],
    }
    child = child_record("c1", "s1", {"title": "task", **IDLE}, [received, chunk("done")])
    sent = list(replayed([child], "s1"))
    assert sent[1] == (
        "s1",
        {
            "sessionUpdate": "session_message",
            "messageId": "msg-s",
            "senderSessionId": "s1",
            "recipientSessionId": "c1",
            "recipientMessageId": "msg-r",
            "content": [{"type": "text", "text": "Fix a.txt"}],
        },
    )
    assert sent[2:] == [("c1", received), ("c1", chunk("done"))]
