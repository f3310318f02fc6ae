"""What a model writes cannot drive the terminal of ``refagent run`` or ``refagent chat``.

The real commands run on a pseudo-terminal (:class:`tests.support.terminal.Terminal`), in colour, their
agent a real ``refagent`` process whose model is the scripted OpenAI-compatible server on 127.0.0.1. The
model puts hostile text (:data:`tests.client.hostile.HOSTILE`: a clipboard write, a window title, a
cleared screen, a line drawn over the permission question, a C1 CSI, backspaces, concealed text) in
everything it can reach: its message and its reasoning, a plan entry, a file it writes (so the diff at the
permission question and the output of a command that prints it), the command itself (so the tool call's
title and the permission option that names it), and a command's output with CRLF line ends and a lone
carriage return.

What is checked is the raw bytes the pty received: where the hostile text was drawn (between its
markers) there is nothing but its visible form (``\\x1b]52;c;...``) and the client's own colours; for
``refagent run`` nothing anywhere that a terminal would obey but colours; for ``refagent chat``, whose
prompt_toolkit and rich live region draw with cursor moves of their own, no OSC, C1 or BEL anywhere.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.client.hostile import BEGIN, END, HOSTILE, SHOWN, drawn_between, obeyed, plain
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env
from tests.support.terminal import Terminal

pytestmark = pytest.mark.slow

KEY = "sk-test"
WRAPPED = f"{BEGIN}{HOSTILE}{END}"
BRIEF = f"{BEGIN}\x1b]0;T\x07\r\x1b[2K\x9b2J{END}"
"""Short enough for a title (a command is shown to 80 characters)."""
BRIEF_SHOWN = "\\x1b]0;T\\x07\\r\\x1b[2K\\x9b2J"
COMMAND = f"cat notes.txt; printf 'one\\r\\n50%%\\r100%%\\r\\n' #{BRIEF}"
"""Prints the hostile file, then lines a pty would end with CRLF, one with a lone carriage return."""
PROMPT_READY = "Ctrl-D quits"
"""The end of the chat's bottom toolbar: a prompt is being edited."""


def script() -> list[Turn]:
    """The model's turns: every place its words reach the user, hostile."""
    plan = {"entries": [{"content": WRAPPED, "status": "in_progress", "priority": "high"}]}
    return [
        Turn(
            text=[f"Message {WRAPPED}\n\n```\n{WRAPPED}\n```\n"],  # one chunk: drawn whole, not a half at a time
            reasoning=[f"Thinking {WRAPPED}"],
            tool_calls=[
                ToolCall("update_plan", plan),
                ToolCall("write_file", {"path": "notes.txt", "content": f"{WRAPPED}\n"}),
            ],
        ),
        Turn(tool_calls=[ToolCall("run_command", {"command": COMMAND})]),
        Turn(text=[f"Done {WRAPPED}"]),
    ]


