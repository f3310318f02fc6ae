"""What a directory holds, counted for the preview of its deletion or move: :func:`preview_tree`.

The preview is advisory: it names the first ``.git`` in the tree (so the tool can refuse before anyone is
asked), counts files, directories and bytes up to :data:`COUNT_LIMIT` entries, and lists the first
:data:`LISTED_ENTRIES`. Links are not followed. The delete or move itself surveys the tree again through
descriptors (:mod:`refagent.sandbox.disk.trees`), which is what keeps a ``.git`` made in between.
"""

from __future__ import annotations

import contextlib
import os
import threading

from refagent.sandbox.disk.trees import is_protected
from refagent.sandbox.seams import TreePreview

LISTED_ENTRIES = 20
COUNT_LIMIT = 100_000
"""Counting the files of a huge tree for a preview stops here ("more than ...")."""


def preview_tree(root: str, stop: threading.Event | None = None) -> TreePreview:
    """Walk ``root`` (blocking; stops early when ``stop`` is set) and say what it holds."""
    tree = TreePreview()
    for directory, dirs, files in os.walk(root):
        if stop is not None and stop.is_set():
            break
        dirs.sort()  # the same walk, and so the same "first .git", every time
        protected = next((name for name in sorted(dirs + files) if is_protected(name)), None)
        if protected is not None:
            tree.git = os.path.relpath(os.path.join(directory, protected), root)
            tree.complete = False
            break
        tree.dirs += len(dirs)
        for name in files:
            tree.files += 1
            with contextlib.suppress(OSError):
                tree.size += os.lstat(os.path.join(directory, name)).st_size
        if len(tree.entries) < LISTED_ENTRIES:
            relative = os.path.relpath(directory, root)
            for name in sorted(dirs) + sorted(files):
                if len(tree.entries) < LISTED_ENTRIES:
                    tree.entries.append(name if relative == "." else f"{relative}/{name}")
        if tree.files + tree.dirs > COUNT_LIMIT:
            tree.complete = False
            break
    return tree
