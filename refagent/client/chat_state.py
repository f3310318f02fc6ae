"""What ``refagent chat`` knows of its session, from the agent's answers and updates: the mode, the model,
the context and cost, the agent's slash commands, and the last ``/sessions`` listing.

:class:`ChatState` is plain data: :meth:`ChatState.adopt` takes a ``session/new`` or ``session/load``
result, :meth:`ChatState.apply` one ``session/update``; the status line (:meth:`ChatState.status`), the
completion of the prompt and ``/help`` read it. Nothing here draws or does I/O; but what is kept is kept
to be shown, so each text taken from the agent (a title, a mode's or a model's name, a command's
description) is one line with its control characters made visible (:func:`refagent.acp.text.one_line`).
The session's id is kept as the agent gave it: it goes back to the agent.

Spec: ACP "Session Modes" (``modes``, ``current_mode_update``), "Session Config Options" (category
``model`` and ``mode``, ``config_option_update``), "Slash Commands" (``available_commands_update``), and the
``usage_update`` of the schema (``used``, ``size``, ``cost {amount, currency}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from refagent.acp.text import one_line


@dataclass(frozen=True, slots=True)
class Command:
    """A slash command: ``name`` without the slash; ``hint`` describes its argument ("" if it takes none)."""

    name: str
    description: str
    hint: str = ""


CLIENT_COMMANDS = (
    Command("help", "Show the commands and the keys"),
    Command("sessions", "List this directory's saved sessions"),
    Command("resume", "Go on with a saved session (it is shown again)", "its id, or its number in /sessions"),
    Command("new", "Start a fresh session (same agent)"),
    Command("effort", "Choose the model's reasoning effort, where it takes one", "low, medium, high..."),
    Command("share", "Send the last !command and its output to the model", "your words to go with it (optional)"),
    Command("quit", "Leave (Ctrl-D does too)"),
)
"""The commands the chat answers itself; the agent's (those it announced) go to it as the prompt, and any
other ``/word`` is refused by the chat."""
CLIENT_NAMES = frozenset(c.name for c in CLIENT_COMMANDS) | {"exit"}
FULL_ACCESS = "full-access"
"""The mode that never asks: Shift-Tab does not cycle to it; ``/mode full-access`` asks first."""


@dataclass
class ChatState:
    """The session as the chat knows it. ``session_id`` empty: no session open yet."""

    session_id: str = ""
    title: str = ""
    mode: str = ""
    modes: list[tuple[str, str]] = field(default_factory=list)
    """(id, name) of the modes the session offers."""
    described: dict[tuple[str, str], str] = field(default_factory=dict)
    """What each mode or model does, by (``mode`` or ``model``, its id or value), as the agent describes it
    (the pickers show it)."""
    model: str = ""
    """The current model's display name."""
    model_id: str = ""
    """The current model's value (its ``model`` config option's ``currentValue``)."""
    models: list[tuple[str, str]] = field(default_factory=list)
    """(value, name) of the models the session offers (its ``model`` config option)."""
    effort: str = ""
    efforts: list[tuple[str, str]] = field(default_factory=list)
    """(value, name) of the reasoning efforts the model takes (a ``thought_level`` option), if any."""
    option_ids: dict[str, str] = field(default_factory=dict)
    """The config options' ids by category (``mode``, ``model``, ``thought_level``): what a picker sets."""
    used: int | None = None
    size: int | None = None
    cost: tuple[float, str] | None = None
    commands: list[Command] = field(default_factory=list)
    """The agent's slash commands, from its last ``available_commands_update``."""
    listed: list[dict[str, Any]] = field(default_factory=list)
    """The entries of the last ``/sessions`` (``/resume`` completes their ids and takes their numbers)."""
    cwd: str = ""
    """The chat's directory (``@`` completes paths under it)."""

    def adopt(self, session_id: str, result: dict[str, Any], title: str = "") -> None:
        """A session was opened: forget the previous one's state, take this one's from the agent's answer."""
        vars(self).update(vars(ChatState(listed=self.listed, cwd=self.cwd)))  # every other field back to its default
        self.session_id = session_id
        self.title = one_line(title)
        modes = result.get("modes")
        if isinstance(modes, dict):
            self.mode = _line(modes.get("currentModeId"))
            listed = [m for m in modes.get("availableModes") or [] if isinstance(m, dict) and "id" in m]
            self.modes = [(_line(m["id"]), _line(m.get("name") or m["id"])) for m in listed]
            self.described.update(
                (("mode", _line(m["id"])), _line(m.get("description"))) for m in listed if m.get("description")
            )
        self._options(result.get("configOptions"))

    def apply(self, update: dict[str, Any]) -> None:
        """Take what one ``session/update`` says about the session (the kinds that are not drawn)."""
        kind = update.get("sessionUpdate")
        if kind == "current_mode_update":
            self.mode = _line(update.get("currentModeId")) or self.mode
        elif kind == "config_option_update":
            self._options(update.get("configOptions"))
        elif kind == "usage_update":
            self.used = _int(update.get("used"))
            self.size = _int(update.get("size"))
            cost = update.get("cost")
            if isinstance(cost, dict) and isinstance(cost.get("amount"), int | float):
                self.cost = (float(cost["amount"]), _line(cost.get("currency")))
        elif kind == "available_commands_update":
            self.commands = [
                Command(one_line(c["name"]), _line(c.get("description")), _hint(c))
                for c in update.get("availableCommands") or []
                if isinstance(c, dict) and isinstance(c.get("name"), str)
            ]
        elif kind == "session_info_update" and isinstance(update.get("title"), str):
            self.title = one_line(update["title"])

    def _options(self, options: Any) -> None:
        for option in options if isinstance(options, list) else []:
            if not isinstance(option, dict):
                continue
            category = option.get("category") or option.get("id")
            current = _line(option.get("currentValue"))
            choices = [c for c in option.get("options") or [] if isinstance(c, dict) and "value" in c]
            if isinstance(category, str) and isinstance(option.get("id"), str):
                self.option_ids[category] = option["id"]  # sent back as the agent gave it
            if category in ("mode", "model"):
                described = [c for c in choices if c.get("description")]
                self.described.update(((category, _line(c["value"])), _line(c["description"])) for c in described)
            if category == "model":
                self.models = [(_line(c["value"]), _line(c.get("name") or c["value"])) for c in choices]
                self.model = next((name for value, name in self.models if value == current), current)
                self.model_id = current
            elif category == "thought_level":
                self.efforts = [(_line(c["value"]), _line(c.get("name") or c["value"])) for c in choices]
                self.effort = current
            elif category == "mode" and current:
                self.mode = current
                if not self.modes:
                    self.modes = [(_line(c["value"]), _line(c.get("name") or c["value"])) for c in choices]

    def choices(self, what: str) -> tuple[list[tuple[str, str]], str]:
        """What a picker offers for ``what`` (``mode``, ``model`` or ``effort``): (value, name) pairs, and
        the current value."""
        if what == "mode":
            return self.modes, self.mode
        if what == "model":
            return self.models, self.model_id
        return self.efforts, self.effort

    def next_mode(self) -> str | None:
        """The mode after the current one, in the session's order (round to the first), never
        :data:`FULL_ACCESS`: what Shift-Tab switches to. A key pressed to go one step further must not
        remove every question, so the mode that asks nothing is reached only by naming it (and confirming).
        None when there is nothing to cycle."""
        ids = [mode for mode, _ in self.modes if mode != FULL_ACCESS]
        if len(ids) < 2 and not (ids and self.mode not in ids):
            return None
        at = ids.index(self.mode) if self.mode in ids else -1
        return ids[(at + 1) % len(ids)]

    def mode_name(self) -> str:
        return next((name for mode, name in self.modes if mode == self.mode), self.mode)

    def status(self) -> str:
        """The status line: mode · model · context used/size (percent) · cost; what is unknown is left out."""
        parts = [p for p in (self.mode, self.model) if p]
        if self.used is not None and self.size:
            parts.append(f"context {tokens(self.used)}/{tokens(self.size)} ({100 * self.used // self.size}%)")
        elif self.used is not None:
            parts.append(f"context {tokens(self.used)}")
        if self.cost is not None:
            parts.append(money(*self.cost))
        return " · ".join(parts)


def tokens(count: int) -> str:
    """``950``, ``12.3k``, ``128k``, ``1.05M``: a token count as people read it."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        value = count / 1000
        return f"{value:.1f}k".replace(".0k", "k") if value < 100 else f"{round(value)}k"
    return f"{count / 1_000_000:.2f}M".replace(".00M", "M")


def money(amount: float, currency: str) -> str:
    """``$0.0123`` for USD, else ``0.0123 EUR`` (small amounts keep four decimals: they add up)."""
    text = f"{amount:.4f}" if amount < 1 else f"{amount:.2f}"
    return f"${text}" if currency.upper() == "USD" else f"{text} {currency}".strip()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _line(value: Any) -> str:
    """A text the agent gave, to be shown: one line, its control characters visible (``""`` for none)."""
    return one_line(str(value)) if value is not None and value != "" else ""


def _hint(command: dict[str, Any]) -> str:
    given = command.get("input")
    return _line(given.get("hint")) if isinstance(given, dict) else ""
