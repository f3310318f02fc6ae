"""Who decides whether a tool call may run: the session's mode, the user's remembered choices, and the
user, asked through ``session/request_permission``.

:meth:`Permissions.decide` takes the session's mode by its id, and asks the mode (:mod:`refagent.tools.modes`,
where each mode's policy is defined) for what depends on it: whether a change is refused outright
(``read-only``), and whether a call inside the roots runs without asking (an edit in ``accept-edits``, a
confined command in ``auto``, anything in ``full-access``). The rest holds in every mode: a read inside the
roots runs, a read outside them asks, and so does changing a file that git, an editor or CI runs later
(:func:`runs_later`: ``.vscode/tasks.json``, ``.envrc``, ``.github/workflows/...``) but in ``full-access``
(commands cannot change those at all, docs/sandbox.md, and the file tools ask). A call that reaches the
network and changes nothing (``fetch``: :attr:`~refagent.tools.base.Plan.network`) is decided as a change is,
but ``read-only`` asks for it rather than refusing it.
"Always" choices are remembered for the session, scoped
by the plan's ``permission_key``: ``edit`` (all edits inside the roots), ``command:git status`` (``git
status`` with arguments its rule in :mod:`refagent.tools.command_scope` lets through; any other command
is remembered exactly), ``read-outside:/dir`` (the files directly in that directory),
``read-outside-tree:/dir`` (anything under it), ... A remembered scope covers exactly what its option
said (:func:`refagent.tools.base.scope_covers`), and a command's only while what it would run is what it
was (:mod:`refagent.tools.grounds`): else it asks again, saying what changed. A remembered rejection
refuses without asking again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from refagent.acp.client import BadAnswer, PermissionAnswer
from refagent.acp.errors import RequestError
from refagent.acp.text import one_line
from refagent.acp.types import PermissionOption, ToolKind
from refagent.sandbox.confine.confinement import own_code
from refagent.sandbox.confine.run_later import HOME_RUN_LATER, RUN_LATER, is_home
from refagent.sandbox.within import within
from refagent.tools.base import Plan, scope_covers
from refagent.tools.grounds import changed
from refagent.tools.modes import mode_named

log = logging.getLogger(__name__)

AskPermission = Callable[[dict[str, Any], list[PermissionOption]], Awaitable[PermissionAnswer]]
"""How the user is asked: ``session/request_permission`` for a tool call with options
(:meth:`refagent.acp.client.SessionClient.request_permission`)."""

Decision = Literal["allow", "ask", "refuse"]

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE, REJECT_ALWAYS = "allow", "allow-always", "reject", "reject-always"


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str = ""
    """For a refusal: what the model is told."""
    cancelled: bool = False
    """The user cancelled the turn while being asked."""


@dataclass
class Permissions:
    """One session's permission memory and policy."""

    allowed: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    grounds: dict[str, tuple[tuple[str, object], ...]] = field(default_factory=dict)
    """For an allowed scope, the grounds of the call it was chosen on (:attr:`Plan.grounds`)."""

    def decide(self, mode_id: str, kind: ToolKind, plan: Plan) -> tuple[Decision, str]:
        """What to do without asking anyone, in the session's mode ``mode_id``, about ``plan`` (of ``kind``):
        allow, ask the user, or refuse (with the reason, for the model)."""
        if not plan.mutating and not plan.outside and not plan.network:
            return "allow", ""
        mode = mode_named(mode_id)
        refusal = mode.refusal(plan)
        if refusal is not None:
            return "refuse", refusal
        key = plan.permission_key
        if key and any(scope_covers(rejected, key) for rejected in self.rejected):
            return "refuse", f"The user chose to always reject {plan.permission_label or key} in this session."
        covering = [allowed for allowed in self.allowed if key and scope_covers(allowed, key)]
        if covering:
            differ = [changed(self.grounds.get(scope, plan.grounds), plan.grounds) for scope in covering]
            if any(not what for what in differ):
                return "allow", ""
            # What the command would do has changed since the user allowed it: they decide again.
            return "ask", f"changed since you allowed it: {', '.join(differ[0])}"

        if plan.outside:  # the roots are the boundary in every mode
            return "ask", ""
        return ("allow" if mode.allows(kind, plan) else "ask"), ""

    def options(self, plan: Plan) -> list[PermissionOption]:
        """The answers a permission request offers: once or always, allow or reject."""
        label = one_line(plan.permission_label) or "calls like this one"  # a name is shown as it reads
        options: list[PermissionOption] = [{"optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once"}]
        if plan.permission_key:
            options.append({"optionId": ALLOW_ALWAYS, "name": f"Always allow {label}", "kind": "allow_always"})
        options.append({"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"})
        if plan.permission_key:
            options.append({"optionId": REJECT_ALWAYS, "name": f"Always reject {label}", "kind": "reject_always"})
        return options

    async def ask(self, request: AskPermission, tool_call: dict[str, Any], plan: Plan) -> Verdict:
        """Ask the user whether ``tool_call`` may run (``request``: the client's
        :meth:`~refagent.acp.client.SessionClient.request_permission`), offering :meth:`options`; remember an
        "always" answer. A client error, or an answer outside the schema, counts as a refusal (the turn
        goes on)."""
        try:
            answer = await request(tool_call, self.options(plan))
        except BadAnswer as exc:
            # A buggy editor's answer is not the user's: the call does not run, and the turn goes on.
            log.warning("malformed permission answer: %s", exc.message)
            return Verdict(False, "The editor's answer to the permission request was not valid; the call did not run.")
        except RequestError as exc:
            log.warning("permission request failed: %s", exc.message)
            return Verdict(False, f"Could not ask the user for permission ({exc.message}); the call did not run.")
        if answer.outcome == "cancelled":
            return Verdict(False, "The user cancelled the turn.", cancelled=True)
        choice = answer.option_id
        if choice in (ALLOW_ALWAYS, REJECT_ALWAYS) and plan.permission_key:
            (self.allowed if choice == ALLOW_ALWAYS else self.rejected).add(plan.permission_key)
            if choice == ALLOW_ALWAYS and plan.grounds:
                self.grounds[plan.permission_key] = plan.grounds
        if choice in (ALLOW_ONCE, ALLOW_ALWAYS):
            return Verdict(True)
        if choice in (REJECT_ONCE, REJECT_ALWAYS):
            return Verdict(False, "The user declined this call. Do not retry it; ask the user how to proceed.")
        return Verdict(
            False, f"The editor answered with an unknown option {str(choice)[:100]!r}; the call did not run."
        )


