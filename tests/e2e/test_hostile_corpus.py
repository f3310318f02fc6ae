"""A corpus of attacks, each against a real ``refagent`` process: hostile repositories, hostile model calls
and hostile editor answers. The model is the scripted OpenAI-compatible server on 127.0.0.1; the editor is
this test, over the agent's real stdin and stdout, with every message checked against the ACP schema.

For every case, whatever the attack:
- the agent answers the prompt (a clear error or a safe refusal goes back to the model),
- nothing outside the workspace changes (a snapshot of another project and of a file in ``$HOME``),
- the agent keeps serving: a second prompt in the same session answers,
- and the case's own check holds (what the model was told, what the editor saw).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn
from tests.support.helpers_process import AgentProcess, agent_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "sk-corpus-key-never-to-leak"
SECRET = "outside secret\n"


@dataclass
class World:
    """One case's disk: the workspace, another project beside it, and the agent's home."""

    workspace: Path
    outside: Path
    home: Path

    def snapshot(self) -> dict[str, str]:
        seen: dict[str, str] = {}
        for base in (self.outside, self.home / "protected"):
            for directory, subdirectories, files in os.walk(base):
                for name in [*subdirectories, *files]:
                    path = os.path.join(directory, name)
                    info = os.lstat(path)
                    digest = ""
                    if os.path.isfile(path) and not os.path.islink(path):
                        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                    seen[path] = f"{info.st_mode:o} {info.st_mtime_ns} {info.st_nlink} {digest}"
        return seen


@dataclass
class Outcome:
    results: list[str]
    """What the model was told: the tool results of the first request after the calls."""
    updates: list[dict[str, Any]]
    permission_requests: list[dict[str, Any]]
    stderr: str
    fs_requests: list[tuple[str, str]] = field(default_factory=list)
    """The editor's ``fs/*`` requests: method and path."""
    largest_message: int = 0
    """Bytes of the largest line the agent wrote."""


Answer = Callable[[dict[str, Any]], dict[str, Any] | list[dict[str, Any]]]
"""The editor's answer to a permission request: one message, or several sent in order."""


def reject(request: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}


@dataclass
class Case:
    id: str
    calls: list[ToolCall]
    expect: Callable[[Outcome, World], None]
    setup: Callable[[World], None] = lambda world: None
    mode: str = "full-access"
    answer: Answer = reject
    """How the editor answers each permission request."""
    capabilities: dict[str, Any] = field(default_factory=dict)
    prompt: str = "go"
    """The first prompt's text, as it goes on the wire (a JSON string's contents, escapes and all)."""


def call(name: str, arguments: str | dict[str, Any]) -> ToolCall:
    return ToolCall(name, arguments)


def told(*needles: str) -> Callable[[Outcome, World], None]:
    """The model's first result mentions each needle (case-insensitive)."""

    def check(outcome: Outcome, world: World) -> None:
        text = outcome.results[0].lower()
        for needle in needles:
            assert needle.lower() in text, outcome.results[0]

    return check


def failed_cleanly(outcome: Outcome, world: World) -> None:
    """Every call failed, with a message, and none leaked the secret."""
    assert outcome.results
    statuses = [u.get("status") for u in outcome.updates if u.get("status") in ("completed", "failed")]
    assert "completed" not in statuses, statuses
    for result in outcome.results:
        assert result.strip()
        assert SECRET.strip() not in result


def no_leak(outcome: Outcome, world: World) -> None:
    for result in outcome.results:
        assert SECRET.strip() not in result
        assert KEY not in result


# -- the cases ------------------------------------------------------------------------------------------


def invalid_paths() -> Iterator[Case]:
    shapes = {
        "empty": "",
        "nul": "a\x00b",
        "very-long": "a/" * 5000 + "f",
        "dotdot": "../outside/secret.txt",
        "deep-dotdot": "sub/../../../../../../etc/passwd",
        "home": "~/.bashrc",
        "newline": "line\nbreak.txt",
        "file-url": "file:///etc/passwd",
        "windows": "C:\\Windows\\system32",
        "proc-environ": "/proc/self/environ",
        "dev-zero": "/dev/zero",
        "dot-git": ".git/config",
        "nested-git": "vendor/lib/.git/HEAD",
    }
    legal = {"newline", "file-url", "windows"}  # strange names, but inside the workspace: made, and shown
    for name, path in shapes.items():
        expect = no_leak if name in legal else failed_cleanly
        yield Case(f"write-{name}", [call("write_file", {"path": path, "content": "pwned"})], expect)
        yield Case(
            f"edit-{name}", [call("edit_file", {"path": path, "old_string": "a", "new_string": "b"})], failed_cleanly
        )
    for name in ("proc-environ", "dotdot", "dev-zero", "home"):
        yield Case(f"read-{name}", [call("read_file", {"path": shapes[name]})], no_leak)


