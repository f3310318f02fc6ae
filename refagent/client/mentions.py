"""``@path`` in the chat: completing a workspace path after an ``@``, and sending each one mentioned as a
``resource_link`` beside the text (or, for an image when the agent takes images, the image itself).

A mention is an ``@`` at the start of the line or after a space, followed by a path relative to the chat's
directory (no spaces) that names a file there: ``explain @src/app.py``. Anything else with an ``@`` (an
e-mail address, a path that does not exist) is text. Only what the user typed counts: not the text of a
collapsed paste, nor a shared command's output (the chat passes what was typed, :func:`mentioned`).

A file is attached only where the agent's own path policy would let ``read_file`` read it without asking
(:class:`~refagent.sandbox.disk.policy.RootPolicy` of the chat's directory, with the agent's files and the user's
credentials private): a mention that leads elsewhere (a path outside, or a link in the workspace to
``~/.ssh/id_ed25519``) says why it would ask (:attr:`Mention.asks`), and the chat asks the user. An image
the chat saved from the clipboard (Ctrl-V) is the user's paste, and does not ask.

Completion lists the workspace as git sees it (:class:`~refagent.sandbox.disk.gitignore.GitIgnore`: ``.git`` and
what ``.gitignore`` files ignore are left out; symbolic links are not followed), at most
:data:`MAX_ENTRIES` entries, read again after :data:`FRESH_SECONDS`. A fragment with a ``/`` completes
from the start of the path; one without matches any file or directory whose name holds it.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from refagent.client.clipboard import paste_directory
from refagent.errors import ToolError
from refagent.sandbox.disk.gitignore import GitIgnore
from refagent.sandbox.disk.policy import RootPolicy

MAX_ENTRIES = 20_000
FRESH_SECONDS = 10.0
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""A bigger image is sent as a link, not inline."""
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MENTION = re.compile(r'(?:^|(?<=\s))@(?:"([^"\n]+)"|([^\s@"]+))')
"""``@path``, or ``@"a path with spaces"``."""


class WorkspaceIndex:
    """The files and directories under ``root`` (relative, ``/``-separated, directories ending in ``/``)."""

    def __init__(self, root: str, clock: Any = time.monotonic) -> None:
        self.root = os.path.realpath(root)
        self._clock = clock
        self._entries: list[str] = []
        self._read_at: float | None = None

    def entries(self) -> list[str]:
        now = self._clock()
        if self._read_at is None or now - self._read_at > FRESH_SECONDS:
            self._entries = list(self._walk())
            self._read_at = now
        return self._entries

    def _walk(self) -> Iterable[str]:
        ignore = GitIgnore(self.root)
        pending = [""]
        found = 0
        while pending and found < MAX_ENTRIES:
            relative = pending.pop(0)
            try:
                with os.scandir(os.path.join(self.root, relative)) as listing:
                    children = sorted(listing, key=lambda entry: entry.name)
            except OSError:
                continue
            for entry in children:
                path = f"{relative}{entry.name}"
                is_dir = entry.is_dir(follow_symlinks=False)
                if entry.name == ".git" or ignore.is_ignored(path, is_dir=is_dir):
                    continue
                found += 1
                if is_dir:
                    pending.append(path + "/")
                    yield path + "/"
                else:
                    yield path
                if found >= MAX_ENTRIES:
                    return

    def complete(self, fragment: str, limit: int = 50) -> list[str]:
        """The entries ``fragment`` may mean, the likeliest first (prefix matches, then shorter paths)."""
        lowered = fragment.lower()
        if "/" in fragment:
            chosen = [e for e in self.entries() if e.lower().startswith(lowered) and e.lower() != lowered]
        else:
            chosen = [e for e in self.entries() if lowered in e.rstrip("/").rsplit("/", 1)[-1].lower()]
        chosen.sort(key=lambda e: (not e.rstrip("/").rsplit("/", 1)[-1].lower().startswith(lowered), len(e), e))
        return chosen[:limit]


def mention_at(text_before_cursor: str) -> str | None:
    """The ``@`` fragment being typed at the cursor (without the ``@``), if the cursor is in one."""
    match = re.search(r"(?:^|\s)@([^\s@]*)$", text_before_cursor)
    return match.group(1) if match is not None else None


