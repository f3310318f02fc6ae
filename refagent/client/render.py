"""What the terminal client shows: ACP ``session/update`` notifications and permission requests, as text.

One :class:`Renderer` per run writes to one text stream. It keeps just enough state to draw a readable
session: whether the cursor is in the middle of streamed text, the tool calls seen so far (titles,
statuses, the diffs already shown), and the kind of the last thing printed. Colors (ANSI) only when asked,
which :func:`use_color` decides from the stream and the environment (``NO_COLOR``, ``FORCE_COLOR``).
Errors go to their own stream (``err``: stderr for ``refagent run``), so that a script reads the session on
stdout and the reason it failed on stderr.

Nothing the agent sends drives the terminal: every string of an update or a permission request, and every
text given to :meth:`Renderer.line`, :meth:`~Renderer.info`, :meth:`~Renderer.error` and
:meth:`~Renderer.write`, is drawn with its control characters made visible (``\\x1b``, ``\\r``: the escapes
of :func:`refagent.acp.text.visible`). Line breaks and tabs stay where text is lines (a message, a
command's output, a diff; a ``\\r\\n`` is a line break); a title, a permission option, a plan entry is one
line (:func:`~refagent.acp.text.one_line`). The only escape sequences written are the renderer's own
colours (SGR, ``ESC [ ... m``).

:class:`QuietPipe` is stdout for a client whose reader may leave (``refagent run ... | head -3``): the first
write that finds the pipe closed ends the output quietly, with no ``BrokenPipeError``, and tells the client,
which stops the agent.

Spec: ACP "Prompt Turn" (session updates), "Tool Calls" (statuses, content, diffs), "Agent Plan".
"""

from __future__ import annotations

import difflib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from refagent.acp.text import one_line, visible, visible_strings

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

EXIT_OUTPUT_CLOSED = 141
"""The exit code of every terminal command whose stdout was closed (``| head``, :class:`QuietPipe`): 128 +
``SIGPIPE``, what a tool the signal ends exits with."""
MAX_OUTPUT_LINES = 16
"""Lines of a tool call's text output shown (head and tail kept)."""
MAX_DIFF_LINES = 80