def broken_arguments() -> Iterator[Case]:
    raw = {
        "not-json": "{path: x",
        "array": '["a", "b"]',
        "string": '"just a string"',
        "null": "null",
        "deep-nesting": "[" * 100_000 + "]" * 100_000,
        "huge-number": '{"path": "a", "offset": 1e999}',
        "nan": '{"path": "a", "offset": NaN}',
        "duplicate-keys": '{"path": "a", "path": "../outside/secret.txt"}',
        "lone-surrogate": '{"path": "\\ud800"}',
    }
    for name, arguments in raw.items():
        yield Case(f"args-{name}", [call("read_file", arguments)], no_leak)
    wrong_types = {
        "path-int": {"path": 3},
        "path-list": {"path": ["a"]},
        "path-object": {"path": {"a": 1}},
        "offset-string": {"path": "a", "offset": "1"},
        "offset-negative": {"path": "a", "offset": -5},
        "extra-argument": {"path": "a", "sudo": True},
    }
    for name, arguments in wrong_types.items():
        yield Case(f"types-{name}", [call("read_file", arguments)], failed_cleanly)
    yield Case("unknown-tool", [call("rm_everything", {})], told("no tool named"))
    yield Case("empty-tool-name", [call("", {})], no_leak)
    yield Case(
        "command-types",
        [
            call("run_command", {"command": ["rm", "-rf", "/"]}),
            call("run_command", {"command": "true", "timeout_seconds": -1}),
        ],
        failed_cleanly,
    )
    yield Case("command-nul", [call("run_command", {"command": "echo a\x00b"})], told("nul"))
    yield Case(
        "command-bad-sandbox", [call("run_command", {"command": "true", "sandbox": "root"})], told("must be one of")
    )
    yield Case("patch-garbage", [call("apply_patch", {"patch": "\x00\xff not a diff at all"})], failed_cleanly)
    yield Case(
        "patch-into-git",
        [call("apply_patch", {"patch": "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+evil\n"})],
        failed_cleanly,
    )
    yield Case(
        "patch-outside",
        [
            call(
                "apply_patch",
                {"patch": "--- a/../outside/secret.txt\n+++ b/../outside/secret.txt\n@@ -1 +1 @@\n-anything\n+pwned\n"},
            )
        ],
        failed_cleanly,
    )
    yield Case("plan-garbage", [call("update_plan", {"entries": [{"content": 5, "status": "nope"}]})], no_leak)


