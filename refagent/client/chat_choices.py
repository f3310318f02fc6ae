"""What ``refagent chat`` sets in its session on the user's word: the ``/mode``, ``/model`` and ``/effort``
pickers (:mod:`refagent.client.chat_pickers` draws them), full access (only after a y/N question that
says what it allows), the mode a session starts in (``--mode``), what ``/new`` keeps of the session it
leaves (model, mode, effort), and the session ``--resume`` without an id picks.

Each is set with ``session/set_config_option`` (``session/set_mode`` for an agent that offers modes
without the option), and the state takes the agent's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text

from refagent.acp.connection import Connection
from refagent.acp.errors import RequestError
from refagent.acp.text import one_line
from refagent.client.chat_blocks import sessions_block
from refagent.client.chat_input import ChatInput
from refagent.client.chat_pickers import PICKED, picked, picker_block
from refagent.client.chat_state import FULL_ACCESS, ChatState
from refagent.client.chat_view import ChatView
from refagent.client.opening import list_sessions

RECENT = 10
"""How many sessions ``--resume`` without an id offers."""


@dataclass
class Choices:
    """Sets what the user chose in the session of ``state``, over ``connection``."""

    connection: Connection
    state: ChatState
    view: ChatView
    input: ChatInput

    async def pick(self, what: str, given: str) -> None:
        """``/mode``, ``/model`` or ``/effort`` with no argument: pick from the session's choices
        (:mod:`refagent.client.chat_pickers`); ``/effort <value>`` sets it at once."""
        category, label = PICKED[what]
        choices, current = self.state.choices(what)
        if not choices:
            self.view.note(f"This session offers no {label.lower()} to choose.")
            return
        if not given:
            about = {value: text for (kind, value), text in self.state.described.items() if kind == what}
            self.view.print(picker_block(label, choices, current, about), "picker")
            given = await self.input.ask(f"{label} (a number; Enter keeps the current one): ")
            if not given.strip():
                return
        value = picked(given, choices)
        if value is None:
            self.view.error(f"No {label.lower()} {one_line(given.strip())!r} here.")
            return
        if what == "mode" and value == FULL_ACCESS != current and not await self.confirm_full_access():
            self.view.note(f"Mode unchanged: {self.state.mode_name()}.")
            return
        option = self.state.option_ids.get(category)
        try:
            if option is not None:
                params = {"sessionId": self.state.session_id, "configId": option, "value": value}
                result = await self.connection.request("session/set_config_option", params)
                self.state.apply({"sessionUpdate": "config_option_update", **(result or {})})
            else:  # an agent with modes and no mode option
                await self.connection.request("session/set_mode", {"sessionId": self.state.session_id, "modeId": value})
                self.state.mode = value
        except RequestError as exc:
            self.view.error(exc.message)
            return
        name = next((n for v, n in choices if v == value), value)
        self.view.note(f"{label}: {name}.")

    async def keep(self, model: str, mode: str, effort: str) -> None:
        """After ``/new``: the model, mode and effort chosen in the previous session, where the new one
        started on others (the agent starts each on its defaults), and still offers them."""
        kept = []
        for what, value in (("model", model), ("effort", effort)):
            choices, current = self.state.choices(what)
            option = self.state.option_ids.get(PICKED[what][0])
            if value and value != current and option is not None and value in {v for v, _ in choices}:
                params = {"sessionId": self.state.session_id, "configId": option, "value": value}
                result = await self.connection.request("session/set_config_option", params)
                self.state.apply({"sessionUpdate": "config_option_update", **(result or {})})
                kept.append(f"{PICKED[what][1].lower()} {next(n for v, n in choices if v == value)}")
        if mode and mode != self.state.mode and mode in {m for m, _ in self.state.modes}:
            await self.set_mode(mode)
            kept.append(f"mode {self.state.mode_name()}")
        if kept:
            self.view.note(f"Kept from the previous session: {', '.join(kept)}.")

    async def set_mode(self, mode: str) -> None:
        """Switch the session to ``mode``: its ``mode`` config option, or ``session/set_mode``."""
        option = self.state.option_ids.get("mode")
        if option is not None:
            params = {"sessionId": self.state.session_id, "configId": option, "value": mode}
            result = await self.connection.request("session/set_config_option", params)
            self.state.apply({"sessionUpdate": "config_option_update", **(result or {})})
        else:
            await self.connection.request("session/set_mode", {"sessionId": self.state.session_id, "modeId": mode})
        self.state.mode = mode

    async def choose_session(self, init: dict[str, Any], cwd: str) -> str | None:
        """``--resume`` without an id: this directory's recent sessions, numbered; the one picked (None: a
        new session, when there is none or the user presses Enter)."""
        listed = (await list_sessions(self.connection, init, cwd))[:RECENT]
        if not listed:
            self.view.note(f"No saved session in {cwd}: a new one.")
            return None
        self.view.print(Text("Recent sessions:", "bold"), "sessions")
        self.view.console.print(sessions_block(listed))
        while True:
            answer = (await self.input.ask(f"Resume which? (1-{len(listed)}; Enter: a new session) ")).strip()
            if not answer:
                return None
            if answer.isdigit() and 1 <= int(answer) <= len(listed):
                return str(listed[int(answer) - 1].get("sessionId"))
            self.view.note(f"A number from 1 to {len(listed)}, or Enter.", "yellow")

    def full_access(self, name: str, argument: str) -> bool:
        """Whether ``/name argument`` switches to full access (the chat confirms it, then sets it itself)."""
        return name == "mode" and picked(argument, self.state.modes) == FULL_ACCESS

    async def confirm_full_access(self) -> bool:
        """Full access removes every question: say what it allows, and switch only on a yes."""
        allows = self.state.described.get(("mode", FULL_ACCESS)) or "Nothing asks before a change or a command."
        self.view.print(Text(f"Full access: {allows}", "yellow"), "picker")
        answer = await self.input.ask("Switch to full access? [y/N] ")
        return answer.strip().lower() in ("y", "yes")
