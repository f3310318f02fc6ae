"""An image on the system clipboard, for Ctrl-V in the chat (a terminal pastes text only): read with the
first of ``wl-paste`` (Wayland), ``xclip`` (X11) or ``pngpaste`` (macOS) that is installed and has one, saved
as a PNG file of the user's own (mode 0600, in a 0700 directory under the temporary directory), and
mentioned in the prompt like any file (:mod:`refagent.client.mentions`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

READERS = (
    ("wl-paste", "--no-newline", "--type", "image/png"),
    ("xclip", "-selection", "clipboard", "-target", "image/png", "-out"),
    ("pngpaste", "-"),
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
READ_SECONDS = 2.0
MAX_BYTES = 20 * 1024 * 1024


def clipboard_image(directory: str | None = None) -> str | None:
    """The clipboard's image saved as a PNG file (its path), or None when there is none (or no reader)."""
    for reader in READERS:
        if shutil.which(reader[0]) is None:
            continue
        try:
            done = subprocess.run(list(reader), capture_output=True, timeout=READ_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        data = done.stdout
        if done.returncode == 0 and data.startswith(PNG_MAGIC) and len(data) <= MAX_BYTES:
            return _save(data, directory or _paste_directory())
    return None


def paste_directory() -> str:
    """Where the chat saves the images pasted (a directory of the user's alone, mode 0700)."""
    return os.path.join(tempfile.gettempdir(), f"refagent-pastes-{os.getuid()}")


def _paste_directory() -> str:
    path = paste_directory()
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():  # someone else's: not ours to write into
        raise OSError(f"{path} belongs to another user")
    return path


def _save(data: bytes, directory: str) -> str:
    path = os.path.join(directory, time.strftime("pasted-%Y%m%d-%H%M%S") + f"-{time.monotonic_ns() % 10**6}.png")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return path