def hostile_model_calls() -> Iterator[Case]:
    def nested_repo(world: World) -> None:
        (world.workspace / "vendor" / "lib" / ".git").mkdir(parents=True)
        (world.workspace / "vendor" / "lib" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")

    def link_out(world: World) -> None:
        (world.workspace / "link").symlink_to(world.outside / "secret.txt")
        (world.workspace / "dirlink").symlink_to(world.outside, target_is_directory=True)

    def kept_nested_repo(outcome: Outcome, world: World) -> None:
        assert (world.workspace / "vendor" / "lib" / ".git" / "HEAD").exists()

    yield Case("delete-root", [call("delete_path", {"path": ".", "recursive": True})], failed_cleanly)
    yield Case(
        "delete-nested-git", [call("delete_path", {"path": "vendor", "recursive": True})], kept_nested_repo, nested_repo
    )
    yield Case(
        "move-git-out",
        [call("move_path", {"source": "vendor/lib/.git", "destination": "stolen"})],
        kept_nested_repo,
        nested_repo,
    )
    yield Case(
        "move-outside", [call("move_path", {"source": "a.txt", "destination": "../outside/a.txt"})], failed_cleanly
    )
    yield Case(
        "write-through-link", [call("write_file", {"path": "link", "content": "pwned"})], failed_cleanly, link_out
    )
    yield Case(
        "write-through-dirlink",
        [call("write_file", {"path": "dirlink/new.txt", "content": "pwned"})],
        failed_cleanly,
        link_out,
    )
    yield Case(
        "edit-through-link",
        [call("edit_file", {"path": "link", "old_string": "outside", "new_string": "pwned"})],
        failed_cleanly,
        link_out,
    )
    yield Case(
        "delete-through-dirlink", [call("delete_path", {"path": "dirlink/secret.txt"})], failed_cleanly, link_out
    )
    yield Case("read-through-link", [call("read_file", {"path": "link"})], no_leak, link_out)
    yield Case("grep-through-dirlink", [call("grep", {"pattern": "secret", "path": "dirlink"})], no_leak, link_out)
    yield Case("glob-absolute-outside", [call("glob", {"pattern": "/etc/**/*"})], no_leak)
    yield Case("grep-catastrophic", [call("grep", {"pattern": "(?=(a+)+b)", "path": "."})], no_leak, _long_line)
    yield Case(
        "command-escape",
        [
            call(
                "run_command",
                {"command": "echo pwned > ../outside/x; cat /proc/*/environ | grep -c sk-corpus; kill -9 $PPID; true"},
            )
        ],
        no_leak,
    )
    yield Case(
        "command-none-asks",
        [call("run_command", {"command": "true", "sandbox": "none"})],
        _asked_and_refused,
        mode="auto",
    )


def _long_line(world: World) -> None:
    (world.workspace / "long.txt").write_text("a" * 100_000 + "\n")


def _asked_and_refused(outcome: Outcome, world: World) -> None:
    assert [r["toolCall"]["title"] for r in outcome.permission_requests] == ["Run `true` (unconfined)"]
    assert "declined" in outcome.results[0]


def hostile_repositories() -> Iterator[Case]:
    def agents_md_link(target: str) -> Callable[[World], None]:
        def setup(world: World) -> None:
            (world.workspace / "AGENTS.md").symlink_to(target)

        return setup

    for name, target in (("secret", "{outside}/secret.txt"), ("environ", "/proc/self/environ")):
        yield Case(
            f"agents-md-{name}",
            [],
            _system_prompt_clean,
            lambda world, target=target: agents_md_link(target.format(outside=world.outside))(world),
        )

    def fifo(world: World) -> None:
        os.mkfifo(world.workspace / "pipe")

    yield Case("grep-fifo-tree", [call("grep", {"pattern": "x", "path": "."})], no_leak, fifo)
    yield Case("glob-fifo", [call("glob", {"pattern": "**/*"})], no_leak, fifo)
    yield Case("read-fifo", [call("read_file", {"path": "pipe"})], no_leak, fifo)

    def loop(world: World) -> None:
        (world.workspace / "a").mkdir()
        (world.workspace / "a" / "loop").symlink_to(world.workspace / "a", target_is_directory=True)

    yield Case("glob-symlink-loop", [call("glob", {"pattern": "**/*"})], no_leak, loop)
    yield Case("grep-symlink-loop", [call("grep", {"pattern": "x"})], no_leak, loop)

    def binary(world: World) -> None:
        (world.workspace / "blob.bin").write_bytes(bytes(range(256)) * 100)

    yield Case("read-binary", [call("read_file", {"path": "blob.bin"})], no_leak, binary)
    yield Case(
        "edit-binary", [call("edit_file", {"path": "blob.bin", "old_string": "a", "new_string": "b"})], no_leak, binary
    )


def _system_prompt_clean(outcome: Outcome, world: World) -> None:
    pass  # checked for every case in run_case: no request to the model carries the secret or the key


def hostile_editor_answers() -> Iterator[Case]:
    def answering(result: Any) -> Answer:
        return lambda request: {"jsonrpc": "2.0", "id": request["id"], "result": result}

    malformed = {
        "null": None,
        "empty": {},
        "outcome-string": {"outcome": "allow"},
        "unknown-option": {"outcome": {"outcome": "selected", "optionId": "yes-please"}},
        "option-not-string": {"outcome": {"outcome": "selected", "optionId": ["allow"]}},
        "list": [1, 2, 3],
    }
    for name, result in malformed.items():
        yield Case(
            f"permission-{name}",
            [call("write_file", {"path": "a.txt", "content": "changed"})],
            _not_written,
            mode="ask",
            answer=answering(result),
        )

    def error(request: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": "the editor broke"}}

    yield Case(
        "permission-error",
        [call("write_file", {"path": "a.txt", "content": "changed"})],
        _not_written,
        mode="ask",
        answer=error,
    )

    def wrong_request_first(request: dict[str, Any]) -> list[dict[str, Any]]:
        """An "allow" for a request the agent never sent, and one with the id as a string, then the real
        answer: a rejection."""
        allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        return [
            {"jsonrpc": "2.0", "id": 987654, "result": allow},
            {"jsonrpc": "2.0", "id": str(request["id"]), "result": allow},
            reject(request),
        ]

    def twice(request: dict[str, Any]) -> list[dict[str, Any]]:
        """A rejection, then an "allow" for the same request: the first answer stands."""
        allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        return [reject(request), {"jsonrpc": "2.0", "id": request["id"], "result": allow}]

    for name, answer in (("wrong-request", wrong_request_first), ("answered-twice", twice)):
        yield Case(
            f"permission-{name}",
            [call("write_file", {"path": "a.txt", "content": "changed"})],
            _not_written,
            mode="ask",
            answer=answer,
        )


def _not_written(outcome: Outcome, world: World) -> None:
    assert (world.workspace / "a.txt").read_text() == "original\n"


def allow(request: dict[str, Any], option: str = "allow") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}}


