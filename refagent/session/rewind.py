"""``/rewind``: take a session back to before one of its turns, its files and its conversation alike.

``/rewind`` alone lists the turns it can go back to: each with the start of its prompt and the files it
changed. ``/rewind N`` then:

1. puts back every file turns ``N`` and later changed, as it was before turn ``N``, with ``/undo``'s rules
   (:func:`refagent.session.undo.restore_turns`): all or nothing when a file is outside the roots now or
   changed since the agent left it; moves, deleted directories and what commands did are said, not undone;
2. cuts the model's conversation back to where turn ``N`` began
   (:meth:`refagent.persistence.conversation.Conversation.cut`): the model no longer sees those turns, and
   a load of the session neither (a ``history`` record). The editor keeps showing them, as ACP gives no way
   to take back what was shown: the answer says what happened.

A turn a compaction summarised cannot be cut out of the summary: the turns listed are those since the last
compaction (the conversation's :attr:`~refagent.persistence.conversation.Conversation.starts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refagent.session.undo import UNTRACKED, UndoLog, restore_turns

if TYPE_CHECKING:
    from refagent.persistence.conversation import Conversation
    from refagent.tools.base import ToolContext

PROMPT_CHARS = 70
"""How much of a turn's prompt the list shows."""


def turns_list(history: Conversation, log: UndoLog) -> str:
    """The turns ``/rewind`` can go back to, newest last, and how to choose one."""
    if not history.starts:
        return "There is no turn to rewind to: this session has none since it began or was last compacted."
    changed: dict[int, list[str]] = {}
    for change in log.changes:
        changed.setdefault(change["turn"], []).append(change["path"])
    lines = ["Turns you can rewind to (the files and the conversation go back to before the turn):"]
    for turn, at in sorted(history.starts.items()):
        prompt = _prompt(history[at]) if at < len(history) else ""
        files = sorted(set(changed.get(turn, [])))
        what = f"; changed {', '.join(files)}" if files else ""
        lines.append(f"  {turn}. {prompt or '(no text)'}{what}")
    lines.append("Type /rewind N to go back to before turn N.")
    return "\n".join(lines)


async def rewind_to(turn: int, history: Conversation, log: UndoLog, context: ToolContext) -> str:
    """Take the session back to before ``turn``, as the module docstring says; what to tell the user."""
    if turn not in history.starts:
        known = ", ".join(str(t) for t in sorted(history.starts)) or "none"
        return f"There is no turn {turn} to rewind to (the turns since the session began or was compacted: {known})."
    later = {t for t in {c["turn"] for c in log.changes} if t >= turn}
    outcome = await restore_turns(log, context, later, "Rewind")
    if outcome.refused is not None:
        return outcome.refused
    history.cut(turn)
    message = f"Rewound to before turn {turn}: the model no longer sees turn {turn} and the ones after it."
    if later:
        message += "\n" + outcome.told(f"turn {turn}")
    else:
        message += " They changed no files." + UNTRACKED
    return message


def _prompt(message: dict[str, Any]) -> str:
    """The start of a turn's prompt, on one line."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = " ".join(str(content or "").split())
    return text if len(text) <= PROMPT_CHARS else text[: PROMPT_CHARS - 1] + "…"
