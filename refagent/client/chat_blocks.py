"""The pieces :mod:`refagent.client.chat_view` draws, built from ACP content: pure functions, no state.

- :func:`split_blocks`: where streamed markdown can be cut, so that finished blocks are printed for good
  while the last one is still arriving;
- :class:`ChatMarkdown`: rich's Markdown with every heading on the left, code highlighted with the
  terminal's own colours (``ansi_dark``: no background painted over the user's theme);
- tool calls (:func:`call_line`), their text output trimmed head and tail (:func:`trim`), their
  diffs coloured (:func:`diff_block`), plans as a checklist (:func:`plan_block`);
- the tables of ``/help`` and ``/sessions``, and :func:`ago` for their times.

Each block shows the agent's text as it reads: never as rich markup (it goes into :class:`~rich.text.Text`,
not a markup string: a title ``[bold red]`` or ``[link=...]`` is those characters), and with its control
characters made visible (:func:`refagent.acp.text.visible`: ESC is ``\\x1b``), in markdown and code
blocks too, whose text rich would otherwise write out as it is. A title, a plan entry or a table cell is
one line (:func:`~refagent.acp.text.one_line`); a message, an output or a diff keeps its lines. Links in
a message are shown with their address (``text (url)``), not as terminal hyperlinks whose target is hidden.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import CodeBlock, Heading, Markdown, MarkdownElement
from rich.segment import Segment
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from refagent.acp.text import one_line, visible
from refagent.client.chat_state import Command
from refagent.client.render import diff_lines

MAX_OUTPUT_LINES = 12
"""Lines of a tool call's text output shown; longer output keeps its head and its tail."""
OUTPUT_TAIL = 4
"""Of those, the last ones (the end of an output says most: the error, the exit code)."""
MAX_DIFF_LINES = 40
DIFF_TAIL = 8
CODE_THEME = "ansi_dark"

STATUS_ICONS = {"pending": "○", "in_progress": "◐", "completed": "✓", "failed": "✗"}
STATUS_STYLES = {"pending": "dim", "in_progress": "yellow", "completed": "green", "failed": "red"}
PLAN_ICONS = {"pending": "☐", "in_progress": "▸", "completed": "✓"}
PLAN_STYLES = {"pending": "", "in_progress": "bold yellow", "completed": "dim green"}
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


# -- markdown ---------------------------------------------------------------------------------------


class _LeftHeading(Heading):
    LEVEL_ALIGN: ClassVar[dict[str, Any]] = dict.fromkeys(("h1", "h2", "h3", "h4", "h5", "h6"), "left")


class _Code(CodeBlock):
    """A code block indented by two columns, without the blank lines rich pads it with."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Syntax(str(self.text).rstrip(), self.lexer_name, theme=self.theme, word_wrap=True, padding=(0, 2))


class ChatMarkdown(Markdown):
    """Markdown as the chat prints it (see the module docstring)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "heading_open": _LeftHeading,
        "fence": _Code,
        "code_block": _Code,
    }

    def __init__(self, markup: str) -> None:
        super().__init__(markup, code_theme=CODE_THEME, hyperlinks=False)


THEME = Theme({"markdown.code": "bold cyan", "markdown.h1": "bold underline", "markdown.h2": "bold underline"})
"""Inline code without the black background rich gives it (it fights a light terminal's theme)."""


def markdown(text: str, last: int | None = None) -> Lines:
    """``text`` rendered as markdown, its control characters made visible first, as a block of lines (the
    ``last`` ones only, if given)."""
    return Lines(ChatMarkdown(visible(text, layout=True)), last)


def split_blocks(text: str) -> tuple[str, str]:
    """``(done, rest)``: ``done`` is the markdown of ``text``'s finished blocks, ``rest`` what follows.

    A block is finished at a blank line outside a code fence, once the next line has begun and does not
    start with a space (which could make it part of a list item, or code): printing ``done`` on its own
    then looks as it would in the whole message. ``("", text)`` when there is no such place yet.
    """
    lines = text.split("\n")
    fence = ""
    cut = -1
    for i, line in enumerate(lines[:-1]):  # the last line may still be growing
        marker = _FENCE.match(line)
        if fence:
            closing = marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence)
            if closing and not line.strip().strip(fence[0]):  # a closing fence has nothing after it
                fence = ""
            continue
        if marker:
            fence = marker.group(1)
        elif not line.strip() and i + 1 < len(lines) and lines[i + 1][:1] not in ("", " ", "\t"):
            cut = i
    if cut <= 0:
        return "", text
    done = "\n".join(lines[:cut]).strip("\n")
    return (done, "\n".join(lines[cut + 1 :])) if done.strip() else ("", text)