_STYLES = {
    "bold": "1",
    "dim": "2",
    "italic": "3",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
_STATUS_ICONS = {"pending": "○", "in_progress": "◐", "completed": "✓", "failed": "✗"}
_STATUS_STYLES = {"pending": "dim", "in_progress": "yellow", "completed": "green", "failed": "red"}
_PLAN_ICONS = {"pending": "·", "in_progress": "▸", "completed": "✓"}
_PLAN_STYLES = {"pending": "dim", "in_progress": "yellow", "completed": "green"}


def use_color(stream: TextIO) -> bool:
    """Color when ``stream`` is a terminal, unless ``NO_COLOR`` is set; ``FORCE_COLOR`` forces it."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


@dataclass
class _ToolCall:
    title: str
    kind: str
    status: str = "pending"
    diffs: set[tuple[str, int]] = field(default_factory=set)
    """(path, hash of old and new text) of the diffs already shown."""
    shown_output: bool = False


class QuietPipe:
    """A text stream (:attr:`stream`) over ``stream``'s file descriptor that goes quiet when its reader leaves.

    The first write that fails with ``EPIPE`` points the descriptor at ``/dev/null`` (so that nothing, not
    even the interpreter's last flush of ``sys.stdout`` at exit, fails on it again: Python would print
    "Exception ignored ... BrokenPipeError"), drops what was not written, and calls :attr:`on_closed` once;
    later writes are dropped. What tools do when ``| head`` has read enough: stop, and say nothing.
    """

    def __init__(self, stream: TextIO) -> None:
        stream.flush()
        self.fd = stream.fileno()
        self.closed = False
        self.on_closed: Callable[[], None] | None = None
        raw = _PipeWriter(self.fd, self._reader_left)
        encoding = getattr(stream, "encoding", None) or "utf-8"
        self.stream: TextIO = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors="replace")

    def _reader_left(self) -> None:
        if self.closed:
            return
        self.closed = True
        point_at_devnull(self.fd)
        if self.on_closed is not None:
            self.on_closed()


def point_at_devnull(fd: int) -> None:
    """Point ``fd`` (stdout, whose reader left) at ``/dev/null``: later writes, the interpreter's last flush of
    ``sys.stdout`` at exit included, succeed and vanish instead of raising ``BrokenPipeError``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class _PipeWriter(io.RawIOBase):
    """Writes to ``fd`` (which it does not own); ``EPIPE`` calls ``reader_left`` and counts as written."""

    def __init__(self, fd: int, reader_left: Callable[[], None]) -> None:
        super().__init__()
        self._fd = fd
        self._reader_left = reader_left
        self._gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self._gone:
            return size
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            self._gone = True
            self._reader_left()
            return size


class Renderer:
    """Draws a session on ``out``, and errors on ``err`` (default: ``out``), in color if ``color`` (and
    ``err_color``, for ``err``: default, the same when it is ``out``, else none). Paths are shown relative
    to ``cwd`` when inside it."""

    def __init__(
        self,
        out: TextIO,
        *,
        color: bool = False,
        cwd: str = "",
        err: TextIO | None = None,
        err_color: bool | None = None,
    ) -> None:
        self.out = out
        self.color = color
        self.err = err if err is not None else out
        self.err_color = err_color if err_color is not None else color and self.err is out
        self.cwd = cwd.rstrip("/")
        self.calls: dict[str, _ToolCall] = {}
        self._mid_line = False  # streamed text left the cursor after some characters
        self._streaming: str | None = None  # the kind of chunk being streamed, if any

    # -- plain output -------------------------------------------------------------------------

    def style(self, text: str, *styles: str) -> str:
        """``text`` in ``styles`` (when in colour). ``text`` is written as it is: what is not the
        renderer's own has been made visible before (:func:`~refagent.acp.text.visible`)."""
        if not self.color or not styles:
            return text
        codes = ";".join(_STYLES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def line(self, text: str = "", *styles: str) -> None:
        """Print ``text`` as a whole line (ending any streamed text first), in ``styles``; its control
        characters made visible, its line breaks and tabs kept."""
        self._put(self.style(visible(text, layout=True), *styles))

    def _put(self, drawn: str) -> None:
        """Print a line already drawn: visible text and the renderer's own colours."""
        self._end_stream()
        self.out.write(drawn + "\n")
        self.out.flush()

    def write(self, text: str, *styles: str) -> None:
        """Print ``text`` without a newline (a prompt), in ``styles``; its control characters made visible."""
        self._end_stream()
        self.out.write(self.style(visible(text, layout=True), *styles))
        self.out.flush()
        self._mid_line = not text.endswith("\n")

    def info(self, text: str) -> None:
        self.line(text, "dim")

    def error(self, text: str) -> None:
        """``error: text``, on the error stream (a line of its own: streamed text is ended first)."""
        if self.err is self.out:
            self.line(f"error: {text}", "red", "bold")
            return
        self._end_stream()
        self.out.flush()
        line = f"error: {visible(text, layout=True)}"
        self.err.write((f"\x1b[31;1m{line}\x1b[0m" if self.err_color else line) + "\n")
        self.err.flush()

    def log(self, text: str) -> None:
        """A line the agent wrote to its stderr (its log), on the error stream as it reads: a log line can
        quote a model's tool name or a file's text, so it is made visible too."""
        if self.err is self.out:
            self._end_stream()
        self.out.flush()
        self.err.write(visible(text, layout=True) + "\n")
        self.err.flush()

    def _end_stream(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False
        self._streaming = None

    def end_prompt(self, echo: str | None = None) -> None:
        """The user answered a prompt: the terminal echoed the answer and the Enter; else ``echo`` it."""
        if echo is not None:
            self.out.write(visible(echo) + "\n")
            self.out.flush()
        self._mid_line = False

    def relative(self, path: str) -> str:
        if self.cwd and path.startswith(self.cwd + "/"):
            return path[len(self.cwd) + 1 :]
        return path

    # -- session updates ----------------------------------------------------------------------

    def update(self, update: dict[str, Any]) -> None:
        """Draw one ``session/update``'s ``update``, every string in it made visible (see the module
        docstring). Unknown kinds are ignored (the spec allows new ones)."""
        update = visible_strings(update)
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            self._chunk(str(kind), update.get("content") or {})
        elif kind == "tool_call":
            self._tool_call(update)
        elif kind == "tool_call_update":
            self._tool_call_update(update)
        elif kind == "plan":
            self._plan(update.get("entries") or [])
        elif kind == "current_mode_update":
            self.info(f"mode: {one_line(str(update.get('currentModeId')))}")
        elif kind == "user_message_chunk":
            self._chunk(str(kind), update.get("content") or {})

    def _chunk(self, kind: str, content: dict[str, Any]) -> None:
        text = content.get("text", "") if content.get("type") == "text" else f"[{content.get('type')}]"
        if not text:
            return
        if self._streaming != kind:
            self._end_stream()
            self._streaming = kind
            self.out.write("\n")
            if kind == "agent_thought_chunk":
                self.out.write(self.style("thinking: ", "dim", "italic"))
            elif kind == "user_message_chunk":
                self.out.write(self.style("you: ", "bold"))
        styled = self.style(text, "dim", "italic") if kind == "agent_thought_chunk" else text
        self.out.write(styled)
        self.out.flush()
        self._mid_line = not text.endswith("\n")

    def _tool_call(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId", ""))
        call = _ToolCall(_title(update, "tool call"), one_line(str(update.get("kind") or "other")))
        self.calls[call_id] = call
        self.line()
        self._put(f"● {self.style(call.title, 'bold')} {self.style(f'({call.kind})', 'dim')}")
        self._content(call, update.get("content") or [])
        self._status(call, str(update.get("status") or "pending"))

    def _tool_call_update(self, update: dict[str, Any]) -> None:
        call_id = str(update.get("toolCallId", ""))
        call = self.calls.get(call_id)
        if call is None:  # an update for a call we never saw announced: show it anyway
            call = self.calls[call_id] = _ToolCall(
                _title(update, call_id), one_line(str(update.get("kind") or "other"))
            )
            self._put(f"● {self.style(call.title, 'bold')}")
        if update.get("title"):
            call.title = _title(update, call.title)
        self._content(call, update.get("content") or [], final=update.get("status") in ("completed", "failed"))
        if update.get("status"):
            self._status(call, str(update["status"]))

    def _status(self, call: _ToolCall, status: str) -> None:
        if status == call.status and status == "pending":
            return
        call.status = status
        if status in ("completed", "failed"):
            icon = _STATUS_ICONS.get(status, "?")
            self._put(f"  {self.style(icon + ' ' + one_line(status), _STATUS_STYLES.get(status, 'dim'))}")

    def _content(self, call: _ToolCall, content: list[dict[str, Any]], *, final: bool = False) -> None:
        for item in content:
            if item.get("type") == "diff":
                self._diff(call, item)
            elif item.get("type") == "terminal":
                self.info(f"    [terminal {one_line(str(item.get('terminalId')))}]")
            elif item.get("type") == "content" and final and not call.shown_output:
                inner = item.get("content") or {}
                if inner.get("type") == "text":
                    call.shown_output = True
                    self._output(call, str(inner.get("text", "")))

    def _output(self, call: _ToolCall, text: str) -> None:
        """A call's text result: short, indented, dim. Reads are summarised (the file is in the editor)."""
        lines = [line for line in text.strip("\n").splitlines() if line.strip() != "```" and not line.startswith("```")]
        if call.kind == "read" and call.status != "failed":
            self.info(f"    ({len(lines)} {'line' if len(lines) == 1 else 'lines'} read)")
            return
        if len(lines) > MAX_OUTPUT_LINES:
            head, tail = MAX_OUTPUT_LINES - 6, 6  # the end of an output says most (errors, exit code)
            lines = [*lines[:head], f"… {len(lines) - head - tail} more lines …", *lines[-tail:]]
        for line in lines:
            self.line(f"    │ {line}", "dim")

    def _diff(self, call: _ToolCall, item: dict[str, Any]) -> None:
        path = str(item.get("path", ""))
        old = item.get("oldText")
        new = str(item.get("newText", ""))
        key = (path, hash((old, new)))
        if key in call.diffs:
            return
        call.diffs.add(key)
        for line in diff_lines(self.relative(path), old, new):
            self._put(f"    {self._diff_style(line)}")

    def _diff_style(self, line: str) -> str:
        if line.startswith(("+++", "---")):
            return self.style(line, "bold")
        if line.startswith("+"):
            return self.style(line, "green")
        if line.startswith("-"):
            return self.style(line, "red")
        if line.startswith("@@"):
            return self.style(line, "cyan")
        return line

    def _plan(self, entries: list[dict[str, Any]]) -> None:
        self.line()
        self.line("Plan", "bold")
        for entry in entries:
            status = str(entry.get("status", "pending"))
            icon = _PLAN_ICONS.get(status, "·")
            self._put(
                f"  {self.style(icon, _PLAN_STYLES.get(status, 'dim'))} {one_line(str(entry.get('content', '')))}"
            )

    # -- permission requests ------------------------------------------------------------------

    def permission(self, params: dict[str, Any]) -> None:
        """Show what the agent asks permission for (the caller then reads or picks the answer), every
        string in it made visible."""
        params = visible_strings(params)
        tool = params.get("toolCall") or {}
        call = self.calls.get(str(tool.get("toolCallId", "")))
        title = _title(tool, call.title if call else "a tool call")
        kind = one_line(str(tool.get("kind") or (call.kind if call else "")))
        if call is not None:
            self._content(call, tool.get("content") or [])
        self._put(
            f"  {self.style('?', 'magenta', 'bold')} {self.style('Permission requested:', 'magenta')} {title}"
            + (f" ({kind})" if kind else "")
        )
        for option in params.get("options") or []:
            name = one_line(str(option.get("name", option.get("optionId"))))
            self.line(f"      [{option_key(option)}] {name}", "dim")

    def approved(self, params: dict[str, Any], how: str) -> None:
        """A permission request approved without asking (``--yes``): one line, every string made visible."""
        params = visible_strings(params)
        tool = params.get("toolCall") or {}
        call = self.calls.get(str(tool.get("toolCallId", "")))
        title = _title(tool, call.title if call else "a tool call")
        if call is not None:
            self._content(call, tool.get("content") or [])
        self._put(f"  {self.style('✓', 'green', 'bold')} {self.style('Approved:', 'green')} {title} ({one_line(how)})")

    def answered(self, text: str) -> None:
        """The answer to a permission request, on one line (it may hold the option's name)."""
        self.line(f"    → {one_line(text)}", "magenta")

    def stop(self, reason: str) -> None:
        self.line()
        self.line(f"[stop reason: {one_line(reason)}]", "dim")


def _title(message: dict[str, Any], default: str) -> str:
    """A tool call's ``title`` as one line (``default`` if it has none)."""
    return one_line(str(message.get("title") or "")) or default


def option_key(option: dict[str, Any]) -> str:
    """The key that picks ``option`` at the permission prompt: one letter each, so that ``refagent chat``
    takes it without Enter (``v`` for never: always reject; the words ``yes``, ``always``, ``no`` and
    ``never`` are still understood where answers are lines: :data:`~refagent.client.handler.ANSWERS`)."""
    return {"allow_once": "y", "allow_always": "a", "reject_once": "n", "reject_always": "v"}.get(
        str(option.get("kind")), "?"
    )


def diff_lines(path: str, old: str | None, new: str) -> list[str]:
    """A unified diff of one ACP ``diff`` content (``oldText: null`` is a new file), capped in length."""
    before = [] if old is None else old.splitlines(keepends=True)
    after = new.splitlines(keepends=True)
    lines = [
        line.rstrip("\n")
        for line in difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    ]
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"… {len(lines) - MAX_DIFF_LINES} more diff lines"]
    return lines
