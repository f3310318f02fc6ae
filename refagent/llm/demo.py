"""The built-in demo model: a scripted :class:`~refagent.llm.protocol.ModelClient` that plays a realistic
coding session on ``refagent/demo-project`` (``refagent demo``, ``make demo``, ``refagent --demo``), with no
API key and no network.

It is not a recording. Like a real model, it decides each response from the request: the tool calls it
made since the user's last prompt and what they returned. So it works whatever the tool call ids, the
paths or the order of the messages, and it reacts honestly when something does not go to plan (a call the
user declined, tests that already pass, code that is not the demo project's). The session it plays:

1. make a plan, and run the tests (``python3 -m unittest``);
2. read the failure: which test, which function it calls; search for that function's definition;
3. read the file it is in;
4. find the off-by-one comparison, explain it, and fix it with ``edit_file`` (a diff, and a permission
   request in the default mode);
5. run the tests again;
6. mark the plan done and sum up.

``pace`` slows the stream down to a readable speed (seconds per word; ``$REFAGENT_DEMO_PACE``, default
0.02); tests use 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from refagent.llm.profiles import DEMO_CLIENT, SCRIPTED, ModelProfile
from refagent.llm.protocol import Finished, ModelEvent, ModelRequest, ReasoningDelta, TextDelta, ToolCallRequest

PACE_ENV = "REFAGENT_DEMO_PACE"
DEFAULT_PACE = 0.02
FALLBACK_FUNCTION = "line_total"
"""What to look for when the tests could not be run (the demo project's buggy function)."""

STEPS = (
    "Run the tests and read the failure",
    "Find the code behind the failing test",
    "Fix the bug",
    "Run the tests again to confirm the fix",
)

_FAIL = re.compile(r"^(?:FAIL|ERROR): (\w+)", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "[^"]+", line \d+, in (\w+)\n(.*)$', re.MULTILINE)
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_ERROR = re.compile(r"^(\w*Error): (.*)$", re.MULTILINE)
_RAN = re.compile(r"^Ran (\d+) tests?", re.MULTILINE)
_HIT = re.compile(r"^(.+?):(\d+):(.*)$")
_NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")
_OFF_BY_ONE = re.compile(r"^(\s*(?:if|elif|while) .*?\w) > (\w.*):\s*$")
_NOT_CALLS = frozenset({"self", "len", "str", "int", "float", "list", "dict", "set", "tuple", "print", "range"})


def demo_profile() -> ModelProfile:
    """The model picker's entry for the demo model (the scripted profile: it needs no key)."""
    return ModelProfile(
        id=SCRIPTED,
        name="Built-in demo model (scripted)",
        model="demo",
        description="A scripted model that plays a demo session on refagent's demo project: no key, no network.",
        client=DEMO_CLIENT,
    )


def demo_model(pace: float | None = None) -> DemoModel:
    """The demo model; ``pace`` defaults to ``$REFAGENT_DEMO_PACE``, else :data:`DEFAULT_PACE`."""
    if pace is None:
        try:
            pace = float(os.environ.get(PACE_ENV, "") or DEFAULT_PACE)
        except ValueError:
            pace = DEFAULT_PACE
    return DemoModel(pace=max(0.0, pace))


def test_command() -> str:
    """How the demo runs the project's tests: ``python3`` when there is one, else this interpreter."""
    return "python3 -m unittest" if shutil.which("python3") else f"{shlex.quote(sys.executable)} -m unittest"


class DemoModel:
    """A :class:`~refagent.llm.protocol.ModelClient`; :meth:`respond` is the pure decision."""

    def __init__(self, pace: float = 0.0, command: str | None = None) -> None:
        self.pace = pace
        self.command = command or test_command()
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        return self._play(self.respond(request), calls=sum(m.get("role") == "assistant" for m in request.messages))

    async def _play(self, events: Sequence[ModelEvent], calls: int) -> AsyncIterator[ModelEvent]:
        requested = False
        for index, event in enumerate(events):
            if isinstance(event, ToolCallRequest):
                requested = True
                event = ToolCallRequest(f"demo_{calls}_{index}", event.name, event.arguments)
                await anyio.sleep(self.pace * 5)  # a model "types" its arguments too
            else:
                await anyio.sleep(self.pace)
            yield event
        yield Finished("tool_calls" if requested else "stop")

    def respond(self, request: ModelRequest) -> list[ModelEvent]:
        """The next response, from the calls made since the user's last prompt and their results."""
        return _Session(_calls_this_turn(request.messages), self.command).next_response()


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    args: dict[str, Any]
    result: str

    @property
    def refused(self) -> bool:
        return self.result.startswith("Not run:")

    @property
    def failed(self) -> bool:
        return self.result.startswith("Error:")

    @property
    def exit_code(self) -> int | None:
        found = re.search(r"^Exit code: (-?\d+)", self.result, re.MULTILINE)
        return int(found.group(1)) if found else None


def _calls_this_turn(messages: list[dict[str, Any]]) -> list[_Call]:
    """The tool calls (with their results) since the last message the user typed."""
    start = 0
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "user" and not (isinstance(content, str) and content.startswith("<system-")):
            start = index
    results = {m.get("tool_call_id"): str(m.get("content", "")) for m in messages[start:] if m.get("role") == "tool"}
    calls = []
    for message in messages[start:]:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            function = call.get("function", {})
            try:
                args = json.loads(function.get("arguments") or "{}")
            except ValueError:
                args = {}
            calls.append(
                _Call(function.get("name", ""), args if isinstance(args, dict) else {}, results.get(call.get("id"), ""))
            )
    return calls


class _Session:
    """Decides one response. Each ``_after_*`` method is one step of the module docstring."""

    def __init__(self, calls: list[_Call], command: str) -> None:
        self.command = command
        self.runs = [c for c in calls if c.name == "run_command"]
        self.greps = [c for c in calls if c.name == "grep"]
        self.reads = [c for c in calls if c.name == "read_file"]
        self.edits = [c for c in calls if c.name == "edit_file"]
        last = calls[-1] if calls else None
        self.finished = last is not None and last.name == "update_plan" and _all_done(last.args)
        """The last call marked the whole plan done: all that is left is to say so."""

    def next_response(self) -> list[ModelEvent]:
        if self.finished:
            return self._summary()
        if self.edits:
            return self._after_edit() if len(self.runs) < 2 else self._after_second_run()
        if self.reads:
            return self._after_read()
        if self.greps:
            return self._after_grep()
        if self.runs:
            return self._after_first_run()
        return self._start()

    # -- the steps ----------------------------------------------------------------------------------

    def _start(self) -> list[ModelEvent]:
        return [
            *_think("The user says the tests fail. Running them first shows which test fails, and why."),
            *_say("I'll start by running the test suite to see what fails."),
            _plan(0),
            _tool("run_command", command=self.command),
        ]

    def _after_first_run(self) -> list[ModelEvent]:
        run = self.runs[0]
        if run.refused or run.failed or run.exit_code is None:
            return [
                *_say(f"I could not run the tests ({_first_line(run.result)}). I'll look at the code instead. "),
                _plan(1),
                _tool("grep", pattern=f"def {FALLBACK_FUNCTION}", glob="*.py"),
            ]
        if _RAN.search(run.result) is None or _ran(run.result) == "0 tests":
            return [
                *_say(
                    "I found no tests to run here. This scripted demo model only knows the project of "
                    "`refagent demo`; configure a real model for anything else."
                )
            ]
        if run.exit_code == 0:
            return [*_say("The tests pass. "), _plan(4)]
        failure = _failure(run.result)
        if failure is None:
            return [*_say("The tests fail, but I cannot tell from their output which test or why, so I stop here.")]
        test, function, error = failure
        what = f" with `{error}`" if error else ""
        return [
            *_say(f"One test fails: `{test}`{what}. It calls `{function}`; let me find where that is defined. "),
            _plan(1),
            _tool("grep", pattern=f"def {function}", glob="*.py"),
        ]

    def _after_grep(self) -> list[ModelEvent]:
        grep = self.greps[-1]
        hit = next((m for line in grep.result.splitlines() if (m := _HIT.match(line))), None)
        if grep.refused or grep.failed or hit is None:
            return [*_say(f"I could not find that definition ({_first_line(grep.result)}), so I stop here.")]
        return [*_say(f"It is defined in `{hit.group(1)}`. Let me read it. "), _tool("read_file", path=hit.group(1))]

    def _after_read(self) -> list[ModelEvent]:
        read = self.reads[-1]
        path = str(read.args.get("path", ""))
        lines = [m.group(2) for line in read.result.splitlines() if (m := _NUMBERED.match(line))]
        buggy = next((line for line in lines if _OFF_BY_ONE.match(line)), None)
        if read.failed or read.refused or buggy is None:
            return [
                *_say(
                    f"I read `{path}` but found no off-by-one comparison there. This scripted demo model only "
                    "knows the bug of `refagent demo`; configure a real model for anything else."
                )
            ]
        fixed = buggy.replace(" > ", " >= ", 1)
        match = _OFF_BY_ONE.match(buggy)
        assert match is not None
        condition = f"{match.group(1).split(maxsplit=1)[1]} > {match.group(2)}"
        failed = bool(self.runs) and self.runs[0].exit_code not in (None, 0)
        sources = "the documentation and the failing test say" if failed else "the documentation says"
        return [
            *_say(
                f"Found it. The code applies the discount only when `{condition}`, but {sources} it starts "
                "*at* that quantity: an off-by-one. The comparison should be `>=`. "
            ),
            _plan(2),
            _tool("edit_file", path=path, old_string=buggy, new_string=fixed),
        ]

    def _after_edit(self) -> list[ModelEvent]:
        edit = self.edits[-1]
        path = edit.args.get("path", "the file")
        if edit.refused or edit.failed:
            old, new = str(edit.args.get("old_string", "")).strip(), str(edit.args.get("new_string", "")).strip()
            why = _first_line(edit.result)
            reason = "You declined the edit" if why == "you declined it" else f"The edit was not made ({why})"
            return [*_say(f"{reason}, so `{path}` is unchanged. The fix is to replace `{old}` with `{new}`.")]
        return [*_say("Now let me run the tests again. "), _plan(3), _tool("run_command", command=self.command)]

    def _after_second_run(self) -> list[ModelEvent]:
        run = self.runs[-1]
        if run.exit_code == 0:
            return [*_say("All green. "), _plan(4)]
        if run.exit_code is None:
            return [*_say(f"The fix is in place, but I could not run the tests ({_first_line(run.result)}).")]
        return [*_say("The tests still fail after the fix; the output above says why.")]

    def _summary(self) -> list[ModelEvent]:
        run = self.runs[-1] if self.runs else None
        ran = _ran(run.result) if run else "the tests"
        if not self.edits:
            return _say(f"All {ran} pass already: there is nothing to fix.")
        edit = self.edits[-1]
        old, new = str(edit.args.get("old_string", "")).strip(), str(edit.args.get("new_string", "")).strip()
        return _say(
            f"Fixed. In `{edit.args.get('path')}`, the bulk discount applied only *above* the bulk quantity, "
            f"while the documentation and the test say it starts *at* it. I changed `{old}` to `{new}`, and all "
            f"{ran} pass now."
        )


# -- building responses ---------------------------------------------------------------------------------


def _say(text: str) -> list[ModelEvent]:
    words = text.split(" ")
    return [TextDelta(w + (" " if i < len(words) - 1 else "")) for i, w in enumerate(words) if w]


def _think(text: str) -> list[ModelEvent]:
    return [ReasoningDelta(e.text) for e in _say(text) if isinstance(e, TextDelta)]


def _tool(name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest("", name, json.dumps(args))


def _plan(done: int) -> ToolCallRequest:
    """The plan with ``done`` steps completed and the next one in progress."""
    statuses = ["completed" if i < done else "in_progress" if i == done else "pending" for i in range(len(STEPS))]
    entries = [{"content": s, "status": st, "priority": "high"} for s, st in zip(STEPS, statuses, strict=True)]
    return _tool("update_plan", entries=entries)


# -- reading results ------------------------------------------------------------------------------------


def _failure(output: str) -> tuple[str, str, str] | None:
    """(failing test, the function its failing line calls, the error) from unittest's output."""
    test = _FAIL.search(output)
    if test is None:
        return None
    frames = [m for m in _FRAME.finditer(output) if m.group(1).startswith("test")]
    called = [name for name in _CALL.findall(frames[-1].group(2)) if name not in _NOT_CALLS] if frames else []
    called = [name for name in called if not name.startswith("assert")]
    error = _ERROR.search(output)
    return test.group(1), called[0] if called else FALLBACK_FUNCTION, error.group(0) if error else ""


def _all_done(args: dict[str, Any]) -> bool:
    entries = args.get("entries")
    return (
        isinstance(entries, list)
        and bool(entries)
        and all(isinstance(e, dict) and e.get("status") == "completed" for e in entries)
    )


def _ran(output: str) -> str:
    found = _RAN.search(output)
    return f"{found.group(1)} tests" if found else "the tests"


def _first_line(text: str) -> str:
    """Why a call did not go through, in a few words."""
    line = (text.strip().splitlines() or ["no output"])[0].removeprefix("Not run: ").removeprefix("Error: ")
    if "declined" in line:
        return "you declined it"
    if "read-only mode" in line:
        return "the session is in read-only mode"
    return line[:200].rstrip(".")