def first_always_then_reject() -> Answer:
    """ "Always allow" for the first request, a rejection for every later one."""
    answered: list[str] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        answered.append(request["params"]["toolCall"]["title"])
        return allow(request, "allow-always") if len(answered) == 1 else reject(request)

    return answer


def swap_then_allow(request: dict[str, Any]) -> dict[str, Any]:
    """While the user reads the prompt, ``sub`` in the workspace becomes a link to the project beside it."""
    target = Path(request["params"]["toolCall"]["locations"][0]["path"])
    workspace = target.parent.parent
    os.rename(workspace / "sub", workspace / "sub.orig")
    os.symlink(workspace.parent / "outside", workspace / "sub")
    return allow(request)


def the_rest_of_the_classes() -> Iterator[Case]:
    fs = {"fs": {"readTextFile": True, "writeTextFile": True}}

    def notes(world: World) -> None:
        (world.workspace / "sub" / "notes.txt").write_text("inside\n")
        (world.outside / "notes.txt").write_text("public\n")
        (world.outside / "deeper").mkdir()

    def no_editor_write(outcome: Outcome, world: World) -> None:
        assert [m for m, _ in outcome.fs_requests if m == "fs/write_text_file"] == []
        assert "changed while the call waited" in outcome.results[0]

    yield Case(
        "editor-race-during-permission",
        [call("edit_file", {"path": "sub/notes.txt", "old_string": "inside", "new_string": "pwned"})],
        no_editor_write,
        notes,
        mode="ask",
        answer=swap_then_allow,
        capabilities=fs,
    )

    def asked_twice(outcome: Outcome, world: World) -> None:
        assert len(outcome.permission_requests) == 2, [r["toolCall"]["title"] for r in outcome.permission_requests]
        assert not (world.workspace / "X").exists()

    yield Case(
        "always-allow-git-grep-then-pager",
        [
            call("run_command", {"command": "git grep -n x"}),
            call("run_command", {"command": "git grep --open-files-in-pager='touch X;:' x"}),
        ],
        asked_twice,
        mode="ask",
        answer=first_always_then_reject(),
    )
    yield Case(
        "always-allow-sed-print-then-exec",
        [
            call("run_command", {"command": "sed -n 1p a.txt"}),
            call("run_command", {"command": "sed -n '1e touch X' a.txt"}),
        ],
        asked_twice,
        mode="ask",
        answer=first_always_then_reject(),
    )
    yield Case(
        "always-allow-a-files-directory-then-its-tree",
        [
            call("read_file", {"path": "../outside/notes.txt"}),
            call("grep", {"pattern": "secret", "path": "../outside"}),
        ],
        asked_twice,
        notes,
        answer=first_always_then_reject(),
    )

    def blocker(world: World) -> None:
        (world.workspace / "blocker").write_text("a file, not a directory\n")

    def nothing_changed(outcome: Outcome, world: World) -> None:
        assert (world.workspace / "a.txt").read_text() == "original\n"
        assert "Nothing was changed" in outcome.results[0]

    half = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-original\n+changed\n"
        "--- /dev/null\n+++ b/blocker/new.txt\n@@ -0,0 +1 @@\n+new\n"
    )
    yield Case("patch-half-done", [call("apply_patch", {"patch": half})], nothing_changed, blocker)

    def bounded(outcome: Outcome, world: World) -> None:
        assert outcome.largest_message < 3 << 20, outcome.largest_message
        assert (world.workspace / "big.txt").stat().st_size == 8_000_000

    yield Case("huge-write", [call("write_file", {"path": "big.txt", "content": "x" * 8_000_000})], bounded)

    def served(outcome: Outcome, world: World) -> None:
        assert outcome.results == []

    for name, text in (
        ("lone-high", "half an emoji \\ud83d here"),
        ("lone-low", "\\udc00 alone"),
        ("reversed-pair", "\\udc00\\ud83d"),
    ):
        yield Case(f"prompt-surrogate-{name}", [], served, prompt=text)


