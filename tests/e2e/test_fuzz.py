"""Property-based robustness of the agent (hypothesis): garbage in, correct JSON-RPC out.

A real :class:`~refagent.server.agent.Agent` is served by a real :class:`~refagent.acp.connection.Connection`
over memory streams, and the test writes raw lines into it: random bytes, random JSON values, random
JSON-RPC-shaped objects (random methods, ids and params), and ACP methods with wrong (and sometimes
right) params, after a valid ``initialize`` and ``session/new`` so session methods reach a real session.

Properties, for every example:

- the agent never dies (its ``serve`` is still running when the garbage is over);
- every request with a valid id is answered exactly once, under that id; broken lines that carry no
  usable id are answered under ``null``; notifications and responses are never answered;
- every message it sends is one line of JSON and valid ACP (``tests/support/acp_schema.py``), responses checked
  against the method of the request they answer;
- after the garbage, a valid ``initialize`` still gets its answer.

The expectations come from JSON-RPC 2.0 itself (:func:`expectation`), not from ``refagent.acp.jsonrpc``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refagent.acp.connection import Connection
from refagent.sandbox.local import Sandbox, local_sandbox
from refagent.server.agent import Agent
from refagent.settings import OwnSandboxes, Settings
from tests.support.acp_schema import validate_agent_message

pytestmark = pytest.mark.anyio

TIMEOUT = 10  # safety net; an example takes milliseconds

AGENT_METHODS = [
    "initialize",
    "authenticate",
    "session/new",
    "session/load",
    "session/prompt",
    "session/set_mode",
    "session/set_config_option",
    "session/list",
    "session/close",
    "logout",
]
NOTIFICATIONS = ["session/cancel", "$/cancel_request", "_vendor/ping", "$/progress"]
FIELDS = [
    "protocolVersion",
    "clientCapabilities",
    "clientInfo",
    "methodId",
    "cwd",
    "mcpServers",
    "additionalDirectories",
    "sessionId",
    "prompt",
    "modeId",
    "configId",
    "value",
    "requestId",
    "_meta",
]


class Placeholder:
    """Replaced when the example runs: by the session's id, or the test's working directory."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


SESSION = Placeholder("session id")
WORKDIR = Placeholder("workdir")

# -- strategies -------------------------------------------------------------------------------------

# Strings never start with "/": absolute paths come only from `paths`, inside the test's directory
# (a session on "/" would watch the whole file system).
texts = st.text(max_size=12).filter(lambda s: not s.startswith("/")) | st.sampled_from(["", "\n", "\ud800", "é✓"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=12
)
paths = st.sampled_from([WORKDIR, "relative/dir", "", "/\x00nul"])
content_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries(
        {"type": st.just("resource_link"), "uri": st.sampled_from(["file:///nonexistent/x", "https://x/y", "x"])},
        optional={"name": texts},
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "audio", "resource", "bogus"])}, optional={"data": texts}),
    json_values,
)
field_values = st.one_of(
    json_values,
    paths,
    st.just(SESSION),
    st.sampled_from(["ask", "read-only", "mode", "model", "scripted", 1, []]),
    st.lists(content_blocks, max_size=3),
    st.just({"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}),
)
params = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=5),
    st.dictionaries(texts, json_values, max_size=3),
    json_values,  # often not an object: -32602
)
valid_looking = st.one_of(
    st.fixed_dictionaries({"protocolVersion": st.integers(-1, 3) | json_values}).map(lambda p: ("initialize", p)),
    st.fixed_dictionaries({"cwd": paths, "mcpServers": st.just([]) | json_values}).map(lambda p: ("session/new", p)),
    st.fixed_dictionaries({"sessionId": st.just(SESSION) | texts, "prompt": st.lists(content_blocks, max_size=3)}).map(
        lambda p: ("session/prompt", p)
    ),
    st.fixed_dictionaries({"sessionId": st.just(SESSION), "modeId": field_values}).map(
        lambda p: ("session/set_mode", p)
    ),
    st.fixed_dictionaries(
        {"sessionId": st.just(SESSION), "configId": st.sampled_from(["mode", "model", "x"]), "value": field_values}
    ).map(lambda p: ("session/set_config_option", p)),
)
methods = st.sampled_from(AGENT_METHODS + NOTIFICATIONS) | texts | json_values
id_kinds = st.sampled_from(["int", "str", "null", "absent"]) | json_values  # json_values: mostly invalid ids


