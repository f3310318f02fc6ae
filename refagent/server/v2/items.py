"""What the v2 bridge keeps of a session's live items (:class:`SessionItems`), and the updates it sends
for them that v1 has no word for:

- a tool call that is executing may be cancelled alone (``tool_call/cancel``): its update says so
  (``capabilities.cancel``) while it executes, and stops saying so after; one the client cancelled ends
  ``cancelled`` (v1 can only say ``failed``);
- a background command (``run_command`` with ``background: true``, :mod:`refagent.tools.jobs`) is a
  display-only terminal (``terminal_update``: its command, directory, output and, at the end, its exit
  status) that the client may cancel (``terminal/cancel``), embedded in the call that started it and
  listed as background work in every ``state_update`` while it runs. The call is ``completed`` once it
  has returned control to the model (v1 keeps it in progress while the command runs, and ends it with
  the command); the command's output, which v1 streams into the call's text, goes to the terminal, and
  its end to the terminal's exit status (the call's content says it in words too).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refagent.server.v2 import translate

if TYPE_CHECKING:  # annotations: the workspace's modules load after the first session's response
    from refagent.session.workspace import Workspace
    from refagent.tools.jobs import Entry

Send = Callable[[dict[str, Any]], Awaitable[None]]

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

    async def show_call(
        self, v1: dict[str, Any], workspace: Workspace | None, send: Send, restate: Callable[[], Awaitable[None]]
    ) -> None:
        """Send (``send``) a v1 ``tool_call`` or ``tool_call_update`` of the session as v2's, with what v2
        adds (module docstring): whether the call may be cancelled alone, and the background command it
        started as a terminal (``restate``: the session's state again, when its background work changes)."""
        if isinstance(v1.get("kind"), str):
            self.kinds[v1["toolCallId"]] = v1["kind"]
        update = translate.tool_call(v1, self.kinds.get(v1["toolCallId"]))
        call_id = update["toolCallId"]
        if workspace is not None and call_id in workspace.runner.calls:
            if call_id not in self.cancellable:
                self.cancellable.add(call_id)
                update["capabilities"] = {"cancel": {}}
        elif call_id in self.cancellable:
            self.cancellable.discard(call_id)
            update["capabilities"] = None
        if call_id in self.cancelled and update.get("status") == "failed":
            update["status"] = "cancelled"
        terminal_id = self.by_call.get(call_id)
        jobs = workspace.jobs if workspace is not None else None
        if terminal_id is None and jobs is not None and update.get("status") not in FINAL:
            entry = next((e for e in jobs.entries() if e.call_id == call_id and e.running), None)
            if entry is not None:  # it started a background command: announced before it is listed
                terminal = self.add_terminal(entry)
                await send(terminal_started(terminal))
                # The call has returned control to the model: it is done, and its process lives on as the
                # terminal (v1 keeps the call in progress instead, having no terminal of its own to show).
                await send(embedded({**update, "status": "completed"}, terminal))
                await restate()
                return
        if terminal_id is not None:
            terminal = self.terminals[terminal_id]
            if update.get("status") not in FINAL:  # a frame of its output: the terminal shows it
                if not terminal.exited and update.get("content"):
                    await send(terminal_output(terminal, await terminal.entry.job.output()))
                return
            if not terminal.exited:
                terminal.exited = True
                await send(terminal_exited(terminal))
                ended = {key: value for key, value in update.items() if key != "status"}  # said by the terminal
                await send(embedded(ended, terminal))
                await restate()
                return
        await send(update)

    def reopened(self) -> list[dict[str, Any]]:
        """The session was opened again (a resume): its background commands were stopped with it. The
        ``terminal_update`` that says each live one has exited, to send before the state that no longer
        lists it."""
        ended = []
        for terminal in self.terminals.values():
            if not terminal.exited:
                terminal.exited = True
                ended.append(terminal_exited(terminal))
        return ended

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
    update: dict[str, Any] = {"sessionUpdate": "terminal_update", "terminalId": terminal.terminal_id}
    result = terminal.entry.job.result
    if result is None:  # killed with its session, its end not yet seen: exited, how unknown
        return {**update, "exitStatus": {}, "capabilities": None}
    status: dict[str, Any] = {"exitCode": result.exit_code}
    if result.signal:
        status["signal"] = result.signal
    return {**update, "output": snapshot(result.output), "exitStatus": status, "capabilities": None}


def snapshot(output: str) -> dict[str, Any]:
    """Output as a v2 terminal holds it: base64 bytes (the last :data:`SHOWN_BYTES`)."""
    data = output.encode("utf-8", "replace")[-SHOWN_BYTES:]
    return {"data": base64.b64encode(data).decode("ascii")}


def embedded(update: dict[str, Any], terminal: Terminal) -> dict[str, Any]:
    """``update`` (a call's) with its terminal shown in its content, after what it says."""
    content = [c for c in update.get("content") or [] if c.get("type") != "terminal"]
    return {**update, "content": [*content, {"type": "terminal", "terminalId": terminal.terminal_id}]}
