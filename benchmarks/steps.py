"""What one step of the tool loop costs the agent itself, early in a session and 300 steps in.

One ``refagent`` process, one session, one prompt whose turn runs ``--steps`` model requests: the scripted
server (a thread of this process) answers each with a ``read_file`` call of a small file, so the
conversation grows by a call and its result every step, as a long agentic session does. The agent's own
time for step ``n`` is from the server's answer to request ``n`` being written to request ``n + 1`` being
read whole: reading the stream, the ``session/update`` notifications (which this process reads from the
agent's stdout, as an editor would), the tool, and building and sending the next request with the whole
conversation. The server's own work (parsing the body) is outside it.

Printed: the median of steps 5-15 ("step 10") and of the last ten steps ("step N") over ``--repeats``
sessions, and their ratio (the goal: step 300 at most 1.2x step 10), for each client kind asked for
(``--client``, repeatable; default: all three, each against its API's wire of the scripted server).

    .venv/bin/python benchmarks/steps.py [--steps 300] [--repeats 3] [--client openai] [--profile PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from refagent.testing.openai_server import ScriptedOpenAIServer, ToolCall, Turn

GOAL = 1.2


def config(directory: Path, client: str, base_url: str) -> Path:
    """A config file with one profile of ``client`` at the server (the scripted server serves each API at
    its own path under the same base URL)."""
    root = base_url.removesuffix("/v1") if client == "anthropic" else base_url
    path = directory / "config.toml"
    path.write_text(
        f'max_requests = 100000\n[profiles.bench]\nclient = "{client}"\nbase_url = "{root}"\n'
        'model = "bench"\napi_key = "bench"\ncontext_window = 10000000\n',
        encoding="utf-8",
    )
    return path


async def one_session(client: str, steps: int, profile: str | None = None) -> list[float]:
    """The agent's own seconds for each step of one turn of ``steps`` model requests."""
    call = Turn(tool_calls=[ToolCall("read_file", {"path": "note.txt"})], usage=(100, 10))
    with tempfile.TemporaryDirectory() as temp, ScriptedOpenAIServer(fallback=call) as server:
        directory = Path(temp)
        project = directory / "project"
        project.mkdir()
        (project / "note.txt").write_text("one small line\n", encoding="utf-8")
        env = {
            **os.environ,
            "REFAGENT_CONFIG": str(config(directory, client, server.base_url)),
            "XDG_DATA_HOME": str(directory / "data"),
            "REFAGENT_MAX_REQUESTS": str(steps),
        }
        profiler = ["-m", "cProfile", "-o", profile] if profile else []
        process = await anyio.open_process(
            [sys.executable, *profiler, "-m", "refagent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert process.stdin is not None
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        next_id = 0

        async def call_agent(method: str, params: dict[str, Any]) -> Any:
            nonlocal next_id
            next_id += 1
            line = json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
            await process.stdin.send(line.encode() + b"\n")  # type: ignore[union-attr]
            while True:
                message = json.loads(await stdout.receive_until(b"\n", 1 << 28))
                if message.get("id") == next_id and "method" not in message:
                    if "error" in message:
                        raise SystemExit(f"{method} failed: {message['error']}")
                    return message["result"]

        try:
            await call_agent("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            session = await call_agent("session/new", {"cwd": str(project), "mcpServers": []})
            prompt = [{"type": "text", "text": "Read note.txt again and again."}]
            result = await call_agent("session/prompt", {"sessionId": session["sessionId"], "prompt": prompt})
        finally:
            await process.stdin.aclose()
            await process.wait()
        requests = [r for r in server.requests if r.method == "POST"]
    if result["stopReason"] != "max_turn_requests" or len(requests) != steps:
        raise SystemExit(f"{client}: the turn ended {result['stopReason']} after {len(requests)} of {steps} requests")
    return [after.received - before.answered for before, after in itertools.pairwise(requests)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="sessions per client kind (default: 3)")
    parser.add_argument("--client", action="append", help="a client kind (default: the three)")
    parser.add_argument("--profile", metavar="PATH", help="run the agent under cProfile, its stats written to PATH")
    args = parser.parse_args()
    for client in args.client or ["openai", "openai-responses", "anthropic"]:
        runs = [anyio.run(one_session, client, args.steps, args.profile) for _ in range(args.repeats)]
        early = statistics.median(s for seconds in runs for s in seconds[4:15])
        late = statistics.median(s for seconds in runs for s in seconds[-10:])
        ratio = late / early
        verdict = "within" if ratio <= GOAL else "OVER"
        print(
            f"{client:>17}: step 10 {early * 1000:6.2f} ms   step {args.steps} {late * 1000:6.2f} ms   "
            f"ratio {ratio:4.2f}x ({verdict} the {GOAL}x goal)"
        )


if __name__ == "__main__":
    main()
