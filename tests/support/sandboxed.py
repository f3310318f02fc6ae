"""The confined-command test bench, shared by the sandbox tests on the real kernel: this machine's support
(:data:`SUPPORT`), the marker that skips them where it cannot confine (unless ``REFAGENT_REQUIRE_SANDBOX``
is set, as CI sets it: then that is an error), and the ``box`` fixture, which runs every test on both paths
a command can take: a local process (:class:`LocalTerminals`) and the editor's terminal
(:class:`EditorTerminals` through a fake editor that runs the launcher command line for real).

A test module uses them by importing ``box`` and ``outside`` (pytest finds fixtures by name in the module)
and setting ``pytestmark = CONFINED``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from refagent.sandbox.confine.confinement import Confinement, machine_support
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.editor.terminals import EditorTerminals
from refagent.sandbox.seams import Level
from refagent.testing.memory import FakeClient
from refagent.testing.terminals import FakeTerminalHost
from refagent.tools.base import CommandResult, Terminals
from tests.support.clients import session_client
from tests.support.tool_fakes import DirectPeer

SUPPORT = machine_support()
MISSING = SUPPORT.missing("workspace")
if MISSING and os.environ.get("REFAGENT_REQUIRE_SANDBOX"):
    raise RuntimeError(f"REFAGENT_REQUIRE_SANDBOX is set, but this machine cannot confine: {MISSING} {SUPPORT.notes}")

CONFINED = [
    pytest.mark.anyio,
    pytest.mark.skipif(bool(MISSING), reason=f"this machine cannot confine commands: {', '.join(MISSING)}"),
]


@dataclass
class Sandboxed:
    terminals: Terminals
    confinement: Confinement
    workspace: Path
    outside: Path
    """Another project beside the workspace: readable, never writable."""

    async def sh(self, script: str, level: Level = "workspace", time_limit: float = 30) -> CommandResult:
        return await self.terminals.run(script, str(self.workspace), time_limit, sandbox=level)


@pytest.fixture
def outside() -> Iterator[Path]:
    """Another project: not under /tmp, which the sandbox replaces with its own (and hides)."""
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="refagent-outside-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["local", "editor"])
async def box(request: pytest.FixtureRequest, tmp_path: Path, outside: Path) -> AsyncIterator[Sandboxed]:
    workspace = tmp_path / "ws"  # under /tmp: mounted back into the sandbox's private /tmp
    workspace.mkdir()
    confinement = Confinement([str(workspace)], SUPPORT)
    try:
        if request.param == "local":
            yield Sandboxed(LocalTerminals(confinement=confinement), confinement, workspace, outside)
            return
        async with FakeTerminalHost() as host:
            peer = DirectPeer(FakeClient(extra=host.handlers()).handle_request)
            yield Sandboxed(
                EditorTerminals(session_client(peer), confinement=confinement), confinement, workspace, outside
            )
            assert host.live == []
    finally:
        confinement.close()
