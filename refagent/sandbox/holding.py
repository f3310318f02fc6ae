"""How far a sandbox holds its commands, in the seam's words: the levels a command can ask for, and for
each what the sandbox holds it to and what it does not. Whatever does the holding (Landlock and namespaces
here, :meth:`refagent.sandbox.confine.confinement.Support.holding`; a container or a VM in a fork) says it
with a :class:`Holding`, and everything above the sandbox reads only that: the session's modes describe it,
and ``run_command`` decides from it whether ``auto`` may run a command without asking
(:meth:`Holding.confines`). One answer, so the two cannot disagree.

Light on purpose (plain classes, no imports): the first ``session/new`` answer describes a holding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

Level = Literal["workspace", "network", "none"]
"""How far a command asks to be held: ``workspace`` writes only under the roots and has no network,
``network`` the same with the network, ``none`` is not held (the user's full power)."""
LEVELS: tuple[Level, ...] = ("workspace", "network", "none")

WRITES = "writes outside the workspace"
NETWORK = "the network"
SECRETS = "the agent's own files (your keys in its settings, its logs and sessions) and your credentials"


class Holding:
    """What a sandbox holds its commands to. ``writes``: writes are held to the roots (at the ``workspace``
    and ``network`` levels); ``network``: the network is cut at the ``workspace`` level; ``hidden``: the
    agent's own files and the user's credentials are out of commands' sight. ``gaps``: what a command at
    each level is not held from, in words for the user, when the sandbox knows more than those three (a
    machine's finer gaps); by default the words of the three. ``summary``: one line for the log."""

    __slots__ = ("_gaps", "hidden", "network", "summary", "writes")

    def __init__(
        self,
        *,
        writes: bool = False,
        network: bool = False,
        hidden: bool = False,
        gaps: Mapping[Level, Sequence[str]] | None = None,
        summary: str = "",
    ) -> None:
        self.writes = writes
        self.network = network
        self.hidden = hidden
        self._gaps = {level: tuple(words) for level, words in gaps.items()} if gaps is not None else None
        self.summary = summary or (
            "Commands are confined." if self.confines("workspace") else "Commands are not confined."
        )

    def missing(self, level: Level) -> list[str]:
        """What a command at ``level`` is promised and not held to, in words; [] when it is held to all of it
        (always for ``none``, which promises nothing)."""
        if level == "none":
            return []
        if self._gaps is not None:
            return list(self._gaps.get(level, ()))
        words = [] if self.writes else [WRITES]
        if level == "workspace" and not self.network:
            words.append(NETWORK)
        if not self.hidden:
            words.append(SECRETS)
        return words

    def confines(self, level: Level) -> bool:
        """Whether a command at ``level`` is held to all the level promises (never at ``none``): the one
        test of whether a command is confined."""
        return level != "none" and not self.missing(level)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Holding):
            return NotImplemented
        return all(self.missing(level) == other.missing(level) for level in LEVELS) and (
            self.writes,
            self.network,
            self.hidden,
        ) == (other.writes, other.network, other.hidden)

    def __hash__(self) -> int:
        return hash((self.writes, self.network, self.hidden, *(tuple(self.missing(level)) for level in LEVELS)))

    def __repr__(self) -> str:
        return f"Holding(writes={self.writes}, network={self.network}, hidden={self.hidden}, summary={self.summary!r})"


NOTHING_HELD = Holding(summary="Commands are not confined: this sandbox holds nothing.")
"""A sandbox that confines nothing (a fork's own, unless it says otherwise)."""
