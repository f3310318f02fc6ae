"""A session's sandbox (:class:`Sandbox`): its path policy, the disk, its terminals, read tracking, search
and a watcher of the roots, all confined to the session's roots, and how the editor's files and terminals join
them (wrapped in the sandbox's policy and confinement, never in its place). :func:`local_sandbox` makes the
standard one; tests and forks pass their own through ``Settings.make_sandbox``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from refagent.sandbox.confine.confinement import Confinement, hidden_paths, machine_support
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.disk.tracker import FileTracker
from refagent.sandbox.disk.watcher import RootWatcher
from refagent.sandbox.editor.files import EditorFiles
from refagent.sandbox.editor.terminals import EditorTerminals
from refagent.sandbox.seams import (
    NOTHING_HELD,
    Disk,
    Holding,
    PathPolicy,
    ReadTracker,
    Search,
    Terminals,
    TextFiles,
    Watcher,
)
from refagent.sandbox.search.dispatch import LocalSearch

if TYPE_CHECKING:
    from refagent.acp.client import SessionClient


@dataclass
class Sandbox:
    """What a session's tools act on: the path policy, the disk, the terminals, read tracking, search,
    and a watcher (optional). The editor's files and terminals are used only as :meth:`files_with` and
    :meth:`terminals_with` say, so a sandbox of one's own holds whatever the client offers.
    """

    policy: PathPolicy
    disk: Disk
    terminals: Terminals
    reads: ReadTracker
    search: Search
    """Finding files and text on :attr:`disk` (``glob``, ``grep``)."""
    watcher: Watcher | None = None
    confinement: Confinement | None = None
    """How commands are confined, in local processes and the editor's terminals alike. None: this sandbox
    confines its commands its own way (or not at all), and the editor's terminals are not used."""
    own_holding: Holding | None = None
    """How far a sandbox that confines its own way holds its commands (a container's, a VM's); None: as
    :attr:`confinement` holds them, and nothing without one."""
    editor_files: bool = True
    """Whether the editor's files are this sandbox's (the host's disk, as the editor sees it): then text
    reads and writes go through the editor where it offers them. False for a sandbox whose disk is
    elsewhere (a container, a remote machine): the editor's buffers are not its files."""

    @property
    def holding(self) -> Holding:
        """How far this sandbox holds its commands: the one answer the session's modes describe and
        ``run_command`` decides from (:mod:`refagent.sandbox.holding`)."""
        if self.own_holding is not None:
            return self.own_holding
        return self.confinement.support.holding() if self.confinement is not None else NOTHING_HELD

    def files_with(self, client: SessionClient) -> TextFiles:
        """The text files the tools read and write: the editor's ``fs/*`` where the client offers them and
        :attr:`editor_files` holds, each path checked by :attr:`policy` before and after its request
        (:class:`~refagent.sandbox.editor.files.EditorFiles`); otherwise :attr:`disk`."""
        if self.editor_files and (client.reads_files or client.writes_files):
            return EditorFiles(client, self.disk, self.policy)
        return self.disk

    def terminals_with(self, client: SessionClient) -> Terminals:
        """Where commands run: the editor's terminals where the client offers them and this sandbox has a
        :attr:`confinement` to run them under (the launcher's command line, the same as a local
        command's); otherwise :attr:`terminals`."""
        if client.has_terminals and self.confinement is not None:
            return EditorTerminals(client, confinement=self.confinement)
        return self.terminals

    def close(self) -> None:
        """The session is over: remove what its commands left in their private temporary directory."""
        if self.confinement is not None:
            self.confinement.close()


def local_sandbox(cwd: str, additional: list[str], private: Sequence[str] = ()) -> Sandbox:
    """The standard sandbox of a session with roots ``[cwd, *additional]``: commands confined as far as this
    machine can (:func:`refagent.sandbox.confine.confinement.machine_support`), the agent's ``private`` files
    hidden from them besides its standard directories (:func:`refagent.sandbox.confine.confinement.hidden_paths`).
    Where a root holds those (a session in ``$HOME``), the file tools treat them as outside the roots,
    whether or not they exist yet."""
    confinement = Confinement([cwd, *additional], machine_support(), private=private)
    return Sandbox(
        policy=RootPolicy(cwd, additional, private=hidden_paths(os.environ, [], private, existing=False)),
        disk=LocalFileSystem(),
        terminals=LocalTerminals(confinement=confinement),
        reads=FileTracker(),
        search=LocalSearch(),
        watcher=RootWatcher([cwd, *additional]),
        confinement=confinement,
    )