CASES = [
    *invalid_paths(),
    *broken_arguments(),
    *hostile_model_calls(),
    *hostile_repositories(),
    *hostile_editor_answers(),
    *the_rest_of_the_classes(),
]


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 60
    assert len({case.id for case in CASES}) == len(CASES)


# -- running a case -------------------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> World:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("original\n")
    (workspace / "sub").mkdir()
    outside = tmp_path / "outside"  # the project beside it: what `../outside/...` names
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    home = tmp_path / "home"
    (home / "protected").mkdir(parents=True)
    (home / "protected" / ".bashrc").write_text("# mine\n")
    return World(workspace, outside, home)


async def run_case(case: Case, world: World, check: Any) -> Outcome:
    case.setup(world)
    before = world.snapshot()
    turns = [Turn(tool_calls=case.calls), Turn(text="noted")] if case.calls else [Turn(text="hello")]
    turns.append(Turn(text="still serving"))
    with ScriptedOpenAIServer(turns, api_key=KEY) as server:
        env = agent_env(world.home, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REFAGENT_MODEL="m")
        async with AgentProcess.start(world.home.parent, check=check, env=env) as agent:
            await agent.initialize(case.capabilities)
            sid = await agent.new_session(world.workspace)
            await agent.result("session/set_mode", {"sessionId": sid, "modeId": case.mode})
            fs: list[tuple[str, str]] = []
            asked = await _prompt(agent, sid, case.answer, case.prompt, fs)
            assert await _prompt(agent, sid, case.answer, fs=fs) == [], "the second prompt asked nothing"
            assert agent.process.returncode is None
            updates = agent.transcript.updates(sid)
            stderr = agent.stderr()
            largest = max(len(json.dumps(m)) for m in agent.agent_messages())
        bodies = [request.body for request in server.chat_requests]
    assert len(bodies) == len(turns), f"the agent stopped asking the model: {stderr[-2000:]}"
    for body in bodies:  # nothing secret ever went to the model provider
        sent = json.dumps(body)
        assert SECRET.strip() not in sent
        assert KEY not in sent
    assert world.snapshot() == before, "something outside the workspace changed"
    results = [m.get("content") or "" for m in bodies[1]["messages"] if m["role"] == "tool"] if case.calls else []
    assert "Traceback" not in stderr, stderr[-3000:]
    return Outcome(results, updates, asked, stderr, fs, largest)


async def _prompt(
    agent: AgentProcess, sid: str, answer: Answer, text: str = "go", fs: list[tuple[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Send a prompt (``text`` goes into the JSON as it is), answer its permission requests with
    ``answer`` and its ``fs/*`` requests from the disk, as an editor that saves its buffers does; the
    permission requests' params. ``fs`` collects the ``fs/*`` requests."""
    prompt_id = agent._next_id
    agent._next_id += 1
    line = b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":%s,"prompt":' % (
        prompt_id,
        json.dumps(sid).encode(),
    )
    line += b'[{"type":"text","text":"%s"}]}}' % text.encode()
    agent.transcript.record("client", line)
    await agent.send_raw(line + b"\n")
    asked = []
    while True:
        message = await agent.wait_for(lambda m: ("method" in m and "id" in m) or m.get("id") == prompt_id)
        method = message.get("method")
        if method is None:
            assert message.get("result", {}).get("stopReason") == "end_turn", message
            return asked
        if method.startswith("fs/"):
            await agent.send(_serve_fs(message, fs))
            continue
        assert method == "session/request_permission", message
        asked.append(message["params"])
        answers = answer(message)
        for reply in answers if isinstance(answers, list) else [answers]:
            await agent.send(reply)


def _serve_fs(request: dict[str, Any], seen: list[tuple[str, str]] | None) -> dict[str, Any]:
    params = request["params"]
    if seen is not None:
        seen.append((request["method"], params["path"]))
    try:
        if request["method"] == "fs/read_text_file":
            return {"jsonrpc": "2.0", "id": request["id"], "result": {"content": Path(params["path"]).read_text()}}
        Path(params["path"]).write_text(params["content"])  # follows links, as an editor's save does
        return {"jsonrpc": "2.0", "id": request["id"], "result": {}}
    except OSError as exc:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32002, "message": str(exc)}}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_hostile(case: Case, world: World, check: Any) -> None:
    outcome = await run_case(case, world, check)
    case.expect(outcome, world)
