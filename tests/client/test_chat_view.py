"""``refagent chat``'s drawing: the view fed ``session/update``\\ s, on a rich console writing to a string.

A view with ``live=True`` on a console that is not a terminal draws its live region nowhere, so what the
console holds is exactly what is printed for good; :meth:`ChatView.region` is what the region shows.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import to_plain_text
from rich.console import Console

from refagent.client import chat_blocks as blocks
from refagent.client.chat_input import SlashCompleter
from refagent.client.chat_state import CLIENT_COMMANDS, ChatState, Command, money, tokens
from refagent.client.chat_view import ChatView
from tests.client.hostile import BEGIN, END, HOSTILE, MARKUP, SHOWN, drawn_between, obeyed, plain

COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;[0-9;]+)m")
"""An SGR sequence that sets a foreground colour."""


def make_view(*, colour: bool = False, live: bool | None = None, width: int = 80) -> tuple[ChatView, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out, width=width, height=24, force_terminal=colour, color_system="standard" if colour else None
    )
    # A terminal (colour) would get the live region's frames too: only what is printed for good is wanted.
    return ChatView(console, cwd="/work", live=not colour if live is None else live), out


def region_text(view: ChatView) -> str:
    out = io.StringIO()
    Console(file=out, width=80, height=24, color_system=None).print(view.region())
    return out.getvalue()


def message(text: str, message_id: str = "msg_1", **extra: Any) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}, "messageId": message_id}


def stream(view: ChatView, text: str, kind: str = "agent_message_chunk") -> None:
    """``text`` a few characters at a time, as a model streams it."""
    for start in range(0, len(text), 7):
        view.update({"sessionUpdate": kind, "content": {"type": "text", "text": text[start : start + 7]}})


MARKDOWN = """## Result

Here is a list:

- one
- two with `code`

```python
def f(x):
    return x + 1
```

1. first
2. second

