"""The session modes, each with what it lets a tool call do without asking the user: the one place a mode
is defined.

A :class:`Mode` is its id and name, what the client is told it does, and its policy:
:meth:`refagent.tools.permissions.Permissions.decide` consults the session's mode for the part of a
decision that depends on it (:meth:`Mode.refusal`, :meth:`Mode.allows`) and decides the rest the same in
every mode (a read inside the roots runs, a read outside them asks, the user's "always" answers hold).
:mod:`refagent.session.modes` describes the modes to the client, as they work on its machine
(:meth:`Mode.describe`).

The modes are here, in ``tools/``, because the permissions are; the session (a room above) lists them. This
module imports nothing at run time: the session's ``session/new`` response describes the modes, and this is
on its way (plain classes, as :class:`refagent.server.agent.Route`: a frozen dataclass takes half a
millisecond to create).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # annotations: the tools' contract is not loaded to answer session/new
    from refagent.acp.types import ToolKind
    from refagent.tools.base import Plan


class Mode:
    """One session mode: who it is, what the client is told, and what runs in it without asking.

    The policy applies to a call inside the roots that is not a plain read (those run, and reads outside
    the roots ask, in every mode):

    - ``read_only``: every change (an edit, a deletion, a move, a command) is refused without asking; a
      fetch (:attr:`Plan.network`: it changes nothing) asks;
    - ``allows_everything``: every such call runs without asking, a change to a file that git or an editor
      runs later (:attr:`Plan.runs_later`) included;
    - else such a file asks, and so does any call, unless its kind is in ``allowed_kinds`` or, with
      ``allows_confined``, it is a command the machine confines to the roots (:attr:`Plan.confined`).

    ``description`` says what the mode does where commands are fully confined; ``unconfined``, if the mode
    works otherwise on a machine that cannot confine them, says what it does there (``{gaps}``: what the
    machine cannot do).
    """

    __slots__ = (
        "allowed_kinds",
        "allows_confined",
        "allows_everything",
        "description",
        "id",
        "name",
        "read_only",
        "unconfined",
    )

    def __init__(
        self,
        id: str,
        name: str,
        description: str,
        *,
        unconfined: str | None = None,
        read_only: bool = False,
        allows_everything: bool = False,
        allowed_kinds: frozenset[ToolKind] = frozenset(),
        allows_confined: bool = False,
    ) -> None:
        self.id: Final = id
        """The same on every machine: sessions save it, clients send it back."""
        self.name: Final = name
        self.description: Final = description
        self.unconfined: Final = unconfined
        self.read_only: Final = read_only
        self.allows_everything: Final = allows_everything
        self.allowed_kinds: Final = allowed_kinds
        self.allows_confined: Final = allows_confined

    def __repr__(self) -> str:
        return f"Mode({self.id!r})"

    def refusal(self, plan: Plan) -> str | None:
        """Why ``plan`` is refused in this mode without asking (for the model), or None if it is not."""
        if self.read_only and plan.mutating:
            return (
                f"The session is in {self.id} mode, so changes and commands are refused. Describe the change "
                "you would make instead, and the user can switch to another mode to let you make it."
            )
        return None

    def allows(self, kind: ToolKind, plan: Plan) -> bool:
        """Whether ``plan`` (of ``kind``: the plan's own, else its tool's) runs without asking in this mode.
        Only asked of a call inside the roots that nothing refused and no "always" answer covers."""
        if self.allows_everything:
            return True
        if plan.runs_later:  # what git or an editor runs later: the user decides, as the sandbox holds it
            return False
        return kind in self.allowed_kinds or (self.allows_confined and plan.confined)

    def describe(self, gaps: Sequence[str]) -> str:
        """What the client is told the mode does on a machine that cannot confine commands in the ways
        ``gaps`` names (none: it confines them fully)."""
        if gaps and self.unconfined is not None:
            return self.unconfined.format(gaps=", ".join(gaps))
        return self.description


EDITS: Final[frozenset[ToolKind]] = frozenset({"edit", "move"})
"""What ``accept-edits`` and ``auto`` run without asking: edits and moves (a deletion still asks)."""

ASK: Final = Mode("ask", "Ask", "Ask before every edit, deletion, move, command or web fetch.")
MODES: Final[tuple[Mode, ...]] = (
    ASK,
    Mode(
        "accept-edits",
        "Accept edits",
        "Edit files inside the workspace without asking; still ask before commands.",
        allowed_kinds=EDITS,
    ),
    Mode(
        "auto",
        "Auto",
        "Edit files and run sandboxed commands (writes only inside the workspace, no network) without asking; "
        "ask before deletions and before commands that need the network or no sandbox.",
        unconfined="Edit files inside the workspace without asking. Commands still ask: this machine cannot "
        "confine {gaps}.",
        allowed_kinds=EDITS,
        allows_confined=True,
    ),
    Mode(
        "read-only",
        "Read only",
        "Read and search only: every change is refused without asking, so the model can plan; web fetches ask.",
        read_only=True,
    ),
    Mode(
        "full-access",
        "Full access",
        "Never ask. Commands still run sandboxed, unless the model asks for network access or none.",
        unconfined="Never ask. Commands are not fully confined on this machine ({gaps}).",
        allows_everything=True,
    ),
)
"""Every mode, in the order the client lists them."""
DEFAULT: Final = ASK
"""A new session's mode."""
BY_ID: Final[dict[str, Mode]] = {mode.id: mode for mode in MODES}


def mode_named(mode_id: str) -> Mode:
    """The mode ``mode_id``; an id no mode has (the session never sets one) is the default mode, the one that
    asks: a decision that cannot find its mode asks rather than allows."""
    return BY_ID.get(mode_id, DEFAULT)
