"""Work that may not end, in a child Python that can be stopped: :func:`run_in_child`.

Python's regular expressions backtrack, and an HTML converter walks whatever a page nests; both hold the
GIL while they work, so in a thread they slow every session of the agent, and no thread can be stopped.
A process can. :func:`run_in_child` runs ``module.function(request, data)`` in a fresh, isolated Python
(``-I -S``, in ``/``: it imports nothing from the directory it works on, or wherever the agent runs),
with our ``sys.path``, an address-space limit and a deadline; the function's JSON-able return value comes
back. The child is killed at the deadline or when the caller is cancelled, and ends itself (an alarm) if
the agent is gone. It costs a Python start (~0.15 s) and the imports the function needs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
from typing import IO, Any

import anyio

__all__ = ["ChildFailed", "Overran", "run_in_child", "serve"]


class Overran(Exception):
    """The child worked past its deadline and was killed."""


class ChildFailed(Exception):
    """The child ended without an answer (it crashed, ran out of memory, or printed no JSON); the message
    is the end of what it wrote on stderr."""


_WORKER = (
    "import json, sys\n"
    "head = json.loads(sys.stdin.buffer.readline())\n"
    "sys.path[:] = head['path']\n"
    "from refagent.child import serve\n"
    "serve(head, sys.stdin.buffer)\n"
)


async def run_in_child(
    module: str, function: str, request: dict[str, Any], *, data: bytes = b"", seconds: float, memory: int
) -> Any:
    """The JSON answer of ``module.function(request, data)`` run in a child Python within ``seconds`` and
    ``memory`` bytes of address space. ``request`` is JSON-able; ``data`` goes as it is. Raises
    :class:`Overran` at the deadline, :class:`ChildFailed` for a child that gave no answer."""
    head: dict[str, Any] = {"path": _child_path(), "module": module, "function": function, "request": request}
    head |= {"seconds": seconds, "memory": memory}
    output = bytearray()
    errors = bytearray()
    with anyio.move_on_after(seconds) as deadline:
        process = await anyio.open_process(
            [sys.executable, "-I", "-S", "-c", _WORKER],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert process.stdin is not None
            assert process.stdout is not None

            async def feed() -> None:
                assert process.stdin is not None
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await process.stdin.send(json.dumps(head).encode() + b"\n" + data)
                await process.stdin.aclose()

            async def drain_errors() -> None:
                assert process.stderr is not None
                async for chunk in process.stderr:
                    errors.extend(chunk)
                    del errors[:-4096]

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(feed)  # beside the reading: a large input must not wait on a full pipe
                tasks.start_soon(drain_errors)
                async for chunk in process.stdout:
                    output.extend(chunk)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
    if deadline.cancelled_caught:
        raise Overran(f"{module}.{function} took longer than {seconds:g} s")
    try:
        return json.loads(output)
    except ValueError:
        said = errors.decode("utf-8", "replace").strip().splitlines()
        raise ChildFailed(said[-1] if said else f"exit status {process.returncode}") from None


def serve(head: dict[str, Any], stdin: IO[bytes]) -> None:
    """The child's side of :func:`run_in_child`: limit itself, run the function, print its answer."""
    # The parent kills us at the deadline; the alarm (default action: terminate) covers a parent that died.
    signal.alarm(math.ceil(float(head["seconds"])) + 2)
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        memory = int(head["memory"])
        if soft == resource.RLIM_INFINITY or soft > memory:  # never loosen a stricter limit
            resource.setrlimit(resource.RLIMIT_AS, (memory, hard))
    function = getattr(importlib.import_module(head["module"]), head["function"])
    answer = function(head["request"], stdin.read())
    sys.stdout.write(json.dumps(answer))  # ASCII: what is not UTF-8 travels as \udcxx escapes
    sys.stdout.flush()


def _child_path() -> list[str]:
    """The child's ``sys.path``: ours, without relative entries (``""`` is the working directory, which
    may be a tree being searched), and with the directory refagent itself was imported from."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this file is refagent/child.py
    return list(dict.fromkeys([here, *(entry for entry in sys.path if os.path.isabs(entry))]))
