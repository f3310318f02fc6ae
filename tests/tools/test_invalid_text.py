"""Text no path, pattern or command can be made of, in any argument of any tool, on both backends: a NUL
byte (file content aside), an unpaired surrogate (``\\ud800``, which nothing encodes), a pattern too long
to hand to ripgrep. Each is a failed call whose result names the argument and what is wrong with it;
never an internal error, never a traceback in the log, never an ``fs/*`` or ``terminal/*`` request or a
changed file. A ``surrogateescape`` byte (``\\udc80``) is refused too, but in a path or a command line,
where it names a file whose name is not UTF-8: such a name is used on the disk, and never sent to the
editor (the wire would make it another name).

The calls go through a real agent (the in-memory editor, every message checked against the ACP schema),
with the local disk (no ``fs`` capability) and with the editor's ``fs/*`` methods."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from refagent.llm.protocol import ToolCallRequest
from refagent.llm.scripted import ScriptedModel, text
from refagent.settings import Settings
from refagent.testing.memory import FakeClient, connect
from refagent.tools.args import TextKind
from refagent.tools.search import MAX_PATTERN_BYTES

pytestmark = pytest.mark.anyio

FS = {"fs": {"readTextFile": True, "writeTextFile": True}}
BACKENDS: dict[str, dict[str, Any]] = {"disk": {}, "editor": FS}
BAD = {"nul": "a\x00b", "surrogate": "a\ud800b", "escaped-byte": "a\udc80b"}


def arguments(bad: str) -> list[tuple[str, dict[str, Any], str, TextKind]]:
    """``(tool, arguments, the argument that holds the bad text, its kind)`` for every argument that is a
    path, a pattern, a command, a question or a file's text."""
    patch = f"--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-hello\n+{bad}\n"
    return [
        ("read_file", {"path": bad}, "path", "name"),
        ("glob", {"pattern": bad}, "pattern", "text"),
        ("glob", {"pattern": f"/{bad}/*.py"}, "pattern", "text"),
        ("glob", {"pattern": "*.py", "path": bad}, "path", "name"),
        ("grep", {"pattern": bad}, "pattern", "text"),
        ("grep", {"pattern": bad, "literal": True}, "pattern", "text"),
        ("grep", {"pattern": "x", "path": bad}, "path", "name"),
        ("grep", {"pattern": "x", "glob": bad}, "glob", "text"),
        ("edit_file", {"path": bad, "old_string": "a", "new_string": "b"}, "path", "name"),
        ("write_file", {"path": bad, "content": "x"}, "path", "name"),
        ("delete_path", {"path": bad}, "path", "name"),
        ("move_path", {"source": bad, "destination": "moved.txt"}, "source", "name"),
        ("move_path", {"source": "f.txt", "destination": bad}, "destination", "name"),
        ("run_command", {"command": f"echo {bad}"}, "command", "name"),
        ("run_command", {"command": "echo hi", "cwd": bad}, "cwd", "name"),
        ("ask_user", {"question": f"Which {bad}?"}, "question", "text"),
        ("ask_user", {"question": "Which?", "choices": ["one", bad]}, "choices[1]", "text"),
        ("write_file", {"path": "new.txt", "content": bad}, "content", "content"),
        ("edit_file", {"path": "f.txt", "old_string": "hello", "new_string": bad}, "new_string", "content"),
        ("edit_file", {"path": "f.txt", "old_string": bad, "new_string": "b"}, "old_string", "content"),
        ("apply_patch", {"patch": patch}, "patch", "content"),
        ("apply_patch", {"patch": f"--- /dev/null\n+++ b/{bad}\n@@ -0,0 +1 @@\n+x\n"}, "patch", "content"),
    ]


def refused(bad: str, kind: TextKind) -> bool:
    if bad == BAD["nul"]:
        return kind != "content"
    return bad == BAD["surrogate"] or kind != "name"


def expected(bad: str, name: str, value: str) -> str:
    if bad == BAD["nul"]:
        return f"Error: Argument {name!r} contains a NUL byte (at character {value.index(chr(0))}), which no"
    index = next(i for i, char in enumerate(value) if "\ud800" <= char <= "\udfff")
    return f"Error: Argument {name!r} holds an unpaired surrogate (\\u{ord(value[index]):04x} at character {index})"


def value_of(args: dict[str, Any], name: str) -> str:
    if name.startswith("choices["):
        return str(args["choices"][int(name[8:-1])])
    return str(args[name])


