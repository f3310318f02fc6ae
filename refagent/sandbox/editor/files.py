"""The editor's file system (ACP "File System"): :class:`EditorFiles`, ``fs/read_text_file`` and
``fs/write_text_file``, so the model sees unsaved buffers and the editor tracks the agent's edits.

Each direction is used only if the client advertises it; the other goes to the sandbox's disk. Every path
is checked by the sandbox's path policy right before the request and again after the answer (the class
docstring says how), so the editor's files hold the same boundary as the disk's. The editor decides what it
shares: an error it answers fails the tool call with its message (a refusal stands: nothing is read or
written another way). The one exception is an editor that lost track of the session (:func:`lost_session`:
``-32602`` naming the session, as Neovim's CodeCompanion answers for one of two sessions opened at once):
a read inside the roots is then taken from the disk under the same rules, and the text says so
(:class:`~refagent.sandbox.seams.FromDisk`). A write is never done on the disk instead: the editor owns its buffers.
"""

from __future__ import annotations

import logging
import os
import stat

from refagent.acp.client import BadAnswer, SessionClient
from refagent.acp.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestError
from refagent.acp.text import has_surrogates
from refagent.errors import ToolError
from refagent.sandbox.seams import Disk, FromDisk, PathPolicy
from refagent.sandbox.within import within

log = logging.getLogger(__name__)


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

    def __init__(self, client: SessionClient, disk: Disk, policy: PathPolicy) -> None:
        self.client = client
        self.disk = disk
        self.read = client.reads_files
        self.write = client.writes_files
        self.policy = policy
        self.editor_failed = False
        """Whether the editor has failed a read this session (logged once)."""

    def _before(self, path: str, *, write: bool) -> _Way:
        """The way to ``path`` just before its request; ToolError unless it resolves to itself (and, to
        write, may be written)."""
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

    async def _after(self, path: str, before: _Way, content: str, *, write: bool) -> str | None:
        """None if the way to ``path`` is as it was ``before`` the request, or if the file now holds exactly
        ``content``; else how it changed."""
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
            content = await self.client.read_text_file(path)
        except BadAnswer as exc:
            raise ToolError(f"{exc.message[:1].upper()}{exc.message[1:]}.") from None
        except RequestError as exc:
            if exc.code == RESOURCE_NOT_FOUND:
                raise FileNotFoundError(path) from None
            # Editors differ in how they say "no such file"; when the disk agrees, say it plainly.
            if await self.disk.kind(path) is None:
                raise FileNotFoundError(path) from None
            if not lost_session(exc) or not self.policy.resolve(path).inside:
                # The editor's "no" stands: it may keep this file from agents (its user's choice).
                raise ToolError(
                    f"The editor refused to read {path}: {reason(exc)}. It was not read another way: the editor "
                    "decides what it shares. Ask the user if you need it."
                ) from None
            return await self._from_disk(path, exc)
        changed = await self._after(path, before, content, write=False)
        if changed is not None:
            # The editor may have opened something else than what was checked: its text is not returned.
            raise ToolError(
                f"{path} changed while the editor read it ({changed}), so what the editor sent may not be "
                "this file's text; it was discarded. Read the file again."
            )
        return content

    async def _from_disk(self, path: str, error: RequestError) -> FromDisk:
        """``path`` (inside the roots) read from the disk, under the same rules as any read there, because
        the editor answered its read with ``error``, which says it lost track of the session
        (:func:`lost_session`), not that it refuses the file; the model needs the file.
        The editor's error is logged once per session; the model is told the editor's copy was missing."""
        if not self.editor_failed:
            self.editor_failed = True
            log.warning("the editor failed to read %s (%s); reading from the disk instead", path, reason(error))
        text = await self.disk.read_text(path)
        return FromDisk(
            text,
            f"The editor could not give its copy of {path} ({reason(error)}), so it was read from the disk: "
            "changes not yet saved in the editor may be missing.",
        )

    async def write_text(self, path: str, content: str) -> None:
        if not self.write or has_surrogates(path):
            await self.disk.write_text(path, content)
            return
        before = self._before(path, write=True)
        try:
            await self.client.write_text_file(path, content)
        except RequestError as exc:
            raise ToolError(f"The editor refused to write {path}: {reason(exc)}") from None
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


def lost_session(error: RequestError) -> bool:
    """Whether ``error`` says the editor does not know the session (not that it refuses the request):
    ``-32602`` (invalid params) whose message or details name the session, as Neovim's CodeCompanion answers
    (``Invalid params``, details ``invalid sessionId``) for one of two sessions opened at once. Anything
    else, "Permission denied" and every other code included, is the editor's answer, and it stands."""
    if error.code != INVALID_PARAMS:
        return False
    said = f"{error.message} {error.data if isinstance(error.data, str) else ''}"
    if isinstance(error.data, dict):
        said += " ".join(str(value) for value in error.data.values() if isinstance(value, str))
    return "session" in said.lower()


def reason(error: RequestError) -> str:
    """The error's message, with the details some clients put in ``data`` (acpx: ``data.details``)."""
    data = error.data
    details = data.get("details") or data.get("message") if isinstance(data, dict) else data
    if isinstance(details, str) and details and details not in error.message:
        return f"{error.message} ({details[:500]})"
    return error.message
