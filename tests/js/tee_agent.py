"""Run an agent and record both directions of its stdio, so a test can check what a third-party client and
refagent said to each other.

    python tee_agent.py LOG -- COMMAND...

Each line is appended to LOG as ``{"from": "client"|"agent", "line": ...}`` before it is passed on, so a
request is always logged before its response. Standard library only; stderr passes through. The agent
exits when its stdin closes (as ACP says); SIGTERM and SIGINT are forwarded to it.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
from typing import IO


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    log_path, command = argv[0], argv[2:]
    agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None
    assert agent.stdout is not None
    lock = threading.Lock()
    with open(log_path, "a", encoding="utf-8") as log:

        def record(sender: str, line: bytes) -> None:
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text.strip():
                with lock:
                    log.write(json.dumps({"from": sender, "line": text}) + "\n")
                    log.flush()

        def pump(source: IO[bytes], sink: IO[bytes], sender: str) -> None:
            try:
                for line in iter(source.readline, b""):
                    record(sender, line)
                    sink.write(line)
                    sink.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
            finally:
                with contextlib.suppress(OSError):
                    sink.close()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda number, frame: agent.send_signal(number))
        to_agent = threading.Thread(target=pump, args=(sys.stdin.buffer, agent.stdin, "client"), daemon=True)
        from_agent = threading.Thread(target=pump, args=(agent.stdout, sys.stdout.buffer, "agent"))
        to_agent.start()
        from_agent.start()
        from_agent.join()
        return agent.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
