"""The editor's file system and terminals, used when the client advertises them (ACP "File System",
"Terminals").

- :class:`EditorFiles`: ``fs/read_text_file`` and ``fs/write_text_file``, so the model sees unsaved
  buffers and the editor tracks the agent's edits. Each direction is used only if advertised; the
  other falls back to the local disk. An editor's error fails the tool call with the editor's message.
- :class:`EditorTerminals`: ``terminal/create`` -> embed in the tool call -> ``terminal/wait_for_exit``
  raced against the time limit -> ``terminal/kill`` on timeout -> ``terminal/output`` ->
  ``terminal/release``, which always happens: on success, error, timeout and cancellation. The editor
  runs our launcher (:mod:`refagent.confine.launcher`), which confines the command as a local one is
  confined and then execs ``/bin/sh -c``: the editor's terminal holds no more power than ours.
- :class:`EditorQuestions`: a question for the user as a form (``elicitation/create``, when the client
  advertises ``elicitation.form``), else, for a few choices, as ``session/request_permission`` with one
  option per choice; otherwise it cannot be asked here.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from refagent.acp.connection import Peer
from refagent.acp.errors import RESOURCE_NOT_FOUND, RequestError
from refagent.acp.text import cut, has_surrogates
from refagent.acp.types import ClientCapabilities
from refagent.confine.confinement import UNCONFINED, Confinement
from refagent.confine.process import ResourceLimits, is_secret_name
from refagent.errors import ToolError
from refagent.ids import new_id
from refagent.seams import Answer, CommandResult, Disk, Level, PathPolicy, Questions, Terminals, TextFiles
from refagent.within import within

log = logging.getLogger(__name__)

OUTPUT_BYTE_LIMIT = 64 * 1024
_CLEANUP_SECONDS = 5


class EditorFiles:
    """Text files through the editor where it offers them, through ``disk`` where it does not.

    Every path is resolved again right before its ``fs/*`` request (``policy``): the path a tool planned
    with, and the user approved, must still be what it names. A directory swapped for a symbolic link
    while a permission prompt was open (or a read was on its way) fails the call instead of sending the
    editor outside the roots. The local disk holds the same with ``O_NOFOLLOW`` walks; the editor opens
    the file itself, so what it opened is checked again once it has answered:

    - Before the request, the path must resolve to itself (no link on the way), and the identity of each
      entry on the way is taken: the outermost root holding the path, every directory below it and the
      file (outside the roots, the file alone), each as ``(st_dev, st_ino, st_ctime_ns)``, by ``lstat``.
    - After the answer, the same. Replacing an entry by a link changes the resolution or the identity;
      a swap undone before the answer still moves the ctime of the renamed entry and of its directory
      (the kernel sets it on every rename, link and unlink), and no one can set a ctime back.
    - A read whose way changed meanwhile is kept only if its text is exactly what the file holds now (read
      from the disk, ``O_NOFOLLOW``): then it is this file's text, wherever the editor took it from (a
      file made beside it while the editor read, say). Otherwise it is refused and the text discarded:
      it never reaches the model.
    - A write cannot be taken back. Its check leaves out the file (a save may replace it) and its
      directory's ctime (a save changes that too); a way that changed meanwhile, when the file does not
      hold the text, is reported as a failed call saying the editor may have written elsewhere.

    What this cannot see: a swap and its undoing both within the clock tick of the last change before
    the request on a kernel whose file times are coarse (before Linux 6.13), and a write's own directory
    swapped and put back (which a save changes in the same way).

    A path whose name is not UTF-8 (``surrogateescape``: ``\\udcff`` for the byte 0xff) is read and written
    on the disk: ACP carries Unicode text only, and the wire would send the editor another name (U+FFFD).
    """

    def __init__(
        self, peer: Peer, session_id: str, disk: Disk, *, read: bool, write: bool, policy: PathPolicy | None = None
    ) -> None:
        self.peer = peer
        self.session_id = session_id
        self.disk = disk
        self.read = read
        self.write = write
        self.policy = policy

    def _before(self, path: str, *, write: bool) -> _Way | None:
        """The way to ``path`` just before its request; ToolError unless it resolves to itself (and, to
        write, may be written). None without a policy: nothing is checked."""
        if self.policy is None:
            return None
        if write:
            self.policy.check_write(path)  # refuses outside the roots and .git, with its own words
        try:
            return self._way(path, write=write)
        except _Changed as changed:
            done = "written" if write else "read"
            raise ToolError(f"{path} changed while the call waited: {changed}. Nothing was {done}.") from None

    def _way(self, path: str, *, write: bool) -> _Way:
        """The identity of each entry on the way to ``path`` now (see the class docstring); :class:`_Changed`
        if it does not resolve to itself or a link is on the way. ``write``: without the file, and without
        its directory's ctime."""
        assert self.policy is not None
        try:
            resolved = self.policy.resolve(path)
        except ToolError as exc:  # a loop, now: changed as much as anything
            raise _Changed(str(exc)) from None
        if resolved.path != path:
            raise _Changed(f"it now leads to {resolved.path}")
        roots = [root for root in self.policy.roots if within(path, root)]
        entries = [path]
        if roots:  # from the outermost root: whatever lies below it, the workspace can change
            base = min(roots, key=len)
            entries = [base]
            for part in path[len(base) :].split("/"):
                if part:
                    entries.append(os.path.join(entries[-1], part))
        way = [_identity(entry) for entry in entries]
        if write:
            way.pop()
            if way and way[-1] is not None:
                way[-1] = (*way[-1][:2], 0)
        return tuple(way)

    async def _after(self, path: str, before: _Way | None, content: str, *, write: bool) -> str | None:
        """None if the way to ``path`` is as it was ``before`` the request, or if the file now holds exactly
        ``content``; else how it changed."""
        if before is None:
            return None
        try:
            if self._way(path, write=write) == before:
                return None
        except _Changed as changed:
            return str(changed)  # leads elsewhere now: the disk would not read it either
        try:
            if await self.disk.read_text(path) == content:
                return None
        except (OSError, ToolError):
            pass
        return "an entry on the way was replaced, moved or renamed meanwhile"

    async def read_text(self, path: str) -> str:
        if not self.read or has_surrogates(path):
            return await self.disk.read_text(path)
        before = self._before(path, write=False)
        try:
            result = await self.peer.request("fs/read_text_file", {"sessionId": self.session_id, "path": path})
        except RequestError as exc:
            if exc.code == RESOURCE_NOT_FOUND:
                raise FileNotFoundError(path) from None
            # Editors differ in how they say "no such file"; when the disk agrees, say it plainly.
            if await self.disk.kind(path) is None:
                raise FileNotFoundError(path) from None
            raise ToolError(f"The editor could not read {path}: {_reason(exc)}") from None
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, str):
            raise ToolError(f"The editor returned no content for {path}.")
        changed = await self._after(path, before, content, write=False)
        if changed is not None:
            # The editor may have opened something else than what was checked: its text is not returned.
            raise ToolError(
                f"{path} changed while the editor read it ({changed}), so what the editor sent may not be "
                "this file's text; it was discarded. Read the file again."
            )
        return content

    async def write_text(self, path: str, content: str) -> None:
        if not self.write or has_surrogates(path):
            await self.disk.write_text(path, content)
            return
        before = self._before(path, write=True)
        try:
            # The result is {} (or null from some editors): nothing to read from it.
            await self.peer.request(
                "fs/write_text_file", {"sessionId": self.session_id, "path": path, "content": content}
            )
        except RequestError as exc:
            raise ToolError(f"The editor refused to write {path}: {_reason(exc)}") from None
        changed = await self._after(path, before, content, write=True)
        if changed is not None:
            # Done by now, perhaps outside the roots: the user must hear of it, and the model not think
            # the file holds the text.
            log.warning("the way to %s changed while the editor wrote it (%s)", path, changed)
            raise ToolError(
                f"{path} changed while the editor wrote it ({changed}): the editor may have written the text "
                f"elsewhere, even outside the workspace, and {path} does not hold it. Read {path} to see what "
                "it holds now, and tell the user."
            )


_Way = tuple[tuple[int, int, int] | None, ...]
"""The entries on the way to a file, each ``(st_dev, st_ino, st_ctime_ns)`` or None where nothing is."""


class _Changed(Exception):
    """The way to a path is not what was checked; the message says how."""


def _identity(entry: str) -> tuple[int, int, int] | None:
    """``entry``'s ``(st_dev, st_ino, st_ctime_ns)``, by ``lstat``; None if nothing is there (or it cannot be
    searched for); :class:`_Changed` for a symbolic link."""
    try:
        info = os.lstat(entry)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    except OSError as exc:
        raise _Changed(f"{entry} cannot be examined: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _Changed(f"{entry} is a symbolic link now")
    return info.st_dev, info.st_ino, info.st_ctime_ns


def _reason(error: RequestError) -> str:
    """The error's message, with the details some clients put in ``data`` (acpx: ``data.details``)."""
    data = error.data
    details = data.get("details") or data.get("message") if isinstance(data, dict) else data
    if isinstance(details, str) and details and details not in error.message:
        return f"{error.message} ({details[:500]})"
    return error.message


def choose_files(
    caps: ClientCapabilities, peer: Peer, session_id: str, disk: Disk, policy: PathPolicy | None = None
) -> TextFiles:
    fs = caps.get("fs") or {}
    read, write = bool(fs.get("readTextFile")), bool(fs.get("writeTextFile"))
    if not read and not write:
        return disk
    return EditorFiles(peer, session_id, disk, read=read, write=write, policy=policy)


class EditorTerminals:
    """Commands in editor terminals. The user watches the output live in the tool call."""

    def __init__(
        self,
        peer: Peer,
        session_id: str,
        *,
        confinement: Confinement | None = None,
        limits: ResourceLimits | None = None,
        output_byte_limit: int = OUTPUT_BYTE_LIMIT,
    ) -> None:
        self.peer = peer
        self.session_id = session_id
        self.confinement = confinement
        """None: the editor runs ``/bin/sh -c`` itself, unconfined."""
        self.limits = limits or ResourceLimits()
        self.output_byte_limit = output_byte_limit

    def not_confined(self, level: Level) -> list[str]:
        return (self.confinement or UNCONFINED).missing(level)

    def _command(self, command: str, level: Level, time_limit: float) -> tuple[str, list[str]]:
        """The executable and arguments for ``terminal/create``: through the shell, as the model wrote it
        (ACP's ``command`` is an executable, not a line), behind the launcher when there is confinement."""
        if self.confinement is None or not sys.executable:
            return "/bin/sh", ["-c", command]
        argv = self.confinement.argv(
            ["/bin/sh", "-c", command],
            level,
            limits=self.limits.for_time_limit(time_limit),
            lc_ctype=os.environ.get("LC_CTYPE"),
            # The editor's environment is, as a rule, the one it gave us: withhold the same secrets.
            unset=[name for name in os.environ if is_secret_name(name)],
        )
        return argv[0], argv[1:]

    async def run(
        self,
        command: str,
        cwd: str,
        time_limit: float,
        on_start: Callable[[str], Awaitable[None]] | None = None,
        *,
        sandbox: Level = "workspace",
    ) -> CommandResult:
        if has_surrogates(command) or has_surrogates(cwd):
            # The wire would send U+FFFD for it: the editor would run another command than this one.
            raise ToolError(
                "The command or its working directory holds a byte of a file name that is not UTF-8 (such as "
                "\\udcff), which the editor's terminal cannot be sent: ACP carries Unicode text only. Match "
                "that name with a shell pattern instead (? for the byte)."
            )
        executable, args = self._command(command, sandbox, time_limit)
        try:
            created = await self._request(
                "terminal/create", command=executable, args=args, cwd=cwd, outputByteLimit=self.output_byte_limit
            )
        except RequestError as exc:
            raise ToolError(f"The editor could not start a terminal: {exc.message}") from None
        terminal_id = created.get("terminalId") if isinstance(created, dict) else None
        if not isinstance(terminal_id, str):
            raise ToolError("The editor did not return a terminal id.")
        try:
            if on_start is not None:
                await on_start(terminal_id)
            timed_out = False
            exit_status: dict[str, Any] = {}
            with anyio.move_on_after(time_limit) as deadline:
                exit_status = await self._request("terminal/wait_for_exit", terminalId=terminal_id) or {}
            if deadline.cancelled_caught:
                timed_out = True
                await self._request("terminal/kill", terminalId=terminal_id)
            output = await self._request("terminal/output", terminalId=terminal_id) or {}
            status = output.get("exitStatus") or exit_status
            return CommandResult(
                output=str(output.get("output", "")).replace("\r\n", "\n"),
                exit_code=status.get("exitCode") if isinstance(status.get("exitCode"), int) else None,
                signal=status.get("signal") if isinstance(status.get("signal"), str) else None,
                truncated=bool(output.get("truncated")),
                timed_out=timed_out,
            )
        except RequestError as exc:
            raise ToolError(f"The editor's terminal failed: {exc.message}") from None
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                try:
                    await self._request("terminal/release", terminalId=terminal_id)
                except Exception as exc:  # the client may be gone; nothing else to do
                    log.warning("terminal/release failed: %s", exc)

    async def _request(self, method: str, **params: Any) -> Any:
        return await self.peer.request(method, {"sessionId": self.session_id, **params})


def choose_terminals(
    caps: ClientCapabilities, peer: Peer, session_id: str, local: Terminals, confinement: Confinement | None = None
) -> Terminals:
    if caps.get("terminal") is not True:
        return local
    return EditorTerminals(peer, session_id, confinement=confinement)


MAX_PERMISSION_CHOICES = 6
"""The most choices offered as permission options: past that a dialog of buttons is no longer a choice."""
DECLINE_OPTION = "decline"
TITLE_CHARS = 200


def question_title(question: str) -> str:
    """A question as a tool call's title: its first line, cut to :data:`TITLE_CHARS`."""
    lines = question.strip().splitlines()
    return cut(lines[0], TITLE_CHARS) if lines else "Question"


class EditorQuestions:
    """Questions for the user through the editor.

    With ``form`` (the client advertised ``elicitation.form``): ``elicitation/create`` in form mode, tied
    to the tool call, with one string field ``answer`` (an ``enum`` of the choices, or free text) and,
    with ``allow_other``, a second free-text field ``other``. Without it: 1 to
    :data:`MAX_PERMISSION_CHOICES` choices go out as ``session/request_permission``, one ``allow_once``
    option per choice and a ``reject_once`` "None of these" (so the user can decline without cancelling
    the turn); free text, or more choices, cannot be asked here.

    ``cancel_turn``: what a permission answer of ``cancelled`` (the turn was cancelled) calls, as the
    tool runner does for any permission.
    """

    def __init__(
        self, peer: Peer, session_id: str, *, form: bool, cancel_turn: Callable[[], None] | None = None
    ) -> None:
        self.peer = peer
        self.session_id = session_id
        self.form = form
        self.cancel_turn = cancel_turn

    async def ask(
        self,
        question: str,
        choices: Sequence[str] = (),
        *,
        allow_other: bool = False,
        tool_call_id: str | None = None,
    ) -> Answer:
        choices = list(choices)
        if self.form:
            return await self._form(question, choices, allow_other and bool(choices), tool_call_id)
        if not choices:
            return Answer("unavailable", reason="this editor cannot show a question with a free-text answer")
        if len(choices) > MAX_PERMISSION_CHOICES:
            return Answer(
                "unavailable",
                reason=f"this editor can offer at most {MAX_PERMISSION_CHOICES} choices, not {len(choices)}",
            )
        return await self._permission(question, choices, tool_call_id)

    async def _form(self, question: str, choices: list[str], allow_other: bool, tool_call_id: str | None) -> Answer:
        answer_field: dict[str, Any] = {"type": "string", "title": "Choice" if allow_other else "Answer"}
        if choices:
            answer_field["enum"] = choices
        properties: dict[str, Any] = {"answer": answer_field}
        if allow_other:
            properties["other"] = {"type": "string", "title": "Something else", "description": "Or type your answer"}
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if not allow_other:
            schema["required"] = ["answer"]
        params: dict[str, Any] = {"sessionId": self.session_id, "mode": "form", "message": question}
        if tool_call_id:
            params["toolCallId"] = tool_call_id
        params["requestedSchema"] = schema
        try:
            result = await self.peer.request("elicitation/create", params)
        except RequestError as exc:
            return Answer("unavailable", reason=f"the editor could not show the question: {_reason(exc)}")
        action = result.get("action") if isinstance(result, dict) else None
        if action == "decline":
            return Answer("declined")
        if action == "cancel":
            return Answer("dismissed")
        if action != "accept":
            log.warning("unknown answer to elicitation/create: %.200r", result)
            return Answer("dismissed", reason=f"the editor answered {str(action)[:100]!r}")
        content = result.get("content")
        fields: dict[str, Any] = content if isinstance(content, dict) else {}
        answer = _filled(fields.get("answer"))
        other = _filled(fields.get("other")) if allow_other else None
        if answer is not None and choices and answer not in choices:
            # Not one of the choices (a lax form): still what the user gave, so it is passed on as typed.
            answer, other = None, answer if other is None else f"{answer}\n{other}"
        if answer is None and other is None:
            return Answer("dismissed", reason="the form was accepted without an answer")
        if choices:
            return Answer("answered", choice=answer, text=other)
        return Answer("answered", text=answer)

    async def _permission(self, question: str, choices: list[str], tool_call_id: str | None) -> Answer:
        options: list[dict[str, Any]] = [
            {"optionId": f"choice-{index}", "name": choice, "kind": "allow_once"}
            for index, choice in enumerate(choices, 1)
        ]
        options.append({"optionId": DECLINE_OPTION, "name": "None of these", "kind": "reject_once"})
        tool_call: dict[str, Any] = {
            "toolCallId": tool_call_id or new_id("call"),
            "title": question_title(question),
            "content": [{"type": "content", "content": {"type": "text", "text": question}}],
        }
        params = {"sessionId": self.session_id, "toolCall": tool_call, "options": options}
        try:
            result = await self.peer.request("session/request_permission", params)
        except RequestError as exc:
            return Answer("unavailable", reason=f"the editor could not show the question: {_reason(exc)}")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "cancelled":
            if self.cancel_turn is not None:
                self.cancel_turn()
                await anyio.lowlevel.checkpoint()  # the turn's scope is cancelled now: this raises
            return Answer("dismissed")
        selected = isinstance(outcome, dict) and outcome.get("outcome") == "selected"
        chosen = outcome.get("optionId") if isinstance(outcome, dict) and selected else None
        if chosen == DECLINE_OPTION:
            return Answer("declined")
        for index, choice in enumerate(choices, 1):
            if chosen == f"choice-{index}":
                return Answer("answered", choice=choice)
        log.warning("unexpected answer to a question: %.200r", result)
        return Answer("dismissed", reason="the editor's answer named none of the options")


def _filled(value: Any) -> str | None:
    """A form field's value as an answer: a string with something in it, else None."""
    return value if isinstance(value, str) and value.strip() else None


def form_elicitation(caps: ClientCapabilities) -> bool:
    """Whether the client advertised form elicitation (``elicitation.form`` an object: ``{}`` is one)."""
    elicitation = caps.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("form"), dict)


def choose_questions(
    caps: ClientCapabilities, peer: Peer, session_id: str, cancel_turn: Callable[[], None] | None = None
) -> Questions:
    """Questions through the editor's forms when it advertises them, else through its permission dialog
    (which every ACP client has). ``cancel_turn``: see :class:`EditorQuestions`."""
    return EditorQuestions(peer, session_id, form=form_elicitation(caps), cancel_turn=cancel_turn)