def dropped(pasted: str) -> str | None:
    """The mention for a paste that is one file's path (what a terminal pastes when a file is dragged onto
    it: absolute, maybe quoted, spaces maybe escaped): ``@path``, or ``@"path"`` when it has spaces."""
    text = pasted.strip()
    if "\n" in text or not text:
        return None
    quoted = len(text) > 1 and text[0] == text[-1] and text[0] in "'\""
    text = text[1:-1] if quoted else re.sub(r"\\(.)", r"\1", text)  # unquoted: a shell's escapes (shot\ 1.png)
    path = os.path.expanduser(text)
    if not os.path.isabs(path) or not os.path.isfile(path) or '"' in path:
        return None
    return mention(path)


def mention(path: str) -> str:
    """How the prompt names ``path``: ``@path``, or ``@"path"`` when it has spaces (and a space after)."""
    return f'@"{path}" ' if " " in path else f"@{path} "


class Mention(NamedTuple):
    """A file the user mentioned."""

    named: str
    """As typed."""
    path: str
    """The file it leads to (links resolved)."""
    asks: str
    """Empty where ``read_file`` would read it without asking; else why it would ask, for the question."""


def mentioned(typed: str, cwd: str, policy: RootPolicy | None = None) -> list[Mention]:
    """The files ``typed`` mentions (each once, in order), placed by ``policy`` (by default the agent's for
    a session in ``cwd``: :func:`chat_policy`)."""
    policy = policy or chat_policy(cwd)
    found: list[Mention] = []
    for match in MENTION.finditer(typed):
        named = match.group(1) if match.group(1) is not None else match.group(2).rstrip(".,;:!?)")
        try:
            resolved = policy.resolve(os.path.expanduser(named))
        except ToolError:  # no path (too long, a loop): text
            continue
        path = resolved.path
        if any(m.path == path for m in found) or not os.path.isfile(path):
            continue
        asks = ""
        if not resolved.inside and not _pasted(path):
            private = policy.is_inside(path)
            where = "private (your credentials, or the agent's own files)" if private else "outside the workspace"
            given = os.path.normpath(os.path.join(policy.cwd, os.path.expanduser(named)))
            asks = f"@{named} {'is' if given == path else f'leads to {path}, which is'} {where}."
        found.append(Mention(named, path, asks))
    return found


def _pasted(path: str) -> bool:
    """Whether ``path`` is an image the chat saved from the clipboard (Ctrl-V): the user's own paste."""
    directory = os.path.realpath(paste_directory())
    try:
        return os.path.dirname(path) == directory and os.stat(directory).st_uid == os.getuid()
    except OSError:
        return False


def chat_policy(cwd: str) -> RootPolicy:
    """The path policy a session the chat opens in ``cwd`` has: the roots ``[cwd]``, the agent's own files
    and the user's credentials private (:func:`~refagent.sandbox.confine.confinement.hidden_paths`)."""
    from refagent.sandbox.confine.confinement import hidden_paths  # here: the chat starts without it (4.3 ms)

    return RootPolicy(cwd, [], private=hidden_paths(os.environ, [], existing=False))


def prompt_blocks(text: str, paths: Iterable[str], *, images: bool) -> list[dict[str, Any]]:
    """The prompt's content blocks: ``text``, then a block for each file of ``paths`` (real paths, from
    :func:`mentioned`; each once): an ``image`` for an image the agent can take (``images``) and that is
    small enough, else a ``resource_link`` (``file://`` URI, name, MIME type and size when known)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for path in dict.fromkeys(paths):
        blocks.append(_block(path, images=images))
    return blocks


def _block(path: str, *, images: bool) -> dict[str, Any]:
    mime, _ = mimetypes.guess_type(path)
    size = os.path.getsize(path)
    if images and mime in IMAGE_TYPES and size <= MAX_IMAGE_BYTES:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        return {"type": "image", "mimeType": mime, "data": data, "uri": Path(path).as_uri()}
    link: dict[str, Any] = {"type": "resource_link", "uri": Path(path).as_uri(), "name": os.path.basename(path)}
    if mime is not None:
        link["mimeType"] = mime
    link["size"] = size
    return link