class Lines:
    """A renderable as lines without the blank ones it starts or ends with, nor trailing spaces (which a
    narrower window would wrap into blank lines); ``last``: only the last lines, under a note of how
    many are above (the end of a message still streaming, where the reader is)."""

    def __init__(self, renderable: RenderableType, last: int | None = None) -> None:
        self.renderable = renderable
        self.last = None if last is None else max(1, last)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = [
            _rstrip(line) for line in console.render_lines(self.renderable, options.update(height=None), pad=False)
        ]
        while lines and not _visible(lines[0]):
            lines.pop(0)
        while lines and not _visible(lines[-1]):
            lines.pop()
        if self.last is not None and len(lines) > self.last:
            yield Text(f"… {len(lines) - self.last + 1} lines above", style="dim")
            lines = lines[len(lines) - self.last + 1 :]
        for line in lines:
            yield from line
            yield Segment.line()


def _visible(line: list[Segment]) -> bool:
    return any(segment.text.strip() for segment in line if not segment.control)


def _rstrip(line: list[Segment]) -> list[Segment]:
    line = list(line)
    while line and not line[-1].control and not line[-1].text.strip() and not _painted(line[-1]):
        line.pop()
    if line and not line[-1].control and not _painted(line[-1]):
        line[-1] = Segment(line[-1].text.rstrip(), line[-1].style)
    return line


def _painted(segment: Segment) -> bool:
    return segment.style is not None and segment.style.bgcolor is not None


# -- tool calls -------------------------------------------------------------------------------------


def call_line(title: str, kind: str, status: str, elapsed: str = "") -> Text:
    """``✓ Run `make` (execute) 2s``: a tool call's status icon, title, kind and (if given) time taken."""
    line = Text("  ")
    line.append(STATUS_ICONS.get(status, "?"), style=STATUS_STYLES.get(status, "dim"))
    line.append(" ")
    line.append(one_line(title), style="bold")
    if kind:
        line.append(f" ({one_line(kind)})", style="dim")
    if elapsed:
        line.append(f" {elapsed}", style="dim")
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def text_of(content: Sequence[Any]) -> str:
    """The text of a tool call's ``content`` items of type ``content`` (text blocks), joined."""
    texts = []
    for item in content:
        inner = item.get("content") if isinstance(item, dict) and item.get("type") == "content" else None
        if isinstance(inner, dict) and inner.get("type") == "text":
            texts.append(str(inner.get("text") or ""))
    return "\n".join(texts)


def trim(lines: list[str], limit: int = MAX_OUTPUT_LINES, tail: int = OUTPUT_TAIL) -> list[str]:
    """``lines``, or their head and tail around ``… N lines hidden …`` when there are more than ``limit``."""
    if len(lines) <= limit:
        return lines
    head = limit - tail
    return [*lines[:head], f"… {len(lines) - head - tail} lines hidden …", *lines[-tail:]]


def content_lines(text: str) -> list[str]:
    """A tool call's text output as lines to show: code fences dropped (they only wrap it), and the blank
    lines at either end (:func:`trim` it before showing)."""
    lines = [line for line in text.splitlines() if not _FENCE.match(line)]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def output_block(lines: Iterable[str]) -> Text:
    """Output lines, indented under their tool call, dim, one terminal line each."""
    block = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines):
        if i:
            block.append("\n")
        hidden = line.startswith("… ") and line.endswith(" lines hidden …")
        block.append("    │ ", style="dim")
        block.append(visible(line, layout=True).expandtabs(4), style="dim italic" if hidden else "dim")
    return block


def diff_block(path: str, old: str | None, new: str) -> Text:
    """One ACP ``diff`` as a coloured unified diff (``oldText`` null: a new file), trimmed when long."""
    before = None if old is None else visible(old, layout=True)
    lines = trim(diff_lines(one_line(path), before, visible(new, layout=True)), MAX_DIFF_LINES, DIFF_TAIL)
    block = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines):
        if i:
            block.append("\n")
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = "dim" if line.startswith("… ") else ""
        block.append("    ")
        block.append(line.expandtabs(4), style=style)
    return block


