"""``refagent chat`` in this process against a real ``refagent`` process (over real pipes): the prompts and
answers come from a list instead of a terminal, the screen is a string. The agent answers from the
scripted OpenAI-compatible server on 127.0.0.1. Every message the agent sends is checked against the ACP
schema. (``tests/e2e/test_chat_pty.py`` drives the real command through a pseudo-terminal.)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console

from refagent.acp.errors import MethodNotFound
from refagent.client.chat import Chat, ChatOptions
from refagent.client.chat_client import ChatClient
from refagent.client.chat_input import SlashCompleter
from refagent.client.chat_state import ChatState, Command
from refagent.client.chat_view import ChatView
from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, ToolCall, Turn
from refagent.testing.transcript import Transcript
from tests.client.hostile import BEGIN, END, HOSTILE, SHOWN, drawn_between, obeyed, plain
from tests.support.acp_schema import checked_wire
from tests.support.helpers_process import agent_env

pytestmark = pytest.mark.anyio

AGENT = [sys.executable, "-m", "refagent"]
KEY = "sk-test"


def server_env(tmp_path: Path, server: ScriptedOpenAIServer, **extra: str) -> dict[str, str]:
    """An agent whose model is ``server`` (``HOME`` in ``tmp_path``: its sessions and config are the test's)."""
    return agent_env(
        tmp_path / "home", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m", **extra
    )


Step = str | BaseException | Callable[[], Awaitable[str]]


class Typed:
    """What the user types: prompts and answers, in order; then the end of input (Ctrl-D)."""

    echoes = True  # as a terminal's prompt: the chat does not print the prompt again

    def __init__(self, *prompts: Step, answers: tuple[Step, ...] = ()) -> None:
        self.prompts = list(prompts)
        self.answers = list(answers)
        self.questions: list[str] = []
        self.reads = 0

    async def read(self) -> str:
        self.reads += 1
        return await self._next(self.prompts)

    async def ask(self, question: str) -> str:
        self.questions.append(question)
        return await self._next(self.answers)

    async def key(self, question: str, keys: str) -> str:
        return await self.ask(question)

    async def above(self, draw: Callable[[], None]) -> None:
        draw()

    interrupt_key = "Ctrl-C"

    @contextlib.asynccontextmanager
    async def during_turn(
        self, on_escape: Callable[[], Awaitable[None]], on_change: Callable[[], None]
    ) -> AsyncIterator[None]:
        yield

    def typed_ahead(self) -> tuple[str, bool]:
        return "", False

    def hold(self) -> None:
        pass

    @staticmethod
    async def _next(steps: list[Step]) -> str:
        step: Step = steps.pop(0) if steps else EOFError()
        if isinstance(step, BaseException):
            raise step
        return step if isinstance(step, str) else await step()


class Watching(ChatView):
    """A view that says when the agent started talking."""

    def __init__(self, console: Console, **options: Any) -> None:
        super().__init__(console, **options)
        self.talking = anyio.Event()
        self.noticed = anyio.Event()

    def update(self, update: dict[str, Any]) -> None:
        super().update(update)
        if update.get("sessionUpdate") == "agent_message_chunk":
            self.talking.set()
        if update.get("sessionUpdate") == "notice":
            self.noticed.set()


class Announcing(ChatState):
    """A state that says when the agent announced its commands."""

    def __init__(self) -> None:
        super().__init__()
        self.announced = anyio.Event()

    def apply(self, update: dict[str, Any]) -> None:
        super().apply(update)
        if update.get("sessionUpdate") == "available_commands_update":
            self.announced.set()


def check_transcript(text: str) -> Transcript:
    return checked_wire(text.splitlines())


async def run_chat(
    tmp_path: Path,
    server: ScriptedOpenAIServer,
    typed: Typed,
    *,
    during: Callable[[Chat, Watching], Awaitable[None]] | None = None,
    state: ChatState | None = None,
    **options: Any,
) -> tuple[int, str]:
    out = io.StringIO()
    wire = io.StringIO()
    view = Watching(Console(file=out, width=100, color_system=None), cwd=str(tmp_path))
    chat_options = ChatOptions(cwd=str(tmp_path), agent=AGENT, env=server_env(tmp_path, server), transcript=wire)
    for name, value in options.items():
        setattr(chat_options, name, value)
    the_chat = Chat(chat_options, view, typed, state or ChatState())
    code = -1

    async def client() -> None:
        nonlocal code
        code = await the_chat.run()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(client)
            if during is not None:
                await during(the_chat, view)
    check_transcript(wire.getvalue() if chat_options.transcript is wire else chat_options.transcript.getvalue())  # type: ignore[union-attr]
    return code, out.getvalue()


def messages(server: ScriptedOpenAIServer, index: int = -1) -> list[tuple[str, str]]:
    """(role, content) of a chat request's messages, the system prompt left out."""
    sent = server.chat_requests[index].body["messages"]
    return [(m["role"], str(m.get("content") or "")) for m in sent if m["role"] != "system"]


# -- turns ------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_two_turns_share_the_history_and_the_end_of_input_quits(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="The answer is 42."), Turn(text="Still 42.")], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("what is it?", "and now?"))
        assert code == 0
        assert messages(server) == [
            ("user", "what is it?"),
            ("assistant", "The answer is 42."),
            ("user", "and now?"),
        ]
    assert "refagent" in shown
    assert "New session sess_" in shown
    assert "model m" in shown
    assert "/help for commands, Ctrl-D to quit" in shown
    assert shown.index("The answer is 42.") < shown.index("Still 42.")


@pytest.mark.slow
async def test_a_permission_is_asked_until_answered(tmp_path: Path) -> None:
    write = Turn(tool_calls=[ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"})])
    with ScriptedOpenAIServer([write, Turn(text="Written.")], api_key=KEY) as server:
        typed = Typed("write it", answers=("maybe", "y"))
        code, shown = await run_chat(tmp_path, server, typed)
    assert code == 0
    assert (tmp_path / "hello.txt").read_text() == "hi\n"
    assert typed.questions == ["    Allow? [y / a / n / v] "] * 2
    assert "Please answer one of: y / a / n / v" in shown
    assert "+hi" in shown
    assert "→ Allow" in shown
    assert "✓ Create hello.txt (edit)" in shown


@pytest.mark.slow
async def test_yes_approves(tmp_path: Path) -> None:
    write = Turn(tool_calls=[ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"})])
    with ScriptedOpenAIServer([write, Turn(text="Written.")], api_key=KEY) as server:
        typed = Typed("write it")
        code, shown = await run_chat(tmp_path, server, typed, yes=True)
    assert code == 0
    assert (tmp_path / "hello.txt").exists()
    assert typed.questions == []
    assert "✓ Approved: Create hello.txt (Allow, --yes)" in shown  # one line, and no menu
    assert "+hi" in shown
    assert "Allow?" not in shown
    assert "Always allow" not in shown


@pytest.mark.slow
async def test_ctrl_c_at_a_permission_question_cancels_the_turn(tmp_path: Path) -> None:
    write = Turn(tool_calls=[ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"})])
    with ScriptedOpenAIServer([write, Turn(text="Back.")], api_key=KEY) as server:
        typed = Typed("write it", "are you there?", answers=(KeyboardInterrupt(),))
        code, shown = await run_chat(tmp_path, server, typed)
        assert code == 0
        assert len(server.chat_requests) == 2  # the cancelled turn asked the model nothing more
    assert not (tmp_path / "hello.txt").exists()
    assert "→ cancelled" in shown
    assert "Cancelled." in shown
    assert "Back." in shown  # the prompt came back, and the next turn ran


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
async def test_ctrl_c_during_a_turn_cancels_it_and_twice_quits(tmp_path: Path, presses: int) -> None:
    slow = Turn(text=["word "] * 200, chunk_delay=0.3)
    typed = Typed("go", "/quit")

    async def interrupt(chat: Chat, view: Watching) -> None:
        await view.talking.wait()
        for _ in range(presses):
            await chat.interrupt()

    with ScriptedOpenAIServer([slow], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, typed, during=interrupt)
        assert server.wait_for_disconnect(5)
    assert code == 0
    if presses == 1:
        assert "Cancelled." in shown
        assert typed.reads == 2  # the prompt came back
    else:
        assert typed.reads == 1


@pytest.mark.slow
async def test_ctrl_c_twice_on_an_empty_line_quits(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        typed = Typed(KeyboardInterrupt(), "", KeyboardInterrupt(), KeyboardInterrupt(), "never read")
        code, shown = await run_chat(tmp_path, server, typed)
    assert code == 0
    assert shown.count("(Ctrl-C again to quit, or Ctrl-D)") == 2  # an empty line in between starts over
    assert typed.prompts == ["never read"]


@pytest.mark.slow
async def test_a_failed_turn_is_shown_once_as_an_error_and_the_chat_goes_on(tmp_path: Path) -> None:
    turns = [Turn(fault=Fault.status(401)), Turn(text="Better now.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("go", "again"))
    assert code == 0
    failed = [line for line in shown.splitlines() if line.startswith("✗ ")]
    assert len(failed) == 1, shown
    assert "401" in failed[0] or "key" in failed[0].lower()
    assert "Better now." in shown


# -- commands ---------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_sessions_new_and_resume(tmp_path: Path) -> None:
    turns = [Turn(text="First answer."), Turn(text="Fresh answer."), Turn(text="Second answer.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        typed = Typed("first question", "/new", "fresh question", "/sessions", "/resume 1", "second question", "/quit")
        code, shown = await run_chat(tmp_path, server, typed)
        assert code == 0
        assert messages(server, 1) == [("user", "fresh question")]  # /new: a session without history
        assert messages(server) == [
            ("user", "first question"),
            ("assistant", "First answer."),
            ("user", "second question"),
        ]
    listing = shown.split("/resume <id or number>")[0].rsplit("Fresh answer.", 1)[1]
    assert [line.split()[0] for line in listing.strip().splitlines()] == ["1"]  # the session in use is not listed
    assert "first question" in listing
    resumed = shown.split("Resumed session", 1)[1]  # named first, then the earlier conversation drawn again
    assert "Fresh answer." not in resumed
    assert "› first question" in resumed
    assert "First answer." in resumed
    assert shown.count("New session sess_") == 2
    # on quitting, how to come back to the session in use: the first one, resumed
    first = shown.split("Resumed session ", 1)[1].split()[0]
    assert shown.rstrip().splitlines()[-1].strip() == f"To go on with this session: refagent chat --resume {first}"


@pytest.mark.slow
async def test_no_resume_hint_for_a_session_without_a_prompt(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("/quit"))
    assert code == 0
    assert "--resume" not in shown
    assert saved_sessions() == set()  # and no empty session is left to list


@pytest.mark.slow
async def test_sessions_left_without_a_prompt_are_not_kept(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Kept.")], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("/new", "/new", "a question", "/new"))
    assert code == 0
    assert shown.count("New session sess_") == 4
    kept = saved_sessions()
    assert len(kept) == 1  # the one with a prompt
    assert next(iter(kept)) in shown.split("Kept.")[0].rsplit("New session ", 1)[1]


def saved_sessions() -> set[str]:
    """The ids of the sessions saved (the agents under test share the test's ``XDG_DATA_HOME``)."""
    root = Path(os.environ["XDG_DATA_HOME"]) / "refagent" / "sessions"
    return {path.name.split(".")[0] for path in root.glob("sess_*")} if root.is_dir() else set()


@pytest.mark.slow
async def test_the_agent_answers_its_own_commands(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("/undo", "/help"))
        assert code == 0
        assert server.chat_requests == []
    assert "nothing to undo" in shown
    assert "/compact" in shown  # /help lists the agent's commands, from available_commands_update


@pytest.mark.slow
async def test_continue_without_an_earlier_session_starts_a_new_one(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed(), latest=True)
    assert code == 0
    assert "No earlier session in this directory: a new one." in shown
    assert "New session sess_" in shown


@pytest.mark.slow
async def test_resuming_an_unknown_session_fails(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed(), resume="sess_nope")
    assert code == 1
    assert "no session 'sess_nope'" in shown


@pytest.mark.slow
async def test_read_only_starts_in_read_only_mode(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("/help"), read_only=True)
    assert code == 0
    assert "Mode: Read only (--read-only): changes are refused." in shown


@pytest.mark.slow
async def test_a_session_that_cannot_open_says_why(tmp_path: Path) -> None:
    env = agent_env(tmp_path / "home", OPENAI_BASE_URL="https://models.example.com/v1", REFAGENT_MODEL="m")
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("never sent"), env=env)
    assert code == 1
    assert "OPENAI_API_KEY" in shown  # authentication required: the variable to set


DYING_AGENT = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    elif message.get("method") == "session/new":
        result = {"sessionId": "sess_dying"}
    else:  # the prompt: it dies, saying why on its stderr (and leaving its last line unfinished)
        sys.stderr.write("starting the turn\\n\\nTraceback: the agent's last words")
        sys.exit(3)
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


async def test_an_agent_that_stops_ends_the_chat_with_a_failure(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "dying_agent.py"
    script.write_text(DYING_AGENT)
    out = io.StringIO()
    options = ChatOptions(cwd=str(tmp_path), agent=[sys.executable, str(script)])
    typed = Typed("hello", "never read")
    with anyio.fail_after(20):
        code = await Chat(options, ChatView(Console(file=out, width=100)), typed, ChatState()).run()
    assert code == 1
    assert "The agent stopped" in out.getvalue()
    assert typed.prompts == ["never read"]
    # its stderr is drawn in the chat, to the last unfinished line, not written across the terminal
    assert "starting the turn\nTraceback: the agent's last words\n" in out.getvalue()
    assert "last words" not in capfd.readouterr().err


async def test_an_agent_that_cannot_start_is_a_failure(tmp_path: Path) -> None:
    out = io.StringIO()
    options = ChatOptions(cwd=str(tmp_path), agent=[str(tmp_path / "no-such-agent")])
    code = await Chat(options, ChatView(Console(file=out)), Typed(), ChatState()).run()
    assert code == 1
    assert "cannot start the agent" in out.getvalue()


# -- the command, without a terminal ---------------------------------------------------------------


@pytest.mark.slow
def test_without_a_terminal_it_reads_lines_and_draws_no_colour(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Hello **there**.")], api_key=KEY) as server:
        result = subprocess.run(
            [*AGENT, "chat", "--cwd", str(tmp_path)],
            input="hi\n",
            env=server_env(tmp_path, server),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert "› hi" in result.stdout
    assert "Hello there." in result.stdout
    assert "\x1b[" not in result.stdout


@pytest.mark.slow
def test_without_a_terminal_a_question_shows_its_answers(tmp_path: Path) -> None:
    """The question is text, not rich markup: ``[y / a / n / v]`` was once taken for a style, and lost."""
    turns = [Turn(tool_calls=[ToolCall("write_file", {"path": "a.txt", "content": "a\n"})]), Turn(text="Done.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        result = subprocess.run(
            [*AGENT, "chat", "--cwd", str(tmp_path)],
            input="write it\ny\n",
            env=server_env(tmp_path, server),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert "Allow? [y / a / n / v] y\n" in result.stdout
    assert (tmp_path / "a.txt").read_text() == "a\n"


@pytest.mark.slow
def test_a_closed_stdout_ends_the_chat_quietly(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Hello.")], api_key=KEY) as server:
        process = subprocess.Popen(
            [*AGENT, "chat", "--cwd", str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(tmp_path, server),
        )
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        assert b"refagent" in process.stdout.readline()
        process.stdout.close()  # as `| head -1` does
        with contextlib.suppress(BrokenPipeError):  # it may have found its stdout closed already, and left
            process.stdin.write(b"hi\n")
            process.stdin.close()
        code = process.wait(30)
        err = process.stderr.read().decode()
    assert code == 141, err
    assert "Traceback" not in err
    assert "BrokenPipe" not in err


# -- the client, the completer ----------------------------------------------------------------------

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
ASK = {"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "Run `make`", "kind": "execute"}, "options": OPTIONS}


def client(typed: Typed, cancelled: list[bool] | None = None, approve: str | None = None) -> ChatClient:
    async def on_cancel() -> None:
        if cancelled is not None:
            cancelled.append(True)

    return ChatClient(ChatView(Console(file=io.StringIO())), ChatState(), typed, on_cancel, approve=approve)


async def test_the_client_answers_permissions_and_nothing_else() -> None:
    the_client = client(Typed(answers=("n",)))
    assert await the_client.permission(ASK) == {"outcome": {"outcome": "selected", "optionId": "reject"}}
    assert await client(Typed(), approve="--yes").permission(ASK) == {
        "outcome": {"outcome": "selected", "optionId": "allow"}
    }
    for method in ("fs/read_text_file", "terminal/create"):
        with pytest.raises(MethodNotFound):
            await the_client.handle_request(method, {"sessionId": "s"})


async def test_the_agents_log_lines_and_a_typed_answer_are_shown_not_obeyed() -> None:
    out = io.StringIO()
    view = ChatView(Console(file=out, width=400, force_terminal=True), live=False)
    typed = Typed(answers=(f"y{HOSTILE}", "y"))
    typed.echoes = False  # plain lines: the chat prints the answer it read
    the_chat = Chat(ChatOptions(cwd="/work", agent=[]), view, typed, ChatState())
    await the_chat.agent_log(f"{BEGIN}{HOSTILE}{END}")  # a log line can quote a model's tool name
    await the_chat.client.permission(ASK)
    raw = out.getvalue()
    assert obeyed(raw) == []
    assert [plain(text) for text in drawn_between(raw)] == [SHOWN]
    assert f"y{SHOWN}" in plain(raw)


async def test_ctrl_d_at_a_question_cancels_the_turn_and_later_questions_too() -> None:
    cancelled: list[bool] = []
    the_client = client(Typed(answers=(EOFError(), "y")), cancelled)
    assert await the_client.permission(ASK) == {"outcome": {"outcome": "cancelled"}}
    assert cancelled == [True]
    assert await the_client.permission(ASK) == {"outcome": {"outcome": "cancelled"}}


async def test_a_pending_question_answers_cancelled_after_session_cancel() -> None:
    asked = anyio.Event()

    async def never() -> str:
        asked.set()
        await anyio.sleep_forever()
        return ""

    the_client = client(Typed(answers=(never,)))
    answer: dict[str, Any] = {}

    async def ask() -> None:
        answer.update(await the_client.permission(ASK))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await asked.wait()
        the_client.cancel_prompts()
    assert answer == {"outcome": {"outcome": "cancelled"}}


async def test_updates_of_another_session_are_not_drawn() -> None:
    out = io.StringIO()
    state = ChatState()
    the_client = ChatClient(ChatView(Console(file=out)), state, Typed(), anyio.lowlevel.checkpoint)
    the_client.accept = "mine"
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}}
    await the_client.handle_notification("session/update", {"sessionId": "other", "update": chunk})
    await the_client.handle_notification("session/update", {"sessionId": "mine", "update": chunk})
    assert out.getvalue().count("hello") == 1


def completions(state: ChatState, text: str) -> list[tuple[str, str]]:
    found = SlashCompleter(state).get_completions(Document(text), CompleteEvent(completion_requested=True))
    return [(c.text, c.display_meta_text) for c in found]


def test_slash_commands_complete_with_their_descriptions() -> None:
    state = ChatState(commands=[Command("undo", "Restore the files"), Command("mode", "Switch the mode", "ask | auto")])
    state.modes = [("ask", "Ask"), ("auto", "Auto")]
    state.listed = [{"sessionId": "sess_abc", "title": "fix the bug"}, {"sessionId": "sess_def"}]
    names = [text for text, _ in completions(state, "/")]
    assert names[:7] == ["/help", "/sessions", "/resume", "/new", "/effort", "/share", "/quit"]
    assert "/undo" in names
    assert completions(state, "/un") == [("/undo", "Restore the files")]
    assert completions(state, "/resume sess_a") == [("sess_abc", "fix the bug")]
    assert [text for text, _ in completions(state, "/mode a")] == ["ask", "auto"]
    state.efforts = [("low", "Low"), ("high", "High")]
    assert completions(state, "/effort h") == [("high", "High")]
    assert completions(state, "hello /un") == []


def test_the_plan_stays_in_sight_while_a_permission_question_is_asked() -> None:
    """The live region (where a changing plan is drawn) goes off the screen for a question: the plan is
    printed above the question first, once per change."""
    out = io.StringIO()
    view = ChatView(Console(file=out, width=100, color_system=None), live=True)
    view.begin()
    plan = [
        {"content": "Read the code", "priority": "high", "status": "completed"},
        {"content": "Fix the bug", "priority": "high", "status": "in_progress"},
    ]
    view.update({"sessionUpdate": "plan", "entries": plan})
    assert "Fix the bug" not in out.getvalue()  # in the live region only, so far
    view.pause()
    view.permission(ASK)
    view.answered("Allow")
    shown = out.getvalue()
    assert shown.index("Fix the bug") < shown.index("Run `make`")
    view.permission(ASK)  # the same plan: not printed again
    assert out.getvalue().count("Fix the bug") == 1
    view.update({"sessionUpdate": "plan", "entries": [*plan[:1], {**plan[1], "status": "completed"}]})
    view.end({"stopReason": "end_turn"})
    assert out.getvalue().count("Fix the bug") == 2  # done: printed for good


def test_a_picker_marks_the_current_value_and_takes_a_number_a_value_or_a_name() -> None:
    from refagent.client.chat_pickers import picked, picker_block

    choices = [("ask", "Ask"), ("auto", "Auto"), ("full-access", "Full access")]
    shown = picker_block("Mode", choices, "auto").plain
    assert shown.splitlines() == [
        "Mode:",
        "  1. ○ Ask  (ask)",
        "  2. ● Auto  (auto)  current",
        "  3. ○ Full access  (full-access)",
    ]
    assert [picked(a, choices) for a in ("1", " 3 ", "AUTO", "full access", "full-access")] == [
        "ask",
        "full-access",
        "auto",
        "full-access",
        "full-access",
    ]
    assert [picked(a, choices) for a in ("0", "4", "nope", "")] == [None, None, None, None]


def test_the_state_knows_the_efforts_and_the_options_ids() -> None:
    state = ChatState()
    state.apply(
        {
            "sessionUpdate": "config_option_update",
            "configOptions": [
                {
                    "id": "model",
                    "name": "Model",
                    "category": "model",
                    "type": "select",
                    "currentValue": "m2",
                    "options": [{"value": "m1", "name": "One"}, {"value": "m2", "name": "Two"}],
                },
                {
                    "id": "effort_x",
                    "name": "Effort",
                    "category": "thought_level",
                    "type": "select",
                    "currentValue": "low",
                    "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
                },
            ],
        }
    )
    assert state.choices("model") == ([("m1", "One"), ("m2", "Two")], "m2")
    assert state.choices("effort") == ([("low", "Low"), ("high", "High")], "low")
    assert state.option_ids == {"model": "model", "thought_level": "effort_x"}


@pytest.mark.slow
async def test_only_what_the_user_mentioned_is_attached(tmp_path: Path) -> None:
    """``/share`` sends the command's output as text: a ``@path`` in it attaches nothing. A typed mention
    that leads outside the workspace (a link to a key) is asked for, and declined stays text."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "key").write_text("BEGIN PRIVATE KEY\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "log.txt").write_text("".join(f"{n}\n" for n in range(40)) + f"see @{outside}/key\n")
    (work / "deploy.txt").symlink_to(outside / "key")
    turns = [Turn(text="Seen."), Turn(text="Seen too.")]
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        typed = Typed("!cat log.txt", "/share what is this?", "explain @deploy.txt", answers=("n",))
        code, shown = await run_chat(work, server, typed, cwd=str(work))
        sent = [content for _, content in messages(server, 0)] + [content for _, content in messages(server, 1)]
    assert code == 0
    assert typed.questions == [f"@deploy.txt leads to {outside}/key, which is outside the workspace. Attach it? [y/N] "]
    assert "@deploy.txt is not attached" in shown
    assert any(f"see @{outside}/key" in content for content in sent)  # the output, as text
    assert not any("BEGIN PRIVATE KEY" in content for content in sent)


async def test_a_bang_command_runs_in_the_users_shell_and_a_cancel_kills_it(tmp_path: Path) -> None:
    from refagent.client.chat_shell import KEPT_BYTES, run_shell

    done = await run_shell("echo $0 >/dev/null; pwd; echo oops >&2; exit 2", str(tmp_path))
    assert done.output == f"{tmp_path}\noops\n"
    assert (done.exit_code, done.ending()) == (2, "exit 2")
    big = await run_shell(f"head -c {3 * KEPT_BYTES} /dev/zero | tr '\\0' x; echo END", str(tmp_path))
    assert big.output.endswith("END\n")
    assert f"\n[... {KEPT_BYTES + 4} bytes omitted ...]\n" in big.output  # 3 x KEPT + "END\n", both ends kept
    with anyio.fail_after(5), anyio.move_on_after(0.5):
        await run_shell(f"sleep 30; touch {tmp_path}/late", str(tmp_path))
    await anyio.sleep(0.2)
    assert not (tmp_path / "late").exists()
    assert done.prompt("why?").startswith("why?\n\nI ran `echo $0")


def test_shift_tab_cycles_every_mode_but_full_access() -> None:
    state = ChatState()
    modes = ["ask", "accept-edits", "auto", "read-only", "full-access"]
    state.adopt("s", {"modes": {"currentModeId": "ask", "availableModes": [{"id": m, "name": m} for m in modes]}})
    seen = []
    for _ in range(5):
        following = state.next_mode()
        assert following is not None
        seen.append(following)
        state.mode = following
    assert seen == ["accept-edits", "auto", "read-only", "ask", "accept-edits"]
    state.mode = "full-access"  # named, then confirmed: Shift-Tab goes back to the first mode
    assert state.next_mode() == "ask"


@pytest.mark.slow
async def test_full_access_is_set_only_after_a_yes_that_says_what_it_allows(tmp_path: Path) -> None:
    typed = Typed("/mode full-access", "/mode full-access", "/mode", answers=("n", "y", "5"))
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, typed)
    assert code == 0
    assert server.chat_requests == []
    assert typed.questions[:2] == ["Switch to full access? [y/N] "] * 2
    assert "Full access: Never ask." in shown
    assert "Mode unchanged: Ask." in shown
    assert "Mode: Full access." in shown
    assert typed.questions[2].startswith("Mode (a number")
    assert len(typed.questions) == 3  # full access is the current mode by then: no question


@pytest.mark.slow
async def test_an_unknown_slash_command_is_refused_not_sent(tmp_path: Path) -> None:
    wire = io.StringIO()
    state = Announcing()

    async def announced() -> str:  # the user types once the agent has announced its commands
        await state.announced.wait()
        return ""

    typed = Typed(announced, "/udno", "/usr/bin/env fails, why?")
    with ScriptedOpenAIServer([Turn(text="A path, then.")], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, typed, state=state, transcript=wire)
    assert code == 0
    assert "Unknown command /udno: not sent. Did you mean /undo?" in shown
    listed = shown[shown.index("Commands: ") :].splitlines()[0]
    assert "/help" in listed  # the chat's
    assert "/compact" in listed  # the agent's, from its available_commands_update
    prompts = [
        m["params"]["prompt"][0]["text"]
        for m in check_transcript(wire.getvalue()).sent_by("client")
        if m.get("method") == "session/prompt"
    ]  # type: ignore[index]
    assert prompts == ["/usr/bin/env fails, why?"]  # a path is a prompt, not a command


def two_models(tmp_path: Path, server: ScriptedOpenAIServer) -> dict[str, str]:
    """An agent with two model profiles, ``one`` (the default) and ``two``, both ``server``."""
    config_file = tmp_path / "config.toml"
    profile = f'base_url = "{server.base_url}"\napi_key = "{KEY}"\n'
    config_file.write_text(
        f'default_profile = "one"\n[profiles.one]\nmodel = "m"\n{profile}[profiles.two]\nmodel = "m2"\n{profile}'
    )
    return agent_env(tmp_path / "home", REFAGENT_CONFIG=str(config_file))


@pytest.mark.slow
async def test_new_keeps_the_model_and_the_mode_chosen(tmp_path: Path) -> None:
    wire = io.StringIO()
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        typed = Typed("/model two", "/mode auto", "/new")
        code, shown = await run_chat(tmp_path, server, typed, env=two_models(tmp_path, server), transcript=wire)
    assert code == 0
    sent = check_transcript(wire.getvalue()).sent_by("client")
    methods = [m.get("method") for m in sent]
    assert methods.count("session/new") == 2
    after = sent[len(methods) - 1 - methods[::-1].index("session/new") :]  # what the chat sent after /new
    options = [
        (m["params"]["configId"], m["params"]["value"]) for m in after if m.get("method") == "session/set_config_option"
    ]  # type: ignore[index]
    assert options == [("model", "two"), ("mode", "auto")]
    assert "Kept from the previous session: model two: m2 (local" in shown
    assert ", mode Auto." in shown


@pytest.mark.slow
async def test_resume_without_an_id_offers_the_recent_sessions(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="First answer."), Turn(text="Again.")], api_key=KEY) as server:
        code, _ = await run_chat(tmp_path, server, Typed("the first one"))
        assert code == 0
        typed = Typed("and now?", answers=("9", "1"))
        code, shown = await run_chat(tmp_path, server, typed, resume="")
    assert code == 0
    assert "Recent sessions:" in shown
    assert "the first one" in shown  # its title
    assert typed.questions == ["Resume which? (1-1; Enter: a new session) "] * 2  # 9 is not one of them
    assert "Resumed session sess_" in shown
    assert messages(server)[:2] == [("user", "the first one"), ("assistant", "First answer.")]


@pytest.mark.slow
async def test_a_prompt_on_the_command_line_and_a_mode_start_the_chat(tmp_path: Path) -> None:
    with ScriptedOpenAIServer([Turn(text="Fixed.")], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed(), prompt="fix it", mode="auto")
        assert messages(server) == [("user", "fix it")]
    assert code == 0
    assert "Mode: Auto (--mode)." in shown
    assert "› fix it" in shown  # shown as typed at the prompt
    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed(), mode="yolo")
    assert code == 2
    assert "--mode yolo: the agent has no such mode (ask, accept-edits, auto, read-only, full-access)." in shown


def test_the_mode_picker_says_what_each_mode_does() -> None:
    from refagent.client.chat_pickers import picker_block

    state = ChatState()
    modes = [{"id": "ask", "name": "Ask", "description": "Ask before every edit."}, {"id": "auto", "name": "Auto"}]
    state.adopt("s", {"modes": {"currentModeId": "ask", "availableModes": modes}})
    about = {value: text for (kind, value), text in state.described.items() if kind == "mode"}
    assert picker_block("Mode", state.modes, state.mode, about).plain.splitlines() == [
        "Mode:",
        "  1. ● Ask  (ask)  current",
        "       Ask before every edit.",
        "  2. ○ Auto  (auto)",
    ]


@pytest.mark.slow
async def test_a_rejected_call_is_said_for_the_user_and_the_banner_is_spaced(tmp_path: Path) -> None:
    write = Turn(tool_calls=[ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"})])
    with ScriptedOpenAIServer([write, Turn(text="Fine.")], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed("write it", answers=("n",)))
        assert "Do not retry it" in messages(server)[-1][1]  # the model is told
    assert code == 0
    assert "✗ Create hello.txt (edit)\n    not run: you rejected it" in shown
    assert "Do not retry" not in shown  # the user is not told what the model is
    assert re.search(r"refagent \S+ · ACP v1 · ", shown)


@pytest.mark.slow
async def test_a_broken_configuration_is_said_when_the_session_opens(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[profiles.work\nmodel = 'x'\n")
    env = agent_env(tmp_path / "home", REFAGENT_CONFIG=str(broken))
    view: list[Watching] = []

    async def noticed() -> str:  # the user has not typed anything yet
        await view[0].noticed.wait()
        return ""

    async def keep(chat: Chat, watching: Watching) -> None:
        view.append(watching)

    with ScriptedOpenAIServer([], api_key=KEY) as server:
        code, shown = await run_chat(tmp_path, server, Typed(noticed), env=env, during=keep)
    assert code == 0
    assert "✗ The configuration is broken: " in shown
    assert "not valid TOML" in " ".join(shown.split())  # said at once: no prompt was sent


def test_a_long_prompt_is_shown_wrapped_between_words() -> None:
    from refagent.client.chat import prompt_line

    out = io.StringIO()
    Console(file=out, width=24, color_system=None).print(prompt_line("please fix the failing tests in shop"))
    assert [line.rstrip() for line in out.getvalue().splitlines()] == ["› please fix the failing", "  tests in shop"]