def environment(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    env = agent_env(
        tmp_path / "home",
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY=KEY,
        REFAGENT_MODEL="m",
        TERM="xterm-256color",
        PYTHONIOENCODING="utf-8",
        XDG_STATE_HOME=str(tmp_path / "home" / ".local" / "state"),
    )
    env.pop("NO_COLOR", None)
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def check_drawn(raw: str) -> list[str]:
    """Each stretch drawn between the markers is the visible form of what was sent, in colours at most."""
    drawn = [plain(text) for text in drawn_between(raw)]
    assert [text for text in drawn if obeyed(text)] == []
    assert set(drawn) <= {SHOWN, BRIEF_SHOWN}, drawn
    return drawn


def updates(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the agent's ``session/update`` notifications and its permission requests are about."""
    params = [m["params"] for m in wire if isinstance(m.get("params"), dict)]
    return [
        p.get("update") or {"sessionUpdate": "", **p.get("toolCall", {}), "options": p.get("options")} for p in params
    ]


def no_controls_in_titles(wire: list[dict[str, Any]]) -> None:
    """Every tool call's title the agent sent, every permission option's name, every plan entry: no control
    character in any."""
    texts = []
    for update in updates(wire):
        texts.append(str(update.get("title", "")))
        texts += [str(option.get("name")) for option in update.get("options") or []]
        texts += [str(entry.get("content")) for entry in update.get("entries") or []]
    assert any(BRIEF_SHOWN in text for text in texts)
    assert [text for text in texts if any(unicodedata.category(c) == "Cc" for c in text)] == []


def test_refagent_run_shows_hostile_text_and_obeys_none_of_it(tmp_path: Path, project: Path) -> None:
    with ScriptedOpenAIServer(script(), api_key=KEY) as server:
        term = Terminal(
            ["run", "--cwd", str(project), "write notes"],
            environment(tmp_path, server),
            tmp_path / "stderr.txt",
            size=(50, 400),
        )
        try:
            term.expect(r"Allow\? \[y / a / n / v\]")
            term.type("y\r")
            term.expect(r"Allow\? \[y / a / n / v\]")
            term.type("y\r")
            assert term.wait() == 0, term.screen
        finally:
            term.kill()
    raw = term.screen
    assert (project / "notes.txt").read_bytes().decode() == f"{WRAPPED}\n"  # the file holds what the model wrote
    assert obeyed(raw) == [], raw  # nothing but colours and line breaks, from the first byte to the last
    assert "\x1b[1m" in raw  # and the colours are there
    drawn = check_drawn(raw)
    screen = plain(raw)
    for shown in [
        f"Message {BEGIN}{SHOWN}{END}",  # the message, and its code block
        f"thinking: Thinking {BEGIN}{SHOWN}{END}",
        f"▸ {BEGIN}{SHOWN}{END}",  # the plan
        f"+{BEGIN}{SHOWN}{END}",  # the diff, at the permission question
        f"│ {BEGIN}{SHOWN}{END}",  # the command's output
        f"Permission requested: Run `cat notes.txt; printf 'one\\r\\n50%%\\r100%%\\r\\n' #{BEGIN}{BRIEF_SHOWN}{END}`",
        "│ one\n    │ 50%\\r100%\n",  # CRLF ends a line; a lone carriage return is shown
        f"Done {BEGIN}{SHOWN}{END}",
    ]:
        assert shown in screen, shown
    assert drawn.count(SHOWN) >= 7
    assert "error" not in term.stderr.read_text()


def start_chat(tmp_path: Path, server: ScriptedOpenAIServer, project: Path) -> Terminal:
    return Terminal(
        ["chat", "--cwd", str(project), "--transcript", str(tmp_path / "chat.jsonl")],
        environment(tmp_path, server),
        tmp_path / "chat-stderr.txt",
        size=(50, 400),  # no line of hostile text is wrapped or cut, so each shows between its markers
    )


def test_refagent_chat_shows_hostile_text_and_obeys_none_of_it(tmp_path: Path, project: Path) -> None:
    with ScriptedOpenAIServer(script(), api_key=KEY) as server:
        term = start_chat(tmp_path, server, project)
        try:
            term.expect(PROMPT_READY)
            term.type("write notes\r")
            term.expect(r"Allow\? \[y / a / n / v\]")
            term.type("y")  # one key, no Enter
            term.expect(r"→ Allow")  # the first question is answered (it may draw its line twice)
            term.expect(r"Allow\? \[y / a / n / v\]")
            term.type("y")
            term.expect(re.escape(f"Done {BEGIN}"))
            term.expect(PROMPT_READY)
            term.type("\x04")  # Ctrl-D
            assert term.wait() == 0, term.screen
        finally:
            term.kill()
    raw = term.screen
    assert (project / "notes.txt").read_bytes().decode() == f"{WRAPPED}\n"
    # prompt_toolkit and rich's live region move the cursor (a backspace, too) and erase lines to draw; none
    # of them sets a title, writes the clipboard, rings the bell, clears the screen, conceals text or uses a C1
    # control: any of these would have come from the model.
    for sequence in ("\x1b]", "\x07", "\x9b", "\x1b[2J", "\x1b[8m"):
        assert sequence not in raw, sequence
    drawn = check_drawn(raw)
    screen = plain(raw)
    for shown in [
        f"Message {BEGIN}{SHOWN}{END}",
        f"  {BEGIN}{SHOWN}{END}",  # the code block, indented
        f"✻ Thinking {BEGIN}{SHOWN}{END}",
        f"✓ {BEGIN}{SHOWN}{END}" if f"✓ {BEGIN}" in screen else f"▸ {BEGIN}{SHOWN}{END}",  # the plan
        f"+{BEGIN}{SHOWN}{END}",  # the diff
        f"│ {BEGIN}{SHOWN}{END}",  # the command's output
        f"? Run `cat notes.txt; printf 'one\\r\\n50%%\\r100%%\\r\\n' #{BEGIN}{BRIEF_SHOWN}{END}`",
        "│ one\n    │ 50%\\r100%\n",
        f"Done {BEGIN}{SHOWN}{END}",
    ]:
        assert shown in screen, shown
    assert drawn.count(SHOWN) >= 7
    wire = checked_wire((tmp_path / "chat.jsonl").read_text().splitlines()).sent_by("agent")
    no_controls_in_titles(wire)
    said = [u["content"]["text"] for u in updates(wire) if u["sessionUpdate"] == "agent_message_chunk"]
    assert any(WRAPPED in text for text in said)  # a message is the model's own text: the client makes it safe
