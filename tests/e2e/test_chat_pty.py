"""``refagent chat`` in a pseudo-terminal, as a person uses it: the real command (prompt_toolkit reading the
keys, rich drawing), its agent a real ``refagent`` process, the model the scripted OpenAI-compatible
server on 127.0.0.1.

What is matched is the screen without its escape sequences (``Terminal(plain=True)``); the driver answers
prompt_toolkit's cursor-position queries as a terminal would. "The prompt is back" is its bottom toolbar
("Ctrl-D quits"), drawn only while a prompt is being edited. Every message the agent sent (the hidden
``--transcript``) is checked against the ACP schema.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env
from tests.support.terminal import Terminal

pytestmark = pytest.mark.slow

KEY = "sk-test"

PROMPT_READY = "Ctrl-D quits"
"""The end of the bottom toolbar: a prompt is being edited."""


def start(tmp_path: Path, server: ScriptedOpenAIServer, name: str, *args: str, **extra: str) -> Terminal:
    env = agent_env(
        tmp_path / "home",
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY=KEY,
        REFAGENT_MODEL="m",
        TERM="xterm-256color",
        PYTHONIOENCODING="utf-8",
        XDG_STATE_HOME=str(tmp_path / "home" / ".local" / "state"),  # where the prompt history goes
        **extra,
    )
    env.pop("NO_COLOR", None)
    transcript = tmp_path / f"{name}.jsonl"
    return Terminal(
        ["chat", "--cwd", str(tmp_path / "project"), "--transcript", str(transcript), *args],
        env,
        tmp_path / f"{name}-stderr.txt",
        plain=True,
    )


@contextmanager
def chatting(tmp_path: Path, server: ScriptedOpenAIServer, name: str, *args: str, **extra: str) -> Iterator[Terminal]:
    """:func:`start`'s chat, for a block that leaves it with the prompt back: Ctrl-D then quits it (exit
    status 0); if the block fails, the chat is killed."""
    term = start(tmp_path, server, name, *args, **extra)
    try:
        yield term
        term.type("\x04")  # Ctrl-D
        assert term.wait() == 0
    finally:
        term.kill()


def check_transcript(path: Path) -> list[dict[str, object]]:
    return checked_wire(path.read_text().splitlines()).sent_by("client")


def user_and_assistant(server: ScriptedOpenAIServer, index: int = -1) -> list[tuple[str, str]]:
    sent = server.chat_requests[index].body["messages"]
    return [(m["role"], str(m.get("content") or "")) for m in sent if m["role"] in ("user", "assistant")]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: a path shown in the input fits on one line, so it is matched whole."""
    path = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def test_turns_a_permission_ctrl_c_and_quit(tmp_path: Path, project: Path) -> None:
    turns = [
        Turn(text="The answer is **42**."),
        Turn(text="Still 42, as I said."),
        Turn(tool_calls=[ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"})]),
        Turn(text="Written."),
        Turn(text=["word "] * 300, chunk_delay=0.2),
    ]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        term = start(tmp_path, server, "chat")
        try:
            term.expect(r"New session sess_\w+ · model m")
            term.expect(r"/help for commands, Ctrl-D to quit")
            term.expect(PROMPT_READY)
            term.type("what is it?\r")
            term.expect(r"The answer is 42\.")
            term.expect(PROMPT_READY)
            term.type("and now?\r")
            term.expect(r"Still 42, as I said\.")
            term.expect(PROMPT_READY)
            assert user_and_assistant(server) == [
                ("user", "what is it?"),
                ("assistant", "The answer is **42**."),  # drawn without the stars
                ("user", "and now?"),
            ]

            term.type("write hello.txt\r")
            term.expect(r"\? Create hello\.txt \(edit\)")
            term.expect(r"\+hi")
            term.expect(r"\[v\] Always reject")  # each option with its key
            term.expect(r"Allow\? \[y / a / n / v\]")
            term.type("q\r")  # not an answer: ignored, as Enter alone is
            term.type("y")  # one key: no Enter
            term.expect(r"→ Allow")
            term.expect(r"✓ Create hello\.txt")
            term.expect(r"Written\.")
            term.expect(PROMPT_READY)
            assert (project / "hello.txt").read_text() == "hi\n"

            term.type("talk slowly\r")
            term.expect(r"word word")
            term.type("\x03")  # Ctrl-C: SIGINT, the turn is cancelled
            term.expect(r"Cancelled\.")
            term.expect(PROMPT_READY)
            assert server.wait_for_disconnect(5)

            term.type("/quit\r")
            assert term.wait() == 0
        finally:
            term.kill()
    sent = check_transcript(tmp_path / "chat.jsonl")
    methods = [m.get("method") for m in sent if "method" in m]
    assert methods[:2] == ["initialize", "session/new"]
    assert methods.count("session/prompt") == 4
    assert "session/cancel" in methods


def test_the_spinner_says_the_turn_waits_on_a_silent_model(tmp_path: Path, project: Path) -> None:
    """A model that stops mid-reply: the spinner's line says it is the model, and for how long it has said
    nothing, before the agent's own notice comes; Esc ends the turn."""
    stalled = Turn(text=["Hel", "lo ", "there"], chunk_delay=60)  # two chunks, then nothing for a minute
    with ScriptedOpenAIServer([stalled], api_key=KEY) as server, chatting(tmp_path, server, "chat") as term:
        term.expect(PROMPT_READY)
        term.type("go\r")
        term.expect(r"Model · (waiting for its reply|writing)")
        term.expect(r"Model · nothing for [5-9]\.\ds")
        term.type("\x1b")  # Esc
        term.expect(r"Cancelled\.")
        term.expect(PROMPT_READY)


def test_esc_interrupts_a_turn_and_what_is_typed_meanwhile_starts_the_next_prompt(
    tmp_path: Path, project: Path
) -> None:
    with (
        ScriptedOpenAIServer([Turn(text=["word "] * 300, chunk_delay=0.2)], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("talk slowly\r")
        term.expect(r"Esc to interrupt")
        term.expect(r"word word")
        term.type("and th\x1b[Den")  # typed during the turn (an arrow key's sequence is dropped)
        term.expect(r"› and then▏")
        term.type("\r")
        term.expect(r"queued: sent when this turn ends")
        term.type("\x1b")  # Esc
        term.expect(r"Cancelled\.")
        term.expect(r"› and then")  # the next prompt starts with it, not sent: the turn was interrupted
        term.expect(PROMPT_READY)
        assert server.wait_for_disconnect(5)
        term.type("\x15")  # Ctrl-U: not sent
    sent = check_transcript(tmp_path / "chat.jsonl")
    methods = [m.get("method") for m in sent if "method" in m]
    assert methods.count("session/cancel") == 1
    assert methods.count("session/prompt") == 1


def test_a_prompt_typed_during_a_turn_is_shown_and_queued_with_enter(tmp_path: Path, project: Path) -> None:
    turns = [Turn(text=["word "] * 25, chunk_delay=0.2), Turn(text="Queued one answered.")]
    with (
        ScriptedOpenAIServer(turns, api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("talk slowly\r")
        term.expect(r"word word")
        term.type("now the tests")
        term.expect(r"› now the tests▏")
        term.expect(r"the next prompt: Enter queues it")
        term.type("\x7f\x7f\x7f\x7f\x7fdocs")  # Backspace: it is edited in place
        term.expect(r"› now the docs▏")
        term.type("\r")
        term.expect(r"queued: sent when this turn ends")
        term.expect(r"› now the docs\s")  # sent, as typed, when the turn ended
        term.expect(r"Queued one answered\.")
        term.expect(PROMPT_READY)
    users = [text for role, text in user_and_assistant(server) if role == "user"]
    assert users == ["talk slowly", "now the docs"]


def test_a_prompt_on_the_command_line_starts_the_chat_with_it(tmp_path: Path, project: Path) -> None:
    with (
        ScriptedOpenAIServer([Turn(text="Fixed it.")], api_key=KEY) as server,
        chatting(tmp_path, server, "chat", "--mode", "accept-edits", "fix it") as term,
    ):
        term.expect(r"Mode: Accept edits \(--mode\)\.")
        term.expect(r"› fix it")
        term.expect(r"Fixed it\.")
        term.expect(PROMPT_READY)
    assert user_and_assistant(server) == [("user", "fix it")]


def test_resume_in_a_second_chat_and_ctrl_d(tmp_path: Path, project: Path) -> None:
    turns = [Turn(text="First answer."), Turn(text="I remember the first one.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        with chatting(tmp_path, server, "first") as term:
            session_id = term.expect(r"New session (sess_\w+)").group(1)
            term.expect(PROMPT_READY)
            term.type("first question\r")
            term.expect(r"First answer\.")
            term.expect(PROMPT_READY)

        history = tmp_path / "home" / ".local" / "state" / "refagent" / "chat_history"
        assert "first question" in history.read_text()
        term = start(tmp_path, server, "second")
        try:
            term.expect(r"New session sess_\w+")
            term.expect(PROMPT_READY)
            term.type("\x1b[A")  # Up: the history of the earlier chat
            term.expect(r"first question")
            term.type("\x03")  # Ctrl-C: the line is cleared
            term.type("/sessions\r")
            term.expect(re.escape(session_id) + r"\s+just now\s+first question")
            term.expect(PROMPT_READY)
            term.type(f"/resume {session_id}\r")
            # the session is named before its history is drawn again, and what it runs on after
            term.expect(r"(?s)Resumed session " + re.escape(session_id) + r".*› first question.*First answer\.")
            term.expect(r"model .+ · mode ")
            term.expect(PROMPT_READY)
            term.type("and the first one?\r")
            term.expect(r"I remember the first one\.")
            term.expect(PROMPT_READY)
            term.type("\x03")  # Ctrl-C twice on an empty line quits
            term.expect(r"Ctrl-C again to quit")
            term.expect(PROMPT_READY)
            term.type("\x03")
            assert term.wait() == 0
        finally:
            term.kill()
        assert user_and_assistant(server) == [
            ("user", "first question"),
            ("assistant", "First answer."),
            ("user", "and the first one?"),
        ]
    for name in ("first", "second"):
        check_transcript(tmp_path / f"{name}.jsonl")


def test_multi_line_input_pasting_and_clearing_the_line(tmp_path: Path, project: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Got three lines."), Turn(text="Got the paste.")], api_key=KEY) as server:
        with chatting(tmp_path, server, "chat") as term:
            term.expect(PROMPT_READY)
            term.type("thrown away")
            term.expect("thrown away")
            term.type("\x03")  # Ctrl-C with text: the line is cleared, the prompt stays
            term.type("line one\x1b\r")  # Alt-Enter: a new line
            term.expect("line one")
            term.type("line two\\\r")  # a line ending in a backslash goes on too
            term.type("line three\r")
            term.expect(r"Got three lines\.")
            term.expect(PROMPT_READY)
            term.type("\x1b[200~pasted one\npasted two\x1b[201~")  # a bracketed paste keeps its lines
            term.expect("pasted two")
            term.type("\r")
            term.expect(r"Got the paste\.")
            term.expect(PROMPT_READY)
        assert user_and_assistant(server, 0) == [("user", "line one\nline two\nline three")]
        assert user_and_assistant(server)[-1] == ("user", "pasted one\npasted two")
    check_transcript(tmp_path / "chat.jsonl")


def test_a_single_match_completes_with_one_tab_and_enter_takes_it(tmp_path: Path, project: Path) -> None:
    with (
        ScriptedOpenAIServer([], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("/hel")
        term.expect("/hel")
        term.type("\t")  # one Tab completes the only match at once
        term.expect("p")
        term.type("\r")
        term.expect("Show the commands and the keys")  # /help's own list
        term.expect(PROMPT_READY)
        term.type("/sess")  # one command starts so: Enter runs it, not the half-typed word
        term.expect("/sess")
        term.type("\r")
        term.expect(r"No other saved session in")
        term.expect(PROMPT_READY)
    assert server.chat_requests == []  # nothing went to the model
    sent = [m.get("method") for m in check_transcript(tmp_path / "chat.jsonl")]
    assert "session/prompt" not in sent
    assert "session/list" in sent  # /sessions ran


def test_shift_tab_on_an_empty_line_switches_to_the_next_mode(tmp_path: Path, project: Path) -> None:
    with (
        ScriptedOpenAIServer([], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("\x1b[Z")  # Shift-Tab
        term.expect(r"The mode is now (\S+)\.")
        term.expect(PROMPT_READY)
    assert server.chat_requests == []
    sent = [m for m in check_transcript(tmp_path / "chat.jsonl") if m.get("method") == "session/prompt"]
    assert [m["params"]["prompt"][0]["text"] for m in sent] == ["/mode accept-edits"]  # type: ignore[index]


def test_shift_tab_from_read_only_goes_round_to_ask_not_to_full_access(tmp_path: Path, project: Path) -> None:
    with (
        ScriptedOpenAIServer([], api_key=KEY) as server,
        chatting(tmp_path, server, "chat", "--read-only") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("\x1b[Z")  # Shift-Tab
        term.expect(r"The mode is now (\S+)\.")
        term.expect(PROMPT_READY)
    sent = [m for m in check_transcript(tmp_path / "chat.jsonl") if m.get("method") == "session/prompt"]
    assert [m["params"]["prompt"][0]["text"] for m in sent] == ["/mode ask"]  # type: ignore[index]


def test_mode_and_model_alone_open_a_picker_with_the_current_value(tmp_path: Path, project: Path) -> None:
    with (
        ScriptedOpenAIServer([], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("/mode")
        term.expect(r"/mode")
        term.type("\r")
        term.expect(r"1\. ● Ask\s+\(ask\)\s+current")
        term.expect(r"3\. ○ Auto\s+\(auto\)")
        term.expect(r"Mode \(a number; Enter keeps the current one\):")
        term.type("3\r")
        term.expect(r"Mode: Auto\.")
        term.expect(r"auto · m")  # the status line says it
        term.type("/model")
        term.expect(r"/model")
        term.type("\r")
        term.expect(r"1\. ● m\b.*current")
        term.expect(r"Model \(a number; Enter keeps the current one\):")
        term.type("\r")  # keeps it
        term.expect(PROMPT_READY)
        term.type("/effort\r")
        term.expect(r"This session offers no reasoning effort to choose\.")
        term.expect(PROMPT_READY)
    assert server.chat_requests == []
    sent = check_transcript(tmp_path / "chat.jsonl")
    options = [m["params"] for m in sent if m.get("method") == "session/set_config_option"]
    assert options == [{"sessionId": options[0]["sessionId"], "configId": "mode", "value": "auto"}]  # type: ignore[index]
    assert not [m for m in sent if m.get("method") == "session/prompt"]  # the pickers are the chat's


def test_a_bang_line_runs_in_the_users_shell_and_share_sends_it(tmp_path: Path, project: Path) -> None:
    (project / "notes.txt").write_text("remember the milk\n")
    with (
        ScriptedOpenAIServer([Turn(text="Buy milk, then.")], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("!cat notes.txt; printf '\\033[31mred\\n'; exit 3")
        term.expect(r"exit 3")
        term.type("\r")
        term.expect(r"\$ cat notes.txt; printf '\\033\[31mred\\n'; exit 3")  # what runs is shown
        term.expect(r"│ remember the milk")
        term.expect(r"│ \\x1b\[31mred")  # what it printed: its escape sequence made visible, not obeyed
        term.expect(r"exit 3 · not sent to the model \(/share sends it\)")
        term.expect(PROMPT_READY)
        term.type("/share what does it say?")
        term.expect(r"what does it say\?")
        term.type("\r")
        term.expect(r"Buy milk, then\.")
        term.expect(PROMPT_READY)
    assert len(server.chat_requests) == 1  # the ! line itself never reached the model
    said = user_and_assistant(server)[-1][1]
    assert said.startswith(
        "what does it say?\n\nI ran `cat notes.txt; printf '\\033[31mred\\n'; exit 3` in my shell (exit 3)"
    )
    assert "remember the milk" in said


def test_an_at_mention_completes_a_workspace_path_and_is_sent_as_a_link(tmp_path: Path, project: Path) -> None:
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("print('hi')\n")
    (project / "build").mkdir()
    (project / "build" / "app_old.py").write_text("")
    (project / ".gitignore").write_text("build/\n")
    with (
        ScriptedOpenAIServer([Turn(text="It prints hi.")], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("explain @app")
        term.expect(r"explain @app")
        term.type("\t")  # the only match (build/ is ignored): completed at once
        term.expect(r"src/app\.py")  # drawn over what was typed
        term.type("\r")
        term.expect(r"It prints hi\.")
        term.expect(PROMPT_READY)
    sent = [m for m in check_transcript(tmp_path / "chat.jsonl") if m.get("method") == "session/prompt"]
    (prompt,) = [m["params"]["prompt"] for m in sent]  # type: ignore[index]
    assert prompt == [
        {"type": "text", "text": "explain @src/app.py"},
        {
            "type": "resource_link",
            "uri": (project / "src" / "app.py").as_uri(),
            "name": "app.py",
            "mimeType": "text/x-python",
            "size": 12,
        },
    ]


def test_a_long_paste_is_collapsed_in_the_input_and_the_replay_and_sent_whole(tmp_path: Path, project: Path) -> None:
    pasted = "".join(f"line {n} of the log\n" for n in range(1, 41))
    with ScriptedOpenAIServer([Turn(text="Seen all 40.")], api_key=KEY) as server:
        with chatting(tmp_path, server, "chat") as term:
            term.expect(PROMPT_READY)
            term.type("what is wrong here? ")
            term.expect(r"wrong here\?")
            term.type("\x1b[200~" + pasted + "\x1b[201~")  # a bracketed paste, as a terminal sends one
            term.expect(r"\[Pasted text #1 \+40 lines\]")
            term.type("\r")
            term.expect(r"Seen all 40\.")
            term.expect(PROMPT_READY)
        assert "line 20 of the log" not in term.screen
    said = user_and_assistant(server)[-1][1]
    assert said == ("what is wrong here? " + pasted).rstrip("\n")  # whole (the line is stripped, as any)
    session = re.search(r"--resume (sess_\w+)", term.screen)
    assert session is not None
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        with chatting(tmp_path, server, "resumed", "--resume", session.group(1)) as term:
            term.expect(r"› what is wrong here\? line 1 of the log")
            term.expect(r"line 3 of the log\s+\[\+37 lines\]")
            term.expect(PROMPT_READY)
        assert "line 20 of the log" not in term.screen


def test_a_file_dragged_onto_the_terminal_is_mentioned(tmp_path: Path, project: Path, short_tmp: Path) -> None:
    shot = short_tmp / "Screen Shot 1.png"
    shot.write_bytes(bytes.fromhex("89504e470d0a1a0a"))
    with (
        ScriptedOpenAIServer([Turn(text="A screenshot.")], api_key=KEY) as server,
        chatting(tmp_path, server, "chat") as term,
    ):
        term.expect(PROMPT_READY)
        term.type("what is in ")
        term.expect(r"what is in")
        term.type(f"\x1b[200~'{shot}'\x1b[201~")  # what a terminal pastes for a dropped file
        term.expect(r'@"[^"]*Screen Shot 1\.png"')
        term.type("\r")
        term.expect(r"is outside the workspace\. Attach it\? \[y/N\]")  # read_file would ask for it too
        term.type("y\r")
        term.expect(r"A screenshot\.")
        term.expect(PROMPT_READY)
    sent = [m for m in check_transcript(tmp_path / "chat.jsonl") if m.get("method") == "session/prompt"]
    (prompt,) = [m["params"]["prompt"] for m in sent]  # type: ignore[index]
    assert prompt[0] == {"type": "text", "text": f'what is in @"{shot}"'}
    assert prompt[1]["uri"] == shot.as_uri()  # the model here takes no images: a link
    assert prompt[1]["type"] == "resource_link"


def test_ctrl_v_pastes_an_image_from_the_clipboard(tmp_path: Path, project: Path, short_tmp: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    png = bytes.fromhex("89504e470d0a1a0a") + b"image"
    # the clipboard, as xclip gives it (no other reader is on this PATH)
    (tmp_path / "clipboard.png").write_bytes(png)
    (tools / "xclip").write_text(f"#!/bin/sh\nexec cat {tmp_path / 'clipboard.png'}\n")
    (tools / "xclip").chmod(0o755)
    path = f"{tools}:/usr/bin:/bin"
    with (
        ScriptedOpenAIServer([Turn(text="A picture.")], api_key=KEY) as server,
        chatting(tmp_path, server, "chat", PATH=path, TMPDIR=str(short_tmp)) as term,
    ):
        term.expect(PROMPT_READY)
        term.type("what is this ")
        term.expect(r"what is this")
        term.type("\x16")  # Ctrl-V
        term.expect(r"@\S+pasted-\S+\.png")
        term.type("\r")
        term.expect(r"A picture\.")
        term.expect(PROMPT_READY)
    sent = [m for m in check_transcript(tmp_path / "chat.jsonl") if m.get("method") == "session/prompt"]
    (prompt,) = [m["params"]["prompt"] for m in sent]  # type: ignore[index]
    saved = Path(str(prompt[1]["uri"]).removeprefix("file://"))
    assert saved.read_bytes() == png
    assert saved.stat().st_mode & 0o777 == 0o600
    assert saved.parent.parent == short_tmp