def plan_block(entries: Sequence[Any]) -> Text:
    """A plan's entries as a checklist: ☐ to do, ▸ doing, ✓ done."""
    block = Text()
    block.append("  Plan", style="bold")
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        status = str(entry.get("status") or "pending")
        block.append("\n    ")
        block.append(PLAN_ICONS.get(status, "☐"), style=PLAN_STYLES.get(status, "") or "default")
        block.append(" ")
        block.append(one_line(str(entry.get("content") or "")), style=PLAN_STYLES.get(status, ""))
    return block


# -- tables -----------------------------------------------------------------------------------------


def help_block(client: Sequence[Command], agent: Sequence[Command]) -> Group:
    """``/help``: the chat's commands, the agent's, and the keys."""

    def table(title: str, rows: Iterable[tuple[str, str | Text]]) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan", no_wrap=True)
        grid.add_column()
        for left, right in rows:
            grid.add_row(Text(f"  {left}"), right)  # a Text: a name from the agent is not markup
        grid.title = title
        grid.title_justify = "left"
        grid.title_style = "bold"
        return grid

    def row(command: Command) -> tuple[str, Text]:
        described = Text(one_line(command.description))
        if command.hint:
            described.append(f" · {one_line(command.hint)}", style="dim")
        return f"/{one_line(command.name)}" + (" …" if command.hint else ""), described

    keys: list[tuple[str, str | Text]] = [
        ("Enter", "send"),
        ("Alt-Enter, Esc Enter", "a new line (so does a line that ends with \\); pasted lines stay lines"),
        ("Paste", "a long paste shows as [Pasted text #N +L lines], and is sent whole"),
        ("Ctrl-V", "paste an image from the clipboard (wl-paste, xclip or pngpaste)"),
        ("Tab", "complete a command (and /resume ids, /mode, /model and /effort values)"),
        ("Shift-Tab", "on an empty line: the next mode (never full-access: /mode full-access asks first)"),
        ("!command", "run a line in your own shell; shown, not sent to the model (/share sends it)"),
        ("Up, Down, Ctrl-R", "history, kept across chats"),
        ("Ctrl-X Ctrl-E", "edit the prompt in $EDITOR"),
        ("Esc", "while the model works: interrupt the turn (session/cancel), as Ctrl-C does"),
        ("Ctrl-C", "cancel the turn (twice: quit); at the prompt, clear the line (twice on an empty line: quit)"),
        ("Ctrl-D", "quit"),
    ]
    parts: list[RenderableType] = [table("This chat", map(row, client))]
    if agent:
        parts += [Text(""), table("The agent", map(row, agent))]
    parts += [Text(""), table("Keys", keys)]
    return Group(*parts)


def sessions_block(sessions: Sequence[dict[str, Any]], now: datetime | None = None) -> Table:
    """``/sessions``: number, id, when, title."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(justify="right", style="dim", no_wrap=True)
    grid.add_column(style="cyan", no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="ellipsis", no_wrap=True)
    for number, entry in enumerate(sessions, 1):
        sid = one_line(str(entry.get("sessionId", "")))
        title = one_line(str(entry.get("title") or "")) or "(no title yet)"
        grid.add_row(Text(str(number)), Text(sid), Text(ago(entry.get("updatedAt"), now)), Text(title))
    return grid


def ago(stamp: Any, now: datetime | None = None) -> str:
    """An ISO 8601 time as ``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago`` or its date (or as
    the agent wrote it, on one line, if it is not one)."""
    if not isinstance(stamp, str):
        return ""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return one_line(stamp)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - when).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    if seconds < 30 * 86400:
        days = int(seconds // 86400)
        return f"{days} day{'s' if days > 1 else ''} ago"
    return when.date().isoformat()


def count(number: int, noun: str) -> str:
    """``1 line``, ``3 lines``: a number and its noun, singular or plural (a regular plural)."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def seconds(elapsed: float) -> str:
    """``0.4s``, ``12s``, ``3m 05s``."""
    if elapsed < 10:
        return f"{elapsed:.1f}s"
    if elapsed < 60:
        return f"{int(elapsed)}s"
    return f"{int(elapsed // 60)}m {int(elapsed % 60):02d}s"
