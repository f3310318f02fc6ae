"""``/mode``, ``/model`` and ``/effort`` with no argument: the session's choices, numbered, the current one
marked, and the user's pick (a number, a value or a name; Enter alone keeps the current one), set with
``session/set_config_option`` (``session/set_mode`` for an agent that offers modes without the option).

Pure helpers; :meth:`refagent.client.chat_choices.Choices.pick` asks and sends.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

PICKED = {"mode": ("mode", "Mode"), "model": ("model", "Model"), "effort": ("thought_level", "Reasoning effort")}
"""The chat's word -> (the config option category it sets, its name for the user)."""


def picker_block(
    label: str, choices: list[tuple[str, str]], current: str, described: Mapping[str, str] | None = None
) -> Text:
    """The numbered choices, the current one marked, each with what it does under it (``described``, by
    value: the agent's description of a mode or a model, where it gave one)."""
    block = Text(f"{label}:\n", "bold")
    for number, (value, name) in enumerate(choices, 1):
        mark = "●" if value == current else "○"
        line = Text(f"  {number}. {mark} {name}", "bold" if value == current else "")
        if name != value:
            line.append(f"  ({value})", "dim")
        if value == current:
            line.append("  current", "green")
        block.append_text(line)
        block.append("\n")
        about = (described or {}).get(value)
        if about:
            block.append(f"       {about}\n", "dim")
    return block


def picked(answer: str, choices: list[tuple[str, str]]) -> str | None:
    """The value ``answer`` picks (its number, its value or its name, any case); None for none of them."""
    wanted = answer.strip()
    if wanted.isdigit() and 1 <= int(wanted) <= len(choices):
        return choices[int(wanted) - 1][0]
    lowered = wanted.lower()
    for value, name in choices:
        if lowered in (value.lower(), name.lower()):
            return value
    return None
