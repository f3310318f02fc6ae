"""Streaming throughput: what the adapter costs on top of the ``openai`` client.

The scripted OpenAI-compatible server (a separate process, so it does not compete for this one's GIL)
streams a response of 20,000 small text chunks. Each measurement consumes it end to end, several times,
interleaved with the others so that drift on the machine affects them all alike:

- ``raw openai``: ``AsyncOpenAI.chat.completions.create(stream=True)``, reading each chunk's text;
- ``openai dicts``: the same request and SSE decoding, chunks left as dicts (no pydantic models): the
  path :class:`~refagent.llm.openai_client.OpenAIModel` takes, without the adapter;
- ``OpenAIModel``: :class:`refagent.llm.openai_client.OpenAIModel`, counting ``TextDelta`` events.

A measurement is an async function ``(base_url) -> (text chunks, seconds)`` in :data:`MEASUREMENTS`; add one
there (e.g. through a whole ``refagent`` process) and it is run and reported like the others.

    .venv/bin/python benchmarks/stream.py [--chunks N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio

from refagent.llm.openai_client import OpenAIModel, RetryPolicy
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ModelRequest, TextDelta

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


MEASUREMENTS: dict[str, Measurement] = {
    "raw openai": raw_openai,
    "openai dicts": openai_dicts,
    "OpenAIModel": openai_model,
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


if __name__ == "__main__":
    main()
