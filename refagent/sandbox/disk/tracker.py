"""What the model last saw of each file (:class:`refagent.sandbox.seams.ReadTracker`).

Contract: :meth:`FileTracker.saw` records the text the model last read of a file (or last wrote: the
tools call it after their own writes, so consecutive edits work). :meth:`FileTracker.check_fresh`, called
with a file's current text before an edit, raises :class:`~refagent.errors.ToolError` if that text is not
what the model saw: the user, the editor or a command changed it, and an edit planned on the old text
could undo their change.

Only a SHA-256 digest and the length are kept per path (files can be large; sessions long). Content is
compared, not modification times: a file saved again unchanged is still fresh, and the editor backend
(``fs/read_text_file``, unsaved buffers) has no modification times at all.

Files the model never read. By default (``require_read=False``) they may be edited: ``edit_file``
needs an exact ``old_string``, which checks the content it touches; ``write_file`` shows the whole diff
before a mutating call; and paged reads of big files (``read_lines``, without the whole text) could
otherwise never be recorded, so such files could never be edited. With ``require_read=True`` an edit of
a non-empty file never read is refused with a message asking for a read first (a file that is empty or
does not exist — ``current == ""`` — is always fine: there is nothing to lose).
"""

from __future__ import annotations

import hashlib

from refagent.errors import ToolError


def _fingerprint(content: str) -> tuple[int, bytes]:
    # surrogatepass: a str from a lenient decoder still hashes (it cannot come from read_text, but the
    # editor's fs backend is not ours).
    return len(content), hashlib.sha256(content.encode("utf-8", "surrogatepass")).digest()


class FileTracker:
    """Per-session memory of what the model saw. Paths are the policy's resolved absolute paths."""

    def __init__(self, *, require_read: bool = False) -> None:
        self.require_read = require_read
        self._seen: dict[str, tuple[int, bytes]] = {}

    def saw(self, path: str, content: str) -> None:
        """The model has just read (or written) ``content`` as the whole of ``path``."""
        self._seen[path] = _fingerprint(content)

    def check_fresh(self, path: str, current: str) -> None:
        """Raise ToolError if ``path`` was read and ``current`` differs from what was read (and, with
        ``require_read``, if a non-empty file was never read)."""
        seen = self._seen.get(path)
        if seen is None:
            if self.require_read and current:
                raise ToolError(
                    f"You have not read {path} yet in this session; read it (read_file) before changing it, "
                    "so the change is based on its actual content."
                )
            return
        if seen != _fingerprint(current):
            raise ToolError(
                f"{path} changed since you last read it (by the user, the editor or a command); read it "
                "again before editing it."
            )

    def knows(self, path: str) -> bool:
        """Whether the model has read or written ``path`` (since it was last forgotten)."""
        return path in self._seen

    def forget(self, path: str) -> None:
        """``path`` was deleted: a file created there later is a new file."""
        self._seen.pop(path, None)
        prefix = path.rstrip("/") + "/"
        for known in [known for known in self._seen if known.startswith(prefix)]:
            del self._seen[known]

    def moved(self, source: str, destination: str) -> None:
        """``source`` was renamed to ``destination`` (a file or a directory): what was seen moves along."""
        prefix = source.rstrip("/") + "/"
        moves = {
            known: destination + known[len(source) :]
            for known in self._seen
            if known == source or known.startswith(prefix)
        }
        records = {new: self._seen.pop(old) for old, new in moves.items()}
        self.forget(destination)
        self._seen.update(records)