@st.composite
def rpc_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC-shaped object: mostly well formed, with some member missing or wrong now and then."""
    if draw(st.booleans()):
        method, payload = draw(valid_looking)
    else:
        method, payload = draw(methods), draw(params)
    obj: dict[str, Any] = {"jsonrpc": draw(st.just("2.0") | st.sampled_from(["1.0", 2, None]))}
    obj["id"] = draw(id_kinds)
    obj["method"] = method
    obj["params"] = payload
    if draw(st.integers(0, 9)) == 0:  # drop a member
        del obj[draw(st.sampled_from(sorted(obj)))]
    if obj.get("id") == "absent":
        del obj["id"]
    return obj


responses = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "id": st.integers(0, 5) | texts},
    optional={"result": json_values, "error": json_values | st.fixed_dictionaries({"code": scalars, "message": texts})},
)


@dataclass(frozen=True)
class Raw:
    data: bytes


lines = st.one_of(
    st.binary(max_size=64).map(lambda b: Raw(b.replace(b"\n", b" "))),
    st.sampled_from([b"{", b"[]", b"[{}]", b"null", b'{"jsonrpc":"2.0","id":1,"method":"x","params":NaN}']).map(Raw),
    json_values,
    rpc_objects(),
    rpc_objects(),
    rpc_objects(),
    responses,
)

# -- the JSON-RPC 2.0 oracle ------------------------------------------------------------------------

NO_ANSWER = "no answer"
NULL = "answered under null"
MAYBE_NULL = "answered under null, or not at all"


@dataclass(frozen=True)
class AnswerUnder:
    id: int | str


def _valid_id(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return value is None or isinstance(value, str)


def _reject(name: str) -> Any:
    raise ValueError(name)


def expectation(line: bytes) -> object:
    """What JSON-RPC 2.0 says the agent must send back for ``line``."""
    if not line.strip():
        return NO_ANSWER  # blank lines are skipped
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_reject)
    except (ValueError, RecursionError):
        return NULL  # parse error
    if not isinstance(value, dict):
        return NULL  # invalid request (v1 has no batches)
    if "id" in value and not _valid_id(value["id"]):
        return NULL  # an id we cannot echo
    if "method" in value:
        if "id" not in value:
            return NO_ANSWER  # a notification, even a broken one
        return NULL if value["id"] is None else AnswerUnder(value["id"])
    if "id" in value and value.get("jsonrpc") == "2.0" and ("result" in value or "error" in value):
        return NO_ANSWER  # a response (to one of the agent's requests, or to nothing)
    if "id" in value:
        return NULL if value["id"] is None else AnswerUnder(value["id"])
    return MAYBE_NULL


# -- the harness ------------------------------------------------------------------------------------


@dataclass
class Harness:
    workdir: Path
    sent_methods: dict[Any, Any] = field(default_factory=dict)
    answers: Counter[Any] = field(default_factory=Counter)
    received: list[dict[str, Any]] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)
    next_id: int = 0

    def __post_init__(self) -> None:
        self.to_agent, self._agent_input = anyio.create_memory_object_stream[bytes](math.inf)

    async def agent_lines(self) -> AsyncIterator[bytes]:
        async with self._agent_input:
            async for line in self._agent_input:
                yield line

    async def agent_write(self, data: bytes) -> None:
        """The agent's output: every line must be a valid ACP message."""
        assert data.endswith(b"\n"), data[-100:]
        for line in data.split(b"\n")[:-1]:
            message = json.loads(line)
            assert isinstance(message, dict), line[:200]
            if "method" not in message:  # an answer
                answered = self.sent_methods.get(json.dumps(message["id"])) if message["id"] is not None else None
                validate_agent_message(message, answered if isinstance(answered, str) else None)
                self.answers[json.dumps(message["id"])] += 1
            else:
                validate_agent_message(message, None)
                if "id" in message:  # the agent asks the editor something: refuse, the turn goes on
                    error = {"code": -32603, "message": "the fuzzing client refuses"}
                    self.send_line({"jsonrpc": "2.0", "id": message["id"], "error": error})
            self.received.append(message)
        self.arrived.set()
        self.arrived = anyio.Event()

    def send_line(self, value: Any) -> bytes:
        data = value.data if isinstance(value, Raw) else json.dumps(value).encode()
        if isinstance(value, dict) and "id" in value and _valid_id(value["id"]):
            self.sent_methods[json.dumps(value["id"])] = value.get("method")
        with contextlib.suppress(anyio.ClosedResourceError):  # after EOF
            self.to_agent.send_nowait(data)
        return data

    def unique_id(self, like: object) -> int | str:
        self.next_id += 1
        return 10**9 + self.next_id if like == "int" or isinstance(like, int) else f"fuzz-{self.next_id}"

    def materialize(self, value: Any, session_id: str) -> Any:
        if value is SESSION:
            return session_id
        if value is WORKDIR:
            return str(self.workdir)
        if isinstance(value, list):
            return [self.materialize(v, session_id) for v in value]
        if isinstance(value, dict):
            return {k: self.materialize(v, session_id) for k, v in value.items()}
        return value

    def prepare(self, value: Any, session_id: str) -> Any:
        """Placeholders filled in, and ids made unique, so each answer tells which request it is for."""
        if isinstance(value, Raw) or not isinstance(value, dict):
            return value
        value = self.materialize(value, session_id)
        if "id" in value:
            msg_id = value["id"]
            is_response = "method" not in value and ("result" in value or "error" in value)
            if msg_id in ("int", "str") or (_valid_id(msg_id) and msg_id is not None and not is_response):
                value["id"] = self.unique_id(msg_id)
            elif msg_id == "null":
                value["id"] = None
            if value["id"] is None and value.get("method") in AGENT_METHODS:
                value["id"] = self.unique_id("str")  # keeps answers under null unambiguous (all errors)
        return value

    async def wait_until(self, done: Any) -> None:
        with anyio.fail_after(TIMEOUT):
            while not done():
                await self.arrived.wait()


