"""What the terminal client draws for each kind of session update (no processes: a renderer on a string)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from refagent.client.render import MAX_OUTPUT_LINES, Renderer, diff_lines, option_key, use_color
from tests.client.hostile import BEGIN, END, HOSTILE, SHOWN, drawn_between, obeyed, plain

CWD = "/work/project"


def render(*updates: dict[str, Any], color: bool = False) -> str:
    out = io.StringIO()
    renderer = Renderer(out, color=color, cwd=CWD)
    for update in updates:
        renderer.update(update)
    return out.getvalue()


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def call(status: str = "pending", **extra: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "Edit app.py",
        "kind": "edit",
        "status": status,
        **extra,
    }


def call_update(**fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": "c1", **fields}


DIFF = {"type": "diff", "path": f"{CWD}/app.py", "oldText": "a = 1\nb = 2\n", "newText": "a = 1\nb = 3\n"}


def test_streamed_text_is_joined_and_ends_its_line_before_the_next_block() -> None:
    shown = render(chunk("Hello "), chunk("world."), call())
    assert "Hello world.\n" in shown
    assert shown.index("Hello world.") < shown.index("● Edit app.py (edit)")


def test_thoughts_are_labelled_and_kept_apart_from_the_answer() -> None:
    shown = render(chunk("Let me think.", "agent_thought_chunk"), chunk("Answer."))
    assert "thinking: Let me think.\n" in shown
    assert shown.rstrip().endswith("Answer.")


def test_plan_shows_every_entry_with_its_status() -> None:
    entries = [
        {"content": "Read", "status": "completed", "priority": "high"},
        {"content": "Fix", "status": "in_progress", "priority": "high"},
        {"content": "Test", "status": "pending", "priority": "low"},
    ]
    shown = render({"sessionUpdate": "plan", "entries": entries})
    assert "Plan\n  ✓ Read\n  ▸ Fix\n  · Test\n" in shown


def test_a_diff_is_shown_once_with_paths_relative_to_the_cwd() -> None:
    shown = render(call(), call_update(content=[DIFF]), call_update(status="completed", content=[DIFF]))
    assert shown.count("--- a/app.py") == 1
    assert "    -b = 2\n" in shown
    assert "    +b = 3\n" in shown
    assert shown.rstrip().endswith("✓ completed")


def test_a_new_file_diffs_against_dev_null() -> None:
    assert diff_lines("new.py", None, "x = 1\n")[:3] == ["--- /dev/null", "+++ b/new.py", "@@ -0,0 +1 @@"]


def test_colors_only_when_asked() -> None:
    plain = render(call(), call_update(content=[DIFF]))
    colored = render(call(), call_update(content=[DIFF]), color=True)
    assert "\x1b[" not in plain
    assert "\x1b[32m+b = 3\x1b[0m" in colored
    assert "\x1b[31m-b = 2\x1b[0m" in colored


def test_a_failed_command_shows_the_end_of_its_output() -> None:
    output = "\n".join(f"line {i}" for i in range(40)) + "\n\nExit code: 1"
    text = {"type": "content", "content": {"type": "text", "text": f"```\n{output}\n```"}}
    shown = render({**call(), "title": "Run `make`", "kind": "execute"}, call_update(status="failed", content=[text]))
    assert "│ line 0\n" in shown
    assert "│ Exit code: 1\n" in shown
    assert "more lines" in shown
    assert shown.count("│") <= MAX_OUTPUT_LINES + 1
    assert "```" not in shown
    assert shown.rstrip().endswith("✗ failed")


def test_a_read_is_summarised_not_dumped() -> None:
    text = {"type": "content", "content": {"type": "text", "text": "     1\tsecret\n     2\tstuff"}}
    shown = render({**call(), "title": "Read a.py", "kind": "read"}, call_update(status="completed", content=[text]))
    assert "secret" not in shown
    assert "(2 lines read)" in shown


def test_unknown_updates_are_ignored() -> None:
    assert render({"sessionUpdate": "something_new", "x": 1}, {"sessionUpdate": "usage_update", "used": 1}) == ""


def test_permission_request_lists_the_answers() -> None:
    out = io.StringIO()
    renderer = Renderer(out, cwd=CWD)
    renderer.update(call())
    options = [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "allow-always", "name": "Always allow edits", "kind": "allow_always"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        {"optionId": "reject-always", "name": "Always reject edits", "kind": "reject_always"},
    ]
    renderer.permission({"sessionId": "s", "toolCall": {"toolCallId": "c1", "content": [DIFF]}, "options": options})
    shown = out.getvalue()
    assert "? Permission requested: Edit app.py (edit)" in shown
    assert "+b = 3" in shown  # the diff is shown with the question
    for key, name in [("y", "Allow"), ("a", "Always allow edits"), ("n", "Reject"), ("v", "Always reject edits")]:
        assert f"[{key}] {name}" in shown
    assert [option_key(o) for o in options] == ["y", "a", "n", "v"]


# -- what the agent sends is shown, not obeyed ---------------------------------------------------------


def test_nothing_the_agent_sends_drives_the_terminal() -> None:
    """Every string of every kind of update, of a permission request, and of an error is drawn with its
    control characters made visible; the only escape sequences written are the renderer's colours."""
    wrapped = f"{BEGIN}{HOSTILE}{END}"
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, color=True, cwd=CWD, err=err, err_color=True)
    output = {"type": "content", "content": {"type": "text", "text": f"{wrapped}\r\nsecond line\r\n"}}
    diff = {"type": "diff", "path": f"{CWD}/{wrapped}", "oldText": f"{wrapped}\n", "newText": "x\n"}
    entry = {"content": wrapped, "status": "pending", "priority": "high"}
    for update in [
        chunk(wrapped, "user_message_chunk"),
        chunk(wrapped, "agent_thought_chunk"),
        chunk(wrapped),
        {**call(), "title": wrapped, "kind": wrapped},
        call_update(content=[diff]),
        call_update(status="failed", content=[output]),
        {"sessionUpdate": "plan", "entries": [entry]},
        {"sessionUpdate": "current_mode_update", "currentModeId": wrapped},
    ]:
        renderer.update(update)
    options = [{"optionId": "allow", "name": wrapped, "kind": "allow_once"}]
    renderer.permission({"sessionId": "s", "toolCall": {"toolCallId": "c2", "title": wrapped}, "options": options})
    renderer.answered(wrapped)
    renderer.write(f"{wrapped} ", "magenta")
    renderer.end_prompt(wrapped)
    renderer.error(wrapped)
    renderer.log(wrapped)
    renderer.stop(wrapped)
    raw = out.getvalue() + err.getvalue()
    assert obeyed(raw) == []
    drawn = drawn_between(raw)
    assert len(drawn) == 19  # each one once, but the diff: its path twice and its old line
    assert {plain(text) for text in drawn} == {SHOWN}
    assert "\x1b[1m" in raw  # the renderer's own colours are still there


def test_a_crlf_ends_a_line_of_output_and_a_lone_carriage_return_is_shown() -> None:
    text = {"type": "content", "content": {"type": "text", "text": "one\r\ntwo\r\n50%\r100%\r\n"}}
    shown = render({**call(), "title": "Run `make`", "kind": "execute"}, call_update(status="failed", content=[text]))
    assert "    │ one\n    │ two\n    │ 50%\\r100%\n" in shown
    assert "\r" not in shown


def test_a_title_cannot_draw_a_line_of_its_own() -> None:
    forged = "Run `rm -rf ~`\r\x1b[2K  ? Permission requested: Run `ls`\n  ? Allowed: Run `ls`"
    shown = render({**call(), "title": forged, "kind": "execute"})
    assert "● Run `rm -rf ~`\\r\\x1b[2K ? Permission requested: Run `ls` ? Allowed: Run `ls` (execute)\n" in shown
    assert "\n  ? " not in shown


@pytest.mark.parametrize(
    ("env", "tty", "expected"),
    [({}, True, True), ({}, False, False), ({"NO_COLOR": "1"}, True, False), ({"FORCE_COLOR": "1"}, False, True)],
)
def test_use_color(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tty: bool, expected: bool) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    assert use_color(Stream()) is expected