async def run_calls(
    workspace: Path, capabilities: dict[str, Any], calls: list[tuple[str, dict[str, Any]]], check: Any
) -> tuple[list[str], list[dict[str, Any]], FakeClient, list[dict[str, Any]]]:
    """All ``calls`` in one model response, in full-access mode; the results the model read (in order),
    the calls' final updates, the editor, and what the agent sent it."""
    requests = [ToolCallRequest(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(calls)]
    model = ScriptedModel([requests, text("done")])
    client = FakeClient()
    client.files[str(workspace / "f.txt")] = "hello\n"
    async with connect(Settings(make_model=lambda p: model), client=client, check=check) as editor:
        await editor.initialize(capabilities)
        sid = await editor.new_session(str(workspace))
        await editor.request("session/set_mode", {"sessionId": sid, "modeId": "full-access"})
        assert await editor.prompt(sid, "go") == {"stopReason": "end_turn"}
        final = [u for u in editor.updates(sid) if u.get("status") in ("completed", "failed")]
        sent = editor.transcript.sent_by("agent")
    tool_messages = {m["tool_call_id"]: m["content"] for m in model.requests[-1].messages if m["role"] == "tool"}
    return [tool_messages[r.id] for r in requests], final, client, sent


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f.txt").write_text("hello\n")
    return root


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing at warning or above, and no traceback at any level."""
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in loud)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
async def test_invalid_text_in_an_argument_is_a_failed_call_that_says_so(
    workspace: Path, backend: str, bad: str, check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cases = [(name, args, arg) for name, args, arg, kind in arguments(bad) if refused(bad, kind)]
    with caplog.at_level(logging.DEBUG):
        results, final, client, sent = await run_calls(
            workspace, BACKENDS[backend], [(name, args) for name, args, _ in cases], check
        )
    wanted = [expected(bad, arg, value_of(args, arg)) for _, args, arg in cases]
    wrong = [
        f"{name} {json.dumps(args)}:\n  got      {result[:200]!r}\n  expected {want!r}"
        for (name, args, _), result, want in zip(cases, results, wanted, strict=True)
        if not result.startswith(want)
    ]
    assert not wrong, "\n".join(wrong)
    assert [u["status"] for u in final] == ["failed"] * len(cases)
    assert_quiet(caplog)
    assert not [m for m in sent if str(m.get("method", "")).startswith(("fs/", "terminal/"))]
    assert client.files == {str(workspace / "f.txt"): "hello\n"}
    assert os.listdir(workspace) == ["f.txt"]
    assert (workspace / "f.txt").read_text() == "hello\n"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_name_that_is_not_utf8_is_used_on_the_disk(workspace: Path, backend: str, check: Any) -> None:
    """``caf\\udcff.txt`` names the file ``caf\\xff.txt``; through the editor too, the disk is where it
    is written and read (the editor would be sent ``caf\\ufffd.txt``, another file). (No check of the log:
    the file watcher may warn of the name, on its own time.)"""
    name = "caf\udcff.txt"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": name, "content": "new\n"}),
        ("read_file", {"path": name}),
        ("edit_file", {"path": name, "old_string": "new", "new_string": "newer"}),
    ]
    results, final, client, sent = await run_calls(workspace, BACKENDS[backend], calls, check)
    assert results[0].startswith("Created caf\\udcff.txt"), results[0]
    assert "new" in results[1]
    assert results[2].startswith("Edited caf\\udcff.txt"), results[2]
    assert [u["status"] for u in final] == ["completed"] * 3
    assert (workspace / os.fsdecode(b"caf\xff.txt")).read_bytes() == b"newer\n"
    assert not [m for m in sent if str(m.get("method", "")).startswith("fs/")]
    assert list(client.files) == [str(workspace / "f.txt")]


async def test_a_command_with_a_name_that_is_not_utf8_is_not_sent_to_the_editors_terminal(
    workspace: Path, check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The editor's terminal would run ``cat caf\\ufffd.txt``, not the command the model wrote."""
    calls: list[tuple[str, dict[str, Any]]] = [("run_command", {"command": "cat caf\udcff.txt"})]
    with caplog.at_level(logging.DEBUG):
        results, final, _, sent = await run_calls(workspace, {"terminal": True}, calls, check)
    assert results[0].startswith(
        "Error: The command or its working directory holds a byte of a file name that is not UTF-8"
    ), results[0]
    assert [u["status"] for u in final] == ["failed"]
    assert not [m for m in sent if str(m.get("method", "")).startswith("terminal/")]
    assert_quiet(caplog)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_nul_byte_in_a_path_inside_a_patch_is_refused_by_the_policy(
    workspace: Path, backend: str, check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    patches = [
        "--- /dev/null\n+++ b/a\x00b\n@@ -0,0 +1 @@\n+x\n",
        "--- a/a\x00b\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n",
    ]
    with caplog.at_level(logging.DEBUG):
        results, final, _, _ = await run_calls(
            workspace, BACKENDS[backend], [("apply_patch", {"patch": p}) for p in patches], check
        )
    assert results == ["Error: The path 'a\\\\x00b' contains a NUL byte; no file can have that name."] * 2
    assert [u["status"] for u in final] == ["failed", "failed"]
    assert_quiet(caplog)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_pattern_too_long_for_ripgreps_command_line_is_refused(
    workspace: Path, backend: str, check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    long = "a" * 200_000
    calls: list[tuple[str, dict[str, Any]]] = [
        ("glob", {"pattern": long}),
        ("grep", {"pattern": long}),
        ("grep", {"pattern": "x", "glob": long}),
        ("grep", {"pattern": "a" * MAX_PATTERN_BYTES}),  # the longest allowed: searched
    ]
    with caplog.at_level(logging.DEBUG):
        results, final, _, _ = await run_calls(workspace, BACKENDS[backend], calls, check)
    for name, result in zip(["pattern", "pattern", "glob"], results, strict=False):
        assert result.startswith(
            f"Error: Argument {name!r} is 200,000 bytes long; a pattern is at most {MAX_PATTERN_BYTES:,} bytes."
        ), result
    assert results[3] == "No matches for `" + "a" * MAX_PATTERN_BYTES + "`."
    assert [u["status"] for u in final] == ["failed", "failed", "failed", "completed"]
    assert_quiet(caplog)


async def test_a_nul_byte_is_file_content_like_any_other(workspace: Path, check: Any) -> None:
    """Where an argument is a file's text, a NUL byte is written as it is (and the file is binary then)."""
    calls: list[tuple[str, dict[str, Any]]] = [("write_file", {"path": "new.txt", "content": "a\x00b\n"})]
    results, final, _, _ = await run_calls(workspace, {}, calls, check)
    assert results == ["Created new.txt (1 lines)."]
    assert [u["status"] for u in final] == ["completed"]
    assert (workspace / "new.txt").read_bytes() == b"a\x00b\n"
