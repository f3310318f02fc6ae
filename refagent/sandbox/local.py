"""The local side of a session (:class:`Sandbox`): its path policy, the disk, local processes, read tracking
and a watcher of the roots, all confined to the session's roots. :func:`local_sandbox` makes the standard
one; tests and forks pass their own through ``Settings.make_sandbox``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from refagent.confine.confinement import Confinement, hidden_paths, machine_support
from refagent.confine.process import LocalTerminals
from refagent.disk.local_fs import LocalFileSystem
from refagent.disk.policy import RootPolicy
from refagent.disk.tracker import FileTracker
from refagent.disk.watcher import RootWatcher
from refagent.seams import Disk, PathPolicy, ReadTracker, Terminals, Watcher


@dataclass
class Sandbox:
    """The local side of a session: policy, disk, processes, read tracking, and a watcher (optional)."""

    policy: PathPolicy
    disk: Disk
    terminals: Terminals
    reads: ReadTracker
    watcher: Watcher | None = None
    confinement: Confinement | None = None
    """How commands are confined, in local processes and the editor's terminals alike (None: not)."""

    def close(self) -> None:
        """The session is over: remove what its commands left in their private temporary directory."""
        if self.confinement is not None:
            self.confinement.close()


def local_sandbox(cwd: str, additional: list[str], private: Sequence[str] = ()) -> Sandbox:
    """The standard sandbox of a session with roots ``[cwd, *additional]``: commands confined as far as this
    machine can (:func:`refagent.confine.confinement.machine_support`), the agent's ``private`` files
    hidden from them besides its standard directories (:func:`refagent.confine.confinement.hidden_paths`).
    Where a root holds those (a session in ``$HOME``), the file tools treat them as outside the roots."""
    confinement = Confinement([cwd, *additional], machine_support(), private=private)
    return Sandbox(
        policy=RootPolicy(cwd, additional, private=hidden_paths(os.environ, [], private)),
        disk=LocalFileSystem(),
        terminals=LocalTerminals(confinement=confinement),
        reads=FileTracker(),
        watcher=RootWatcher([cwd, *additional]),
        confinement=confinement,
    )