Done."""


# -- markdown ---------------------------------------------------------------------------------------


def test_streamed_markdown_is_rendered_for_the_terminal() -> None:
    view, out = make_view()
    view.begin()
    stream(view, MARKDOWN)
    view.end({"stopReason": "end_turn"})
    shown = out.getvalue()
    assert "Result" in shown
    assert "##" not in shown
    assert "• one" in shown
    assert "• two with code" in shown
    assert "  def f(x):" in shown
    assert "      return x + 1" in shown
    assert "```" not in shown
    assert "1 first" in shown  # rich numbers a list without the dot
    assert "2 second" in shown
    assert shown.index("Result") < shown.index("• one") < shown.index("def f") < shown.index("Done.")
    assert shown.count("Here is a list:") == 1  # each block printed once, as it was finished


def test_finished_blocks_are_printed_while_the_last_one_streams() -> None:
    view, out = make_view()
    view.begin()
    stream(view, "First paragraph.\n\nSecond, still com")
    assert "First paragraph." in out.getvalue()
    assert "Second" not in out.getvalue()
    assert "Second, still com" in region_text(view)
    view.end()
    assert "Second, still com" in out.getvalue()


def test_code_is_highlighted_when_there_is_colour() -> None:
    view, out = make_view(colour=True)
    view.begin()
    stream(view, "```python\ndef f(x):\n    return x + 1\n```\n")
    view.end()
    code_line = next(line for line in out.getvalue().splitlines() if "def" in line)
    assert COLOUR.search(code_line), code_line


def test_long_lines_wrap_to_the_width() -> None:
    view, out = make_view(width=40)
    view.begin()
    stream(view, "word " * 30)
    view.end()
    lines = [line for line in out.getvalue().splitlines() if "word" in line]
    assert len(lines) > 3
    assert all(len(line) <= 40 for line in lines)


@pytest.mark.parametrize(
    ("text", "done", "rest"),
    [
        ("one\n\ntwo", "one", "two"),
        ("one\n\n", "", "one\n\n"),  # the next block has not begun: "one" may be a list's first item
        ("- a\n\n  more of a", "", "- a\n\n  more of a"),  # an indented line continues the item
        ("```\ncode\n\nmore code\n```\n\nafter", "```\ncode\n\nmore code\n```", "after"),
        ("```\ncode\n\nstill code", "", "```\ncode\n\nstill code"),  # never inside a fence
        ("a\n\nb\n\nc", "a\n\nb", "c"),
    ],
)
def test_split_blocks(text: str, done: str, rest: str) -> None:
    assert blocks.split_blocks(text) == (done, rest)


def test_a_thought_is_dimmed_and_shortened() -> None:
    view, out = make_view(colour=True)
    view.begin()
    stream(view, "Let me think about this. " * 20, kind="agent_thought_chunk")
    stream(view, "The answer.")
    view.end()
    thought = out.getvalue().split("The answer.")[0]
    assert "\x1b[2;3m✻ Let me think" in thought  # dim italic
    assert "…\x1b[0m" in thought
    assert len(thought) < 250


def test_a_replayed_user_message_is_shown_as_a_prompt() -> None:
    view, out = make_view()
    view.begin("Loading the session")
    view.update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "fix it\nplease"}})
    view.update(message("Done."))
    view.end()
    assert "› fix it\n  please" in out.getvalue()
    assert out.getvalue().index("› fix it") < out.getvalue().index("Done.")


# -- plans and tool calls ---------------------------------------------------------------------------


def plan(*statuses: str) -> dict[str, Any]:
    entries = [{"content": f"step {i}", "status": s, "priority": "medium"} for i, s in enumerate(statuses, 1)]
    return {"sessionUpdate": "plan", "entries": entries}


def test_the_plan_is_a_checklist_updated_in_place() -> None:
    view, out = make_view()
    view.begin()
    view.update(plan("in_progress", "pending"))
    assert "▸ step 1" in region_text(view)
    assert "☐ step 2" in region_text(view)
    view.update(plan("completed", "in_progress"))
    assert "✓ step 1" in region_text(view)
    assert "▸ step 2" in region_text(view)
    assert "step 1" not in out.getvalue()  # nothing printed for good while it changes
    view.update(plan("completed", "completed"))
    assert "step" not in region_text(view)
    view.end()
    assert out.getvalue().count("Plan") == 1
    assert "✓ step 1" in out.getvalue()
    assert "✓ step 2" in out.getvalue()


def test_without_a_live_region_a_plan_is_printed_when_it_changes() -> None:
    view, out = make_view(live=False)
    view.begin()
    view.update(plan("in_progress", "pending"))
    view.update(plan("in_progress", "pending"))
    view.update(plan("completed", "in_progress"))
    view.end()
    assert out.getvalue().count("Plan") == 2


def call(call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": "Run `make`", "kind": "execute", **fields}


def call_update(call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, **fields}


def text_content(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": text}}]


def test_tool_calls_show_their_status() -> None:
    view, out = make_view()
    view.begin()
    view.update(call(status="pending"))
    assert "○ Run `make` (execute)" in region_text(view)
    view.update(call_update(status="in_progress"))
    assert "◐ Run `make` (execute)" in region_text(view)
    spinner = next(line for line in region_text(view).splitlines() if "Ctrl-C to interrupt" in line)
    assert " Run `make`… " in spinner  # the spinner says what runs
    assert "make" not in out.getvalue()
    view.update(call_update(status="completed", content=text_content("```\nall good\n```\n\nExit code: 0")))
    view.update(call("c2", title="Read a.py", kind="read", status="pending"))
    view.update(call_update("c2", status="failed", content=text_content("No such file: a.py")))
    view.end()
    shown = out.getvalue()
    assert "✓ Run `make` (execute)" in shown
    assert "│ all good" in shown
    assert "│ Exit code: 0" in shown
    assert "```" not in shown
    assert "✗ Read a.py (read)" in shown
    assert "│ No such file: a.py" in shown
    assert "make" not in region_text(view)


def spinner_line(view: ChatView) -> str:
    return next(line for line in region_text(view).splitlines() if "to interrupt" in line or "Cancelling" in line)


def test_the_spinner_says_what_the_turn_waits_on() -> None:
    """A stuck turn says what it is stuck on: the model (thinking, writing, or silent and for how long), a
    tool (by its title), or the cancel it waits for; each said first, before the time the turn has taken."""
    now = [100.0]
    view = ChatView(
        Console(file=io.StringIO(), width=80, height=24, color_system=None), live=True, clock=lambda: now[0]
    )
    view.begin()
    assert spinner_line(view).strip().endswith("Model · waiting for its reply… 0.0s · Ctrl-C to interrupt")
    now[0] += 4
    stream(view, "Considering the tests", "agent_thought_chunk")
    assert "Model · thinking… 4.0s" in spinner_line(view)
    now[0] += 8  # the stream stopped mid-thought: the silence is what the user sees
    assert "Model · nothing for 8.0s… 12s" in spinner_line(view)
    stream(view, "Now ")
    assert "Model · writing… 12s" in spinner_line(view)
    view.update(call(status="pending"))
    view.update(call_update(status="in_progress", title="Run `make` (running, 15 s)"))
    now[0] += 30  # a tool that runs long is the tool's doing, not the model's, however quiet
    assert "Tool · Run `make` (running, 15 s)… 42s" in spinner_line(view)
    view.update(call_update(status="completed"))
    assert "Model · waiting for its reply" in spinner_line(view)
    view.cancelling()
    assert "Cancelling (Ctrl-C again to quit)… 42s" in spinner_line(view)


def test_a_read_is_counted_not_shown() -> None:
    view, out = make_view()
    view.begin()
    view.update(call(title="Read a.py", kind="read", status="completed", content=text_content("1\n2\n3")))
    view.update(call("c2", title="Read b.py", kind="read", status="completed", content=text_content("1")))
    view.end()
    assert "read 3 lines" in out.getvalue()
    assert "read 1 line\n" in out.getvalue()
    assert "│ 1" not in out.getvalue()


def test_long_output_keeps_its_head_and_tail() -> None:
    view, out = make_view()
    view.begin()
    lines = "\n".join(f"line {i}" for i in range(1, 31))
    view.update(call(status="completed", content=text_content(lines)))
    view.end()
    shown = out.getvalue()
    head = blocks.MAX_OUTPUT_LINES - blocks.OUTPUT_TAIL
    hidden = 30 - blocks.MAX_OUTPUT_LINES
    assert f"line {head}\n" in shown
    assert f"line {head + 1}\n" not in shown
    assert f"… {hidden} lines hidden …" in shown
    assert "line 27\n" in shown
    assert "line 30\n" in shown


DIFF = {"type": "diff", "path": "/work/shop/pricing.py", "oldText": "a\nb\nc\n", "newText": "a\nB\nc\n"}


def test_a_diff_is_coloured_and_shown_once() -> None:
    view, out = make_view(colour=True)
    view.begin()
    view.update(call(title="Edit shop/pricing.py", kind="edit", status="pending"))
    view.update(call_update(content=[DIFF]))
    keys = view.permission(
        {
            "sessionId": "s",
            "toolCall": {"toolCallId": "c1", "content": [DIFF]},
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "always", "name": "Always allow edits", "kind": "allow_always"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                {"optionId": "never", "name": "Always reject edits", "kind": "reject_always"},
            ],
        }
    )
    view.answered("Allow")
    view.update(call_update(status="completed", content=[DIFF]))
    view.end()
    shown = out.getvalue()
    assert keys == "y / a / n / v"
    assert "\x1b[31m-b" in shown  # red
    assert "\x1b[32m+B" in shown  # green
    assert "a/shop/pricing.py" in shown  # relative to the cwd
    assert shown.count("+B") == 1  # at the question, not again when it completed
    assert "Always reject edits" in shown
    assert "→ Allow" in shown


def test_a_long_diff_is_trimmed() -> None:
    view, out = make_view()
    view.begin()
    new = "".join(f"line {i}\n" for i in range(200))
    diff = {"type": "diff", "path": "/work/big.txt", "oldText": None, "newText": new}
    view.update(call(title="Create big.txt", kind="edit", status="completed", content=[diff]))
    view.end()
    assert "lines hidden" in out.getvalue()
    assert len(out.getvalue().splitlines()) < 60


# -- how turns end ----------------------------------------------------------------------------------

FAILURE = {"refagent": {"failure": {"kind": "model", "message": "Connection refused: http://127.0.0.1:9/v1"}}}


def test_a_failure_is_shown_once_as_an_error() -> None:
    view, out = make_view(colour=True)
    view.begin()
    view.update({**message("Connection refused: http://127.0.0.1:9/v1"), "_meta": FAILURE})
    view.end({"stopReason": "end_turn", "_meta": FAILURE})
    shown = out.getvalue()
    assert shown.count("Connection refused") == 1
    line = next(line for line in shown.splitlines() if "Connection refused" in line)
    assert "\x1b[1;31m" in line  # bold red
    assert "Model error: Connection refused" in line


def test_a_failure_only_in_the_result_is_shown() -> None:
    view, out = make_view()
    view.begin()
    view.end({"stopReason": "end_turn", "_meta": FAILURE})
    assert out.getvalue().count("Connection refused") == 1


@pytest.mark.parametrize(
    ("stop", "said"), [("cancelled", "Cancelled."), ("max_tokens", "cut off"), ("refusal", "refused")]
)
def test_how_a_turn_stopped_is_said(stop: str, said: str) -> None:
    view, out = make_view()
    view.begin()
    view.end({"stopReason": stop})
    assert said in out.getvalue()


def test_no_colour_without_a_terminal_or_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    view, out = make_view(colour=False)
    view.begin()
    view.update(call(status="completed", content=[DIFF]))
    view.end({"stopReason": "end_turn", "_meta": FAILURE})
    assert "\x1b[" not in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    coloured_out = io.StringIO()
    view = ChatView(Console(file=coloured_out, width=80, force_terminal=True), live=False)
    view.begin()
    view.update(call(status="completed", content=[DIFF]))
    view.end({"stopReason": "end_turn", "_meta": FAILURE})
    assert "+B" in coloured_out.getvalue()
    assert not COLOUR.search(coloured_out.getvalue())


# -- the status line and the tables -----------------------------------------------------------------


def test_the_status_line_shows_mode_model_context_and_cost() -> None:
    state = ChatState()
    state.adopt(
        "s",
        {
            "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]},
            "configOptions": [
                {
                    "id": "model",
                    "name": "Model",
                    "category": "model",
                    "type": "select",
                    "currentValue": "gpt",
                    "options": [{"value": "gpt", "name": "GPT-4.1"}],
                }
            ],
        },
    )
    assert state.status() == "ask · GPT-4.1"
    state.apply(
        {
            "sessionUpdate": "usage_update",
            "used": 12_345,
            "size": 128_000,
            "cost": {"amount": 0.0123, "currency": "USD"},
        }
    )
    assert state.status() == "ask · GPT-4.1 · context 12.3k/128k (9%) · $0.0123"
    state.apply({"sessionUpdate": "current_mode_update", "currentModeId": "read-only"})
    assert state.status().startswith("read-only · ")
    assert (tokens(950), tokens(1_050_000), money(2.5, "EUR")) == ("950", "1.05M", "2.50 EUR")


def test_available_commands_are_kept_with_their_descriptions() -> None:
    state = ChatState()
    state.apply(
        {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": "undo", "description": "Restore the files"},
                {"name": "mode", "description": "Switch the mode", "input": {"hint": "ask | auto"}},
            ],
        }
    )
    assert state.commands == [Command("undo", "Restore the files"), Command("mode", "Switch the mode", "ask | auto")]


def test_help_lists_both_kinds_of_commands_and_the_keys() -> None:
    out = io.StringIO()
    Console(file=out, width=100).print(blocks.help_block(CLIENT_COMMANDS, [Command("undo", "Restore the files")]))
    shown = out.getvalue()
    for name in ("/help", "/sessions", "/resume", "/new", "/quit", "/undo"):
        assert name in shown
    assert "Restore the files" in shown
    assert "Alt-Enter" in shown
    assert "Ctrl-D" in shown


def test_sessions_are_listed_with_their_age() -> None:
    now = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
    out = io.StringIO()
    entries = [
        {"sessionId": "sess_a", "cwd": "/w", "updatedAt": "2025-01-02T11:55:00Z", "title": "fix the bug"},
        {"sessionId": "sess_b", "cwd": "/w", "updatedAt": "2024-12-30T12:00:00Z"},
    ]
    Console(file=out, width=100).print(blocks.sessions_block(entries, now))
    first, second = out.getvalue().splitlines()
    assert first.split() == ["1", "sess_a", "5", "min", "ago", "fix", "the", "bug"]
    assert second.split()[:5] == ["2", "sess_b", "3", "days", "ago"]
    assert blocks.ago("2024-01-01T00:00:00Z", now) == "2024-01-01"


# -- what the agent sends is shown, not obeyed ---------------------------------------------------------

WRAPPED = f"{BEGIN}{HOSTILE}{END}"


def coloured(width: int = 240) -> tuple[ChatView, io.StringIO]:
    """A view on a console that believes it is a terminal, in colour (no live region: what is printed)."""
    out = io.StringIO()
    console = Console(file=out, width=width, height=40, force_terminal=True, color_system="standard")
    return ChatView(console, cwd="/work", live=False), out


def test_nothing_the_agent_sends_drives_the_terminal() -> None:
    """Every string of every update the view draws, of a permission question, of an error: made visible,
    in rich's text, markdown (code blocks too) and tables alike; the only escape sequences are colours."""
    view, out = coloured(width=1000)  # a table's cells are cut to the width: here, none is
    view.begin()
    view.update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": WRAPPED}})
    view.update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": WRAPPED}})
    view.update(message(f"Text {WRAPPED} and `{WRAPPED}`\n\n```sh\n{WRAPPED}\n```\n"))
    diff = {"type": "diff", "path": f"/work/{WRAPPED}", "oldText": f"{WRAPPED}\n", "newText": "x\n"}
    view.update(call(title=WRAPPED, kind=WRAPPED, status="pending"))
    keys = view.permission(
        {
            "sessionId": "s",
            "toolCall": {"toolCallId": "c1", "title": WRAPPED, "content": text_content(WRAPPED)},
            "options": [{"optionId": "allow", "name": WRAPPED, "kind": "allow_once"}],
        }
    )
    view.answered(WRAPPED)
    view.update(call_update(status="failed", content=[diff, *text_content(f"{WRAPPED}\r\nsecond line\r\n")]))
    view.update({"sessionUpdate": "plan", "entries": [{"content": WRAPPED, "status": "completed", "priority": "low"}]})
    view.note(WRAPPED)
    view.end({"stopReason": "end_turn", "_meta": {"refagent": {"failure": {"kind": "model", "message": WRAPPED}}}})
    view.console.print(blocks.sessions_block([{"sessionId": WRAPPED, "updatedAt": WRAPPED, "title": WRAPPED}]))
    view.console.print(blocks.help_block([], [Command(WRAPPED, WRAPPED, WRAPPED)]))
    raw = out.getvalue()
    assert keys == "y"
    assert obeyed(raw) == []
    drawn = [plain(text) for text in drawn_between(raw)]
    assert len(drawn) == 25
    assert set(drawn) == {SHOWN}
    assert COLOUR.search(raw)  # the view's own colours are still there


