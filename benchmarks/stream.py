"""Streaming throughput: what the adapter costs on top of the ``openai`` client.

The scripted OpenAI-compatible server (a separate process, so it does not compete for this one's GIL)
streams a response of 20,000 small text chunks. Each measurement consumes it end to end, several times,
interleaved with the others so that drift on the machine affects them all alike:

- ``raw openai``: ``AsyncOpenAI.chat.completions.create(stream=True)``, reading each chunk's text;
- ``openai dicts``: the same request and SSE decoding, chunks left as dicts (no pydantic models): the
  path :class:`~refagent.llm.openai_client.OpenAIModel` takes, without the adapter;
- ``OpenAIModel``: :class:`refagent.llm.openai_client.OpenAIModel`, counting ``TextDelta`` events;
- ``via refagent``: a whole ``refagent`` process between the server and a client that reads its stdout,
  counting ``agent_message_chunk`` notifications (the issue's target: under 25% over ``raw openai``).

A measurement is an async function ``(base_url) -> (text chunks, seconds)`` in :data:`MEASUREMENTS`; add one
there (e.g. through a whole ``refagent`` process) and it is run and reported like the others.

    .venv/bin/python benchmarks/stream.py [--chunks N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from refagent.llm.openai_client import OpenAIModel
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ModelRequest, TextDelta
from refagent.llm.retry import RetryPolicy

Measurement = Callable[[str], Awaitable[tuple[int, float]]]
MESSAGES: Any = [{"role": "user", "content": "Say 'tok' many times."}]
MODEL = "bench"


async def raw_openai(base_url: str) -> tuple[int, float]:
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    try:
        start = time.perf_counter()
        count = 0
        stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                count += 1
        return count, time.perf_counter() - start
    finally:
        await client.close()


async def openai_dicts(base_url: str) -> tuple[int, float]:
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    try:
        start = time.perf_counter()
        count = 0
        request = client.chat.completions.with_streaming_response.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
        )
        async with request as response:
            async for chunk in openai.AsyncStream(cast_to=object, response=response.http_response, client=client):
                choices = cast(Any, chunk)["choices"]
                if choices and choices[0]["delta"].get("content"):
                    count += 1
        return count, time.perf_counter() - start
    finally:
        await client.close()


async def openai_model(base_url: str) -> tuple[int, float]:
    model = OpenAIModel(ModelProfile("bench", "bench", model=MODEL, base_url=base_url), retry=RetryPolicy(attempts=1))
    try:
        await model._get_client()  # set-up (import, SSL context) is not what is measured
        start = time.perf_counter()
        count = 0
        async for event in model.stream(ModelRequest(messages=MESSAGES)):
            if isinstance(event, TextDelta):
                count += 1
        return count, time.perf_counter() - start
    finally:
        await model.aclose()


class ThroughRefagent:
    """A whole ``refagent`` process, started once with ``OPENAI_BASE_URL`` at the server: each measurement
    sends a ``session/prompt`` and counts the ``agent_message_chunk`` lines a client reads until the
    response. Includes the agent's loop, JSON-RPC encoding, the pipe, and the client's ``json.loads``."""

    def __init__(self) -> None:
        self.process: Any = None
        self.session_id = ""
        self.next_id = 0

    async def _start(self, base_url: str) -> None:
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench", "REFAGENT_MODEL": MODEL}
        self.process = await anyio.open_process(
            [sys.executable, "-m", "refagent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.stdout = BufferedByteReceiveStream(self.process.stdout)
        await self._call("initialize", {"protocolVersion": 1})
        result = await self._call("session/new", {"cwd": tempfile.gettempdir(), "mcpServers": []})
        self.session_id = result["sessionId"]

    async def _call(self, method: str, params: dict[str, Any], on_message: Any = None) -> Any:
        msg_id = self.next_id
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        await self.process.stdin.send(line.encode() + b"\n")
        while True:
            message = json.loads(await self.stdout.receive_until(b"\n", 1 << 26))
            if message.get("id") == msg_id and "method" not in message:
                return message["result"]
            if on_message is not None:
                on_message(message)

    async def __call__(self, base_url: str) -> tuple[int, float]:
        if self.process is None:
            await self._start(base_url)
        count = 0

        def on_message(message: dict[str, Any]) -> None:
            nonlocal count
            update = message.get("params", {}).get("update", {}) if message.get("method") == "session/update" else {}
            if update.get("sessionUpdate") == "agent_message_chunk":
                count += 1

        # Each prompt starts a new conversation (the history would otherwise grow with every run).
        self.session_id = (await self._call("session/new", {"cwd": tempfile.gettempdir(), "mcpServers": []}))[
            "sessionId"
        ]
        prompt = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": "Say 'tok' many times."}]}
        start = time.perf_counter()
        await self._call("session/prompt", prompt, on_message)
        return count, time.perf_counter() - start

    async def aclose(self) -> None:
        if self.process is not None:
            await self.process.stdin.aclose()
            await self.process.wait()


THROUGH_REFAGENT = ThroughRefagent()

MEASUREMENTS: dict[str, Measurement] = {
    "raw openai": raw_openai,
    "openai dicts": openai_dicts,
    "OpenAIModel": openai_model,
    "via refagent": THROUGH_REFAGENT,
}


def start_server(chunks: int, directory: Path) -> tuple[subprocess.Popen[str], str]:
    script = directory / "script.json"
    script.write_text(json.dumps({"fallback": {"text": ["tok "] * chunks, "usage": [10, chunks]}}))
    command = [sys.executable, "-m", "refagent.testing.openai_server", "--script", str(script)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


async def run(base_url: str, chunks: int, repeats: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in MEASUREMENTS}
    for measure in MEASUREMENTS.values():  # warm-up: imports, connection pools, caches
        await measure(base_url)
    for repeat in range(repeats):
        row = []
        for name, measure in MEASUREMENTS.items():
            count, seconds = await measure(base_url)
            if count != chunks:
                raise SystemExit(f"{name} saw {count} text chunks, expected {chunks}")
            rates[name].append(count / seconds)
            row.append(f"{name} {count / seconds:>9,.0f}/s")
        print(f"  run {repeat + 1}: " + "   ".join(row))
    await THROUGH_REFAGENT.aclose()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server, base_url = start_server(args.chunks, Path(directory))
        try:
            print(f"{args.chunks:,} text chunks per response, {args.repeats} runs each, server {base_url}")
            rates = anyio.run(run, base_url, args.chunks, args.repeats)
        finally:
            server.terminate()
            server.wait()
    baseline = statistics.median(rates["raw openai"])
    print("median chunks/s (ratio to raw openai):")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"  {name:<12} {median:>9,.0f}/s   x{median / baseline:.3f}")
    print(
        f"time through refagent vs the raw client: {baseline / statistics.median(rates['via refagent']):.2f}x"
        " (below 1.25x meets the target)"
    )


if __name__ == "__main__":
    main()
