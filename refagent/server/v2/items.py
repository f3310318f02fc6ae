"""What the v2 bridge keeps of a session's live items (:class:`SessionItems`), and the updates it sends
for them that v1 has no word for:

- a tool call that is executing may be cancelled alone (``tool_call/cancel``): its update says so
  (``capabilities.cancel``) while it executes, and stops saying so after; one the client cancelled ends
  ``cancelled`` (v1 can only say ``failed``);
- a background command (``run_command`` with ``background: true``, :mod:`refagent.tools.jobs`) is a
  display-only terminal (``terminal_update``: its command, directory, output and, at the end, its exit
  status) that the client may cancel (``terminal/cancel``), embedded in the call that started it and
  listed as background work in every ``state_update`` while it runs. Its output, which v1 streams into
  the call's text, goes to the terminal instead.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from refagent.tools.jobs import Entry

SHOWN_BYTES = 64 << 10
"""A terminal's output snapshot: its last 64 KiB."""
FINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass
class Terminal:
    """A background command shown as a terminal."""

    terminal_id: str
    entry: Entry
    exited: bool = False


@dataclass
class SessionItems:
    kinds: dict[str, str] = field(default_factory=dict)
    """The kinds of its tool calls so far, by id (for the diffs of deletions)."""
    cancellable: set[str] = field(default_factory=set)
    """The calls whose updates said they may be cancelled, and have not said otherwise since."""
    cancelled: set[str] = field(default_factory=set)
    """The calls the client cancelled alone."""
    terminals: dict[str, Terminal] = field(default_factory=dict)
    """Its background commands, by terminal id."""
    by_call: dict[str, str] = field(default_factory=dict)
    """The terminal id of each call that started a background command."""

    def background(self) -> list[dict[str, Any]]:
        """The background work running now, as ``state_update`` lists it."""
        return [{"type": "terminal", "terminalId": t.terminal_id} for t in self.terminals.values() if not t.exited]

    def add_terminal(self, entry: Entry) -> Terminal:
        terminal = Terminal(f"term_{entry.call_id}", entry)
        self.terminals[terminal.terminal_id] = terminal
        self.by_call[entry.call_id] = terminal.terminal_id
        return terminal


def terminal_started(terminal: Terminal) -> dict[str, Any]:
    """The ``terminal_update`` that announces a background command: what it runs, where, cancellable."""
    update: dict[str, Any] = {
        "sessionUpdate": "terminal_update",
        "terminalId": terminal.terminal_id,
        "command": terminal.entry.command,
        "capabilities": {"cancel": {}},
    }
    if terminal.entry.cwd:
        update["cwd"] = terminal.entry.cwd
    return update


def terminal_output(terminal: Terminal, output: str) -> dict[str, Any]:
    """A ``terminal_update`` with the command's output so far (the end of it, :data:`SHOWN_BYTES`)."""
    return {"sessionUpdate": "terminal_update", "terminalId": terminal.terminal_id, "output": snapshot(output)}


def terminal_exited(terminal: Terminal) -> dict[str, Any]:
    """The ``terminal_update`` of a background command's end: its last output and how it exited."""
    result = terminal.entry.job.result
    assert result is not None  # sent once it has ended
    status: dict[str, Any] = {"exitCode": result.exit_code}
    if result.signal:
        status["signal"] = result.signal
    return {
        "sessionUpdate": "terminal_update",
        "terminalId": terminal.terminal_id,
        "output": snapshot(result.output),
        "exitStatus": status,
        "capabilities": None,
    }


def snapshot(output: str) -> dict[str, Any]:
    """Output as a v2 terminal holds it: base64 bytes (the last :data:`SHOWN_BYTES`)."""
    data = output.encode("utf-8", "replace")[-SHOWN_BYTES:]
    return {"data": base64.b64encode(data).decode("ascii")}


def embedded(update: dict[str, Any], terminal: Terminal) -> dict[str, Any]:
    """``update`` (a call's) with its terminal shown in its content, after what it says."""
    content = [c for c in update.get("content") or [] if c.get("type") != "terminal"]
    return {**update, "content": [*content, {"type": "terminal", "terminalId": terminal.terminal_id}]}
