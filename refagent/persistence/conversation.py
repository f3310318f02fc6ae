"""The model-facing conversation of a session (:class:`Conversation`): the messages in the Chat Completions
format, each recorded in the session's record file as it joins."""

from __future__ import annotations

from typing import Any

from refagent.acp.text import clean
from refagent.persistence.writer import SessionLog


class Conversation(list[dict[str, Any]]):
    """The model-facing conversation. Each message appended is recorded in ``log``; :meth:`replace`
    records the whole new conversation (compaction, rewind). :attr:`starts` says where each prompt turn
    began (``/rewind`` cuts there), recorded as ``start`` records; a conversation replaced whole forgets
    the starts it does not carry over (a compacted conversation cannot be cut inside its summary).

    Every message joins it cleaned of lone surrogates (:func:`refagent.acp.text.clean`): whatever it came
    from (the prompt, a tool's output with a file name that is not UTF-8, a command's output, an MCP
    server, a note of changed files), a message the model request cannot encode would fail this request
    and every later one of the session. One scan per message, once."""

    def __init__(self, messages: list[dict[str, Any]] | None = None, log: SessionLog | None = None) -> None:
        super().__init__(clean(messages or []))
        self.log = log
        self.starts: dict[int, int] = {}
        """Prompt turn -> the index of its first message."""

    def mark_turn(self, turn: int, at: int | None = None) -> None:
        """Prompt turn ``turn`` begins at message ``at`` (default: the next one appended)."""
        at = len(self) if at is None else at
        self.starts[turn] = at
        if self.log is not None:
            self.log.append({"kind": "start", "turn": turn, "at": at})

    def cut(self, turn: int) -> None:
        """Forget turn ``turn`` and everything after it: the conversation as it was before that turn."""
        at = self.starts[turn]
        kept = {t: i for t, i in self.starts.items() if t < turn}
        self.replace(self[:at])
        for earlier, index in sorted(kept.items()):
            self.mark_turn(earlier, index)

    def append(self, message: dict[str, Any]) -> None:
        message = clean(message)
        super().append(message)
        if self.log is not None:
            self.log.append({"kind": "message", "message": message})

    def restore(self, messages: list[dict[str, Any]], starts: dict[int, int] | None = None) -> None:
        """Become ``messages``, read from the record file (so not recorded again), with its turns' ``starts``.
        Tool calls left without a result (the agent was stopped during them: a crash, a kill) are given
        one, as the API requires (after the last start, so the starts hold)."""
        super().__setitem__(slice(None), _answered(clean(messages)))
        self.starts = {t: i for t, i in (starts or {}).items() if 0 <= i <= len(self)}

    def replace(self, messages: list[dict[str, Any]]) -> None:
        messages = clean(messages)
        self[:] = messages
        self.starts = {}
        if self.log is not None:
            self.log.append({"kind": "history", "messages": messages})


STOPPED_RESULT = "Not run: the agent stopped before this call finished (it was restarted)."


def _answered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with a :data:`STOPPED_RESULT` after the results of each assistant message for each of
    its tool calls that has none."""
    out: list[dict[str, Any]] = []
    waiting: list[str] = []  # the last assistant message's calls without a result so far

    def stopped() -> None:
        out.extend({"role": "tool", "tool_call_id": ident, "content": STOPPED_RESULT} for ident in waiting)
        waiting.clear()

    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in waiting:
            waiting.remove(message["tool_call_id"])
        else:
            stopped()
        out.append(message)
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if isinstance(calls, list):
            waiting.extend(c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str))
    stopped()
    return out
