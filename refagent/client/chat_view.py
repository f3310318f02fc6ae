"""What ``refagent chat`` shows: the session's updates, drawn with rich on one :class:`~rich.console.Console`.

Two layers. What is finished is printed once, for good, into the terminal's scrollback: the blocks of an
assistant message as each one ends (:func:`~refagent.client.chat_blocks.split_blocks`), a thought
shortened, a tool call when it completes or fails (with its diff and its trimmed output), a plan when it
is done. What is still happening lives in a transient :class:`~rich.live.Live` region below it while a
turn runs (:meth:`ChatView.begin` .. :meth:`ChatView.end`): the end of the message being streamed, the tool
calls that are pending or running, the plan's checklist (updated in place), and a spinner with the time
taken. Nothing is drawn twice, and the region never grows taller than the screen, so the scrollback
stays clean whatever the length of a message.

The region is redrawn by :meth:`ChatView.tick` (the chat calls it ten times a second) rather than by
rich's refresh thread: everything is drawn from the event loop. It is paused around a permission
question (:meth:`pause`, :meth:`resume`). Without a terminal (a pipe, ``TERM=dumb``) there is no region:
only the finished parts are printed. Colour follows the console (rich: none without a terminal, nor with
``NO_COLOR``).

A turn that failed (the agent's ``_meta.refagent.failure`` on the message chunk and on the prompt's
result: ``kind`` model, auth or config, and the message) is shown once, as an error.

Nothing the agent sends drives the terminal: every string of an update or a permission request is made
visible (:func:`refagent.acp.text.visible_strings`: ESC is drawn as ``\\x1b``, a lone ``\\r`` as ``\\r``)
before anything is drawn from it, and so is the text of :meth:`ChatView.note` and :meth:`ChatView.error`;
all of it goes into :class:`~rich.text.Text` or the blocks of :mod:`~refagent.client.chat_blocks`, never
into rich markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from refagent.acp.text import one_line, visible, visible_strings
from refagent.client import chat_blocks as blocks
from refagent.client.pastes import collapsed
from refagent.client.render import option_key

STOP_NOTES = {
    "cancelled": "Cancelled.",
    "max_tokens": "The reply was cut off: the model reached its output limit (max_tokens).",
    "max_turn_requests": "Stopped: the turn used all the model requests it may make (max_turn_requests).",
    "refusal": "The model refused to go on (refusal).",
}
DRAWN = frozenset(
    {
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "notice",
    }
)
"""The update kinds the view draws (the others are the state's: mode, model, usage, commands, title)."""
FAILURE_LABELS = {"model": "Model error", "auth": "Authentication failed", "config": "Configuration error"}
THOUGHT_CHARS = 160
QUIET_AFTER = 5.0
"""Seconds without a word from the agent after which the spinner says how long the model has been silent
(the agent itself says so after longer: ``refagent.session.waiting``)."""
"""How much of a finished thought stays on screen."""


@dataclass
class _Call:
    title: str
    kind: str
    status: str = "pending"
    content: list[Any] = field(default_factory=list)
    started: float | None = None
    shown: set[int] = field(default_factory=set)
    """Hashes of the diffs already drawn (at the permission question, say)."""


class _Region:
    """The live region's renderable: drawn from the view's state whenever rich draws it (a refresh, or a
    print above it), so it is never a stale copy; nothing while the view hides it."""

    def __init__(self, view: ChatView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.view._hidden:
            yield self.view.region()


def _title(message: dict[str, Any], default: str) -> str:
    """A tool call's ``title`` as one line (``default`` if it has none)."""
    return one_line(str(message.get("title") or "")) or default


def failure_of(meta: Any) -> dict[str, str] | None:
    """The ``_meta.refagent.failure`` of a result or an update: ``{"kind", "message"}``, if there is one."""
    ours = meta.get("refagent") if isinstance(meta, dict) else None
    failure = ours.get("failure") if isinstance(ours, dict) else None
    if not isinstance(failure, dict) or not isinstance(failure.get("message"), str):
        return None
    return {"kind": str(failure.get("kind") or ""), "message": failure["message"]}


class ChatView:
    """Draws a chat on ``console``. ``live``: use the transient region (default: if it is a terminal)."""

    def __init__(
        self, console: Console, *, cwd: str = "", live: bool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        console.push_theme(blocks.THEME)
        self.cwd = cwd.rstrip("/")
        self.live_enabled = console.is_interactive if live is None else live
        self.clock = clock
        self.calls: dict[str, _Call] = {}
        self._later: dict[str, _Call] = {}
        """Calls still running when their turn ended (a background command): shown again when they end."""
        self._live: Live | None = None
        self._hidden = False
        self._cancelling = False
        self._spinner = Spinner("dots", style="cyan")
        self._label = ""
        """What the spinner says instead of what the turn waits on: a session loading, a cancel sent."""
        self._started = 0.0
        self._heard = 0.0  # when the agent last sent this turn anything: how long it has been quiet
        self._active = False
        self._stream = ""  # the kind of chunk being streamed ("" none), its message id and unprinted text
        self._stream_id: Any = None
        self._text = ""
        self._plan: list[Any] = []
        self._plan_printed = True
        self._failure = ""
        self._last = ""  # the kind of the last thing printed: spacing
        self.rejected: set[str] = set()
        """The tool calls the user rejected: their failure is the agent's word to the model, not shown."""
        self.typed_ahead: Callable[[], tuple[str, bool]] = lambda: ("", False)
        """What the user typed during the turn, and whether it is queued (shown under the spinner)."""
        self.interrupt_key = "Ctrl-C"
        """The key the spinner's line names to interrupt the turn (``Esc`` on a terminal the chat reads)."""

    # -- plain lines ------------------------------------------------------------------------------

    def print(self, renderable: RenderableType = "", section: str = "note") -> None:
        """Print for good (above the live region, when there is one), after a blank line between sections
        (not between tool calls, nor between lines of the agent's log)."""
        if self._last and not (section == self._last and section in ("call", "log")):
            self.console.print()
        self._last = section
        self.console.print(renderable)

    def note(self, text: str, style: str = "dim") -> None:
        """A line of ``text`` (its control characters made visible)."""
        self.print(Text(visible(text, layout=True), style=style))

    def error(self, text: str) -> None:
        """``✗ text``, in red (its control characters made visible: an error can quote the agent)."""
        self._finish_stream()
        self.print(Text(f"✗ {visible(text, layout=True)}", style="bold red"), "error")

    def relative(self, path: str) -> str:
        return path[len(self.cwd) + 1 :] if self.cwd and path.startswith(self.cwd + "/") else path

    # -- a turn ------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether a turn (or a session's replay) is being drawn."""
        return self._active

    def begin(self, label: str = "") -> None:
        """A turn starts (or, with a ``label`` for the spinner, a loaded session's replay): updates go to the
        live region until :meth:`end`."""
        self._active = True
        self._label = label
        self._cancelling = False
        self._started = self._heard = self.clock()
        self._failure = ""
        self._last = "prompt"  # the prompt's line is above: a blank line before what the turn draws
        self.resume()

    def end(self, result: dict[str, Any] | None = None, *, error: str = "") -> None:
        """The turn ended: print what is still live, then how it stopped (its failure, if any, once)."""
        self._finish_stream()
        for call_id, call in list(self.calls.items()):
            if call.status not in ("completed", "failed"):
                self._print_call(call_id, call)
                self._later[call_id] = call
        self._print_plan()
        self.pause()
        self._active = False
        if error:
            self.error(error)
        if result is not None:
            failure = failure_of(result.get("_meta"))
            if failure is not None:
                self.failure(failure)
            stop = str(result.get("stopReason") or "")
            if stop in STOP_NOTES:
                self.print(Text(STOP_NOTES[stop], style="yellow"), "stop")
        if self._last:
            self.console.print()
        self._last = ""

    def _print_plan(self) -> None:
        """Print the plan as it stands if only the live region shows it: at the end of a turn, and before a
        permission question (which takes the live region off the screen: the plan stays in sight while the
        user decides). A later change shows in the live region again."""
        if self._plan and not self._plan_printed:
            self._plan_printed = True
            self.print(blocks.plan_block(self._plan), "plan")

    def cancelling(self) -> None:
        """``session/cancel`` was sent: the spinner says so (the turn's end will say ``Cancelled.``)."""
        self._label = "Cancelling (Ctrl-C again to quit)"
        self._cancelling = True
        if not self._live_now():
            self.note("Cancelling… (Ctrl-C again to quit)", "yellow")

    def tick(self) -> None:
        """Redraw the live region (the spinner moves, the time goes on)."""
        if self._live is not None:
            self._live.refresh()

    def pause(self) -> None:
        """Take the live region off the screen (before a question, or at the end of a turn)."""
        if self._live is not None:
            live, self._live = self._live, None
            self._hidden = True  # nothing left to draw: stop() cannot scroll anything away
            try:
                live.refresh()
                live.stop()
            finally:
                self._hidden = False

    def resume(self) -> None:
        if self.live_enabled and self._active and self._live is None:
            self._live = Live(
                _Region(self),
                console=self.console,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def flush(self) -> None:
        """Print what is being streamed now (an update that came between turns)."""
        self._finish_stream()

    # -- updates -----------------------------------------------------------------------------------

    def update(self, update: dict[str, Any]) -> None:
        """Draw one ``session/update``'s ``update`` (kinds with nothing to show are left to the state),
        every string in it made visible."""
        update = visible_strings(update)
        kind = str(update.get("sessionUpdate"))
        self._heard = self.clock()
        if kind in ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk"):
            self._chunk(kind, update)
        elif kind == "tool_call":
            self._finish_stream()
            call_id = str(update.get("toolCallId", ""))
            self.calls[call_id] = _Call(_title(update, "tool call"), one_line(str(update.get("kind") or "")))
            self._call_update(call_id, update)
        elif kind == "tool_call_update":
            self._call_update(str(update.get("toolCallId", "")), update)
        elif kind == "notice":  # news about this run of the agent (a broken configuration): said at once
            self._finish_stream()
            said = ": ".join(one_line(str(update[k])) for k in ("title", "description") if update.get(k))
            if update.get("severity") == "error":
                self.error(said)
            else:
                self.print(Text(said, style="yellow" if update.get("severity") == "warning" else "dim"), "notice")
        elif kind == "plan":
            entries = list(update.get("entries") or [])
            if entries == self._plan and self._plan_printed:
                return
            self._plan = entries
            done = all(isinstance(e, dict) and e.get("status") == "completed" for e in entries)
            self._plan_printed = False
            if done or not self._live_now():  # for good once done; till then it changes in the live region
                self._finish_stream()
                self._plan_printed = True
                self.print(blocks.plan_block(self._plan), "plan")

    def _live_now(self) -> bool:
        return self.live_enabled and self._active

    def _chunk(self, kind: str, update: dict[str, Any]) -> None:
        content = update.get("content") or {}
        failure = failure_of(update.get("_meta"))
        if failure is not None:
            self._finish_stream()
            self.failure(failure)
            return
        text = str(content.get("text", "")) if content.get("type") == "text" else _block_label(content)
        message_id = update.get("messageId")
        if kind != self._stream or (message_id is not None and message_id != self._stream_id):
            self._finish_stream()
            self._stream, self._stream_id = kind, message_id
        self._text += text
        if kind == "agent_message_chunk":
            done, self._text = blocks.split_blocks(self._text)
            if done:
                self.print(blocks.markdown(done), "message")

    def _finish_stream(self) -> None:
        kind, text = self._stream, self._text.strip("\n")
        self._stream, self._stream_id, self._text = "", None, ""
        if not text.strip():
            return
        if kind == "agent_message_chunk":
            self.print(blocks.markdown(text), "message")
        elif kind == "agent_thought_chunk":
            flat = " ".join(text.split())
            short = flat if len(flat) <= THOUGHT_CHARS else flat[: THOUGHT_CHARS - 1].rstrip() + "…"
            self.print(Text(f"✻ {short}", style="dim italic"), "thought")
        elif kind == "user_message_chunk":
            self.print(Text("› " + collapsed(text).replace("\n", "\n  "), style="bold"), "user")

    def failure(self, failure: dict[str, str]) -> None:
        """A failed turn's reason, as an error: once, however many times the agent says it."""
        if failure["message"] == self._failure:
            return
        self._failure = failure["message"]
        label = FAILURE_LABELS.get(failure["kind"])
        self.error(f"{label}: {failure['message']}" if label else failure["message"])

    def _call_update(self, call_id: str, update: dict[str, Any]) -> None:
        call = self.calls.get(call_id)
        if call is None and call_id in self._later:  # a call that went on after its turn
            if update.get("status") not in ("completed", "failed"):
                return  # its output so far: not news between turns, and no live region to show it in
            call = self.calls[call_id] = self._later.pop(call_id)
        if call is None:  # an update for a call never announced: show it anyway
            call = self.calls[call_id] = _Call(_title(update, "tool call"), one_line(str(update.get("kind") or "")))
        call.title = _title(update, call.title)
        if update.get("kind"):
            call.kind = one_line(str(update["kind"]))
        if isinstance(update.get("content"), list):
            call.content = update["content"]
        status = update.get("status")
        if isinstance(status, str):
            if status == "in_progress" and call.started is None:
                call.started = self.clock()
            call.status = status
        if call.status in ("completed", "failed"):
            self._finish_stream()
            self._print_call(call_id, call)

    def _print_call(self, call_id: str, call: _Call) -> None:
        """A tool call, for good: its line, the diffs not shown yet, its output (a read only counted)."""
        del self.calls[call_id]
        parts: list[RenderableType] = [blocks.call_line(call.title, call.kind, call.status, self._took(call))]
        parts += self._diffs(call)
        if call.status == "failed" and call_id in self.rejected:
            self.rejected.discard(call_id)  # what the agent tells the model ("Do not retry it") is not for the user
            parts.append(Text("    not run: you rejected it", style="dim"))
        elif call.status in ("completed", "failed"):
            lines = blocks.content_lines(blocks.text_of(call.content))
            if call.kind == "read" and call.status == "completed" and lines:
                read = blocks.count(len(lines), "line")
                parts.append(Text(f"    read {read}", style="dim"))  # the file itself is not news
            elif lines:
                parts.append(blocks.output_block(blocks.trim(lines)))
        self.print(Group(*parts), "call")

    def _took(self, call: _Call) -> str:
        """How long the call has been running (nothing for what took no time worth saying)."""
        took = self.clock() - call.started if call.started is not None else 0.0
        return blocks.seconds(took) if took >= 0.1 else ""

    def _diffs(self, call: _Call, content: list[Any] | None = None) -> list[RenderableType]:
        shown: list[RenderableType] = []
        for item in content if content is not None else call.content:
            if not isinstance(item, dict) or item.get("type") != "diff":
                continue
            key = hash((item.get("path"), item.get("oldText"), item.get("newText")))
            if key in call.shown:
                continue
            call.shown.add(key)
            path = self.relative(str(item.get("path", "")))
            shown.append(blocks.diff_block(path, item.get("oldText"), str(item.get("newText", ""))))
        return shown

    # -- permission --------------------------------------------------------------------------------

    def permission(self, params: dict[str, Any]) -> str:
        """Show what the agent asks to do (title, preview, diff) and the answers; returns them (``y / a / n``).
        Every string of ``params`` is made visible first."""
        self._finish_stream()
        self._print_plan()
        params = visible_strings(params)
        tool = params.get("toolCall") or {}
        call_id = str(tool.get("toolCallId", ""))
        call = self.calls.get(call_id) or _Call("a tool call", "")
        title = _title(tool, call.title)
        kind = one_line(str(tool.get("kind") or call.kind))
        content: list[Any] = tool["content"] if isinstance(tool.get("content"), list) else call.content
        head = Text("  ")
        head.append("?", style="bold magenta")
        head.append(" ")
        head.append(title, style="bold")
        if kind:
            head.append(f" ({kind})", style="dim")
        parts: list[RenderableType] = [head]
        preview = blocks.content_lines(blocks.text_of(content))
        if preview:
            parts.append(blocks.output_block(blocks.trim(preview)))
        parts += self._diffs(call, content)
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        for option in options:
            line = Text("      ")
            line.append(f"[{option_key(option)}] ", style="bold magenta")
            line.append(one_line(str(option.get("name") or option.get("optionId"))), style="dim")
            parts.append(line)
        self.print(Group(*parts), "permission")
        self._last = "answer"
        return " / ".join(dict.fromkeys(option_key(o) for o in options))

    def approved(self, params: dict[str, Any], how: str) -> None:
        """A permission question approved without asking (``--yes``): one line, and the change's diff (the
        menu is not drawn: there is nothing to choose). Every string of ``params`` is made visible first."""
        self._finish_stream()
        self._print_plan()
        params = visible_strings(params)
        tool = params.get("toolCall") or {}
        call = self.calls.get(str(tool.get("toolCallId", ""))) or _Call("a tool call", "")
        content: list[Any] = tool["content"] if isinstance(tool.get("content"), list) else call.content
        line = Text("  ")
        line.append("✓ Approved:", style="green")
        line.append(" ")
        line.append(_title(tool, call.title), style="bold")
        line.append(f" ({one_line(how)})", style="dim")
        self.print(Group(line, *self._diffs(call, content)), "permission")
        self._last = "permission"

    def answered(self, text: str) -> None:
        """The answer to a permission question, on one line (it may hold the option's name)."""
        self.console.print(Text(f"    → {one_line(text)}", style="magenta"))
        self._last = "permission"

    # -- the live region ---------------------------------------------------------------------------

    def region(self) -> RenderableType:
        """What the live region shows now (the end of the streamed message, the pending and running tool
        calls, the plan, the spinner)."""
        parts: list[RenderableType] = []
        room = max(3, self.console.size.height - 4 - len(self.calls) - (len(self._plan) + 1 if self._plan else 0))
        if self._stream == "agent_message_chunk" and self._text.strip():
            parts.append(blocks.markdown(self._text, last=room))
        elif self._stream == "agent_thought_chunk" and self._text.strip():
            last = self._text.strip().splitlines()[-1]
            parts.append(Text(f"✻ {last}", style="dim italic", no_wrap=True, overflow="ellipsis"))
        running = ""
        for call in self.calls.values():
            parts.append(blocks.call_line(call.title, call.kind, call.status, self._took(call)))
            if call.status == "in_progress":
                running = call.title
        if self._plan and not self._plan_printed:
            parts.append(blocks.plan_block(self._plan))
        status = Text(f"{self._activity(running)}… ", style="yellow" if self._cancelling else "cyan")
        status.append(blocks.seconds(self.clock() - self._started), style="dim")
        if not self._cancelling:
            status.append(f" · {self.interrupt_key} to interrupt", style="dim")
        self._spinner.update(text=status)
        if parts:
            parts.append(Text(""))
        parts.append(self._spinner)
        parts += self._typed_ahead()
        return Group(Text(""), *parts)

    def _typed_ahead(self) -> list[RenderableType]:
        """The next prompt, typed while this turn runs: its last lines, the cursor, and what becomes of it."""
        draft, queued = self.typed_ahead()
        if not draft:
            return []
        lines = visible(collapsed(draft), layout=True).split("\n")
        shown = Text("› " + "\n  ".join(lines[-3:]), "bold")
        shown.append("▏", "cyan")
        if queued:
            note = "queued: sent when this turn ends (Ctrl-U drops it; interrupting the turn keeps it unsent)"
        else:
            note = "the next prompt: Enter queues it to be sent when this turn ends, or it waits at the prompt"
        return [Text(""), shown, Text(f"  {note}", "dim")]

    def _activity(self, running: str) -> str:
        """What the turn waits on, first word first: the model (thinking, writing, or silent for how long),
        a tool (the running call's title, which the agent keeps saying how long it has run and whether it
        waits on the editor), or, while the agent loads a session, that. The user's turn is the question
        on the screen (the live region is off while it is asked)."""
        if running and not self._cancelling:
            return f"Tool · {running}"
        if self._label:  # a cancel sent, or a session being loaded: not the model's doing
            return self._label
        quiet = self.clock() - self._heard
        if quiet >= QUIET_AFTER:
            return f"Model · nothing for {blocks.seconds(quiet)}"
        if self._stream == "agent_thought_chunk":
            return "Model · thinking"
        if self._stream == "agent_message_chunk":
            return "Model · writing"
        return "Model · waiting for its reply"


def _block_label(content: dict[str, Any]) -> str:
    """A content block that is not text, as a line: a linked file by its name (``[file: app.py]``), an
    image by its type, anything else by its kind."""
    kind = content.get("type")
    if kind == "resource_link" and content.get("name"):
        return f"\n[file: {content['name']}]\n"
    return f"\n[{kind}]\n"