def test_the_agents_text_is_never_rich_markup() -> None:
    view, out = coloured()
    view.begin()
    view.update(call(title=MARKUP, status="completed", content=text_content(MARKUP)))
    view.update({"sessionUpdate": "plan", "entries": [{"content": MARKUP, "status": "completed", "priority": "low"}]})
    view.update(message(MARKUP))
    view.end()
    view.console.print(blocks.sessions_block([{"sessionId": MARKUP, "title": MARKUP}]))
    view.console.print(blocks.help_block([], [Command(MARKUP, MARKUP, MARKUP)]))
    raw = out.getvalue()
    assert plain(raw).count(MARKUP) == 9  # title, output, plan, message, a session id and title, help: 3
    assert "\x1b]8;" not in raw  # no hyperlink
    assert "\x1b[1;31mnot bold" not in raw


def test_a_link_in_a_message_shows_where_it_goes() -> None:
    view, out = coloured()
    view.begin()
    view.update(message("See [the docs](https://evil.example/steal) for more."))
    view.end()
    raw = out.getvalue()
    assert "\x1b]8;" not in raw  # not a terminal hyperlink, whose target the reader cannot see
    assert "the docs (https://evil.example/steal)" in plain(raw)


def test_the_status_line_and_completions_show_the_agents_words_visibly() -> None:
    state = ChatState()
    choice = {"value": WRAPPED, "name": WRAPPED}
    option = {"id": "model", "category": "model", "type": "select", "currentValue": WRAPPED, "options": [choice]}
    state.adopt("s", {"modes": {"currentModeId": WRAPPED, "availableModes": []}, "configOptions": [option]}, WRAPPED)
    state.apply(
        {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "x", "description": WRAPPED}]}
    )
    state.apply({"sessionUpdate": "session_info_update", "title": WRAPPED})
    state.listed = [{"sessionId": "sess_1", "title": WRAPPED, "updatedAt": WRAPPED}]
    assert state.status() == f"{BEGIN}{SHOWN}{END} · {BEGIN}{SHOWN}{END}"
    assert state.title == f"{BEGIN}{SHOWN}{END}"
    completer = SlashCompleter(state)
    metas = [
        to_plain_text(c.display_meta)
        for text in ("/x", "/resume ", "/model ")
        for c in completer.get_completions(Document(text), CompleteEvent())
    ]
    assert metas == [f"{BEGIN}{SHOWN}{END}", f"{BEGIN}{SHOWN}{END} · {BEGIN}{SHOWN}{END}", f"{BEGIN}{SHOWN}{END}"]


def test_a_call_that_goes_on_after_its_turn_is_shown_again_when_it_ends() -> None:
    view, out = make_view()
    view.begin()
    view.update(call(title="Run `npm run dev` (in the background)", status="pending"))
    view.update(call_update(status="in_progress", content=text_content("Running in the background as job-1.")))
    view.end()
    assert "◐ Run `npm run dev` (in the background)" in out.getvalue()
    view.update(call_update(content=text_content("listening on :3000")))  # a frame of its output
    assert view.calls == {}  # nothing lingers for the next turn's live region
    view.begin()
    assert "npm" not in region_text(view)
    view.update(
        call_update(status="completed", content=text_content("```\nlistening on :3000\n```\n\njob-1: Stopped."))
    )
    view.end()
    shown = out.getvalue()
    assert "✓ Run `npm run dev` (in the background)" in shown
    assert "│ job-1: Stopped." in shown