def sandbox_without_watcher(cwd: str, additional: list[str]) -> Sandbox:
    """The real local sandbox, minus the file watcher (its thread takes ~50 ms to stop, per example)."""
    return dataclasses.replace(local_sandbox(cwd, additional), watcher=None)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz-workdir")
    (path / "notes.txt").write_text("some notes\n")
    return path


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(garbage=st.lists(lines, min_size=1, max_size=12))
async def test_the_agent_survives_garbage_and_answers_correctly(garbage: list[Any], workdir: Path) -> None:
    harness = Harness(workdir)
    connection = Connection(harness.agent_lines(), harness.agent_write)
    stopped = anyio.Event()

    async def serve(agent: Agent) -> None:
        try:
            await connection.serve(agent)
        finally:
            stopped.set()

    settings = Settings(make_sandbox=OwnSandboxes(sandbox_without_watcher))
    async with Agent(connection, settings) as agent, anyio.create_task_group() as tg:
        tg.start_soon(serve, agent)

        # a real session for session methods to reach
        harness.send_line({"jsonrpc": "2.0", "id": "setup-1", "method": "initialize", "params": {"protocolVersion": 1}})
        harness.send_line(
            {
                "jsonrpc": "2.0",
                "id": "setup-2",
                "method": "session/new",
                "params": {"cwd": str(workdir), "mcpServers": []},
            }
        )
        await harness.wait_until(lambda: harness.answers[json.dumps("setup-2")] == 1)
        new = next(m for m in harness.received if m.get("id") == "setup-2")
        assert "result" in new, new
        session_id = new["result"]["sessionId"]

        expected: Counter[Any] = Counter({json.dumps("setup-1"): 1, json.dumps("setup-2"): 1})
        null_min = null_max = 0
        for value in garbage:
            data = harness.send_line(harness.prepare(value, session_id))
            outcome = expectation(data)
            if isinstance(outcome, AnswerUnder):
                expected[json.dumps(outcome.id)] += 1
            elif outcome == NULL:
                null_min += 1
                null_max += 1
            elif outcome == MAYBE_NULL:
                null_max += 1
        assert all(count == 1 for count in expected.values()), "ids must be unique in the test"

        harness.send_line({"jsonrpc": "2.0", "id": "final", "method": "initialize", "params": {"protocolVersion": 1}})
        expected[json.dumps("final")] = 1

        def all_answered() -> bool:
            return all(harness.answers[k] >= 1 for k in expected) and harness.answers["null"] >= null_min

        await harness.wait_until(all_answered)
        assert not stopped.is_set(), "the agent stopped serving"
        final = next(m for m in harness.received if m.get("id") == "final")
        assert final["result"]["protocolVersion"] == 1

        harness.to_agent.close()  # EOF: nothing may be answered twice on the way out
        with anyio.fail_after(TIMEOUT):
            await stopped.wait()

    null_answers = harness.answers.pop("null", 0)
    assert harness.answers == expected, "every request with an id answered exactly once, nothing else"
    assert null_min <= null_answers <= null_max