def _tops(path: str, root: str) -> list[str]:
    """``root``, and each directory between it and ``path`` that holds a ``.git`` (the top of a repository
    an editor opens or CI checks out); none if ``path`` is outside ``root``."""
    if not within(path, root):
        return []
    tops, directory = [root], root
    for part in os.path.relpath(os.path.dirname(path), root).split(os.sep):
        if part in ("", ".", ".."):
            continue
        directory = os.path.join(directory, part)
        if os.path.lexists(os.path.join(directory, ".git")):
            tops.append(directory)
    return tops


def runs_later(plan: Plan, roots: Sequence[str]) -> Plan:
    """``plan`` marked (:attr:`Plan.runs_later`, with a permission scope of that path alone) when it
    changes a file that git, an editor or CI runs later: a :data:`refagent.sandbox.confine.run_later.RUN_LATER`
    path at the top of a root or of a repository inside it (as the sandbox holds them for commands).
    "Always allow edits" does not cover it."""
    if not plan.mutating:
        return plan
    paths = [loc["path"] for loc in plan.locations]
    paths += [item["path"] for item in plan.preview if item["type"] == "diff"]
    for path in paths:
        for root in roots:
            if not within(path, root):
                continue
            shown = one_line(os.path.relpath(path, root))
            home = HOME_RUN_LATER if is_home(root) else ()
            if any(within(path, os.path.join(top, name)) for top in _tops(path, root) for name in RUN_LATER):
                why = "git or an editor runs it"
            elif any(within(path, os.path.join(root, name)) for name in home):
                why = "your tools take orders from it"
            elif any(within(path, code) for code in own_code()):
                why = "refagent runs it when it starts"
            else:
                continue
            return dataclasses.replace(
                plan,
                runs_later=f"{shown}: {why}",
                permission_key=f"run-later:{path}",
                permission_label=f"changes to {shown}",
            )
    return plan
