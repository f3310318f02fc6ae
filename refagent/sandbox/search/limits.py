"""The limits both engines share. What a search asks and finds (:class:`~refagent.sandbox.seams.Query`,
:class:`~refagent.sandbox.seams.Hits`) is the seam's vocabulary: both engines (:mod:`~refagent.sandbox.search.ripgrep`,
:mod:`~refagent.sandbox.search.python_engine`) fill a ``Hits`` alike for the same tree, and stop past
:data:`HARD_LIMIT` matches or files, marking it incomplete.
"""

from __future__ import annotations

HARD_LIMIT = 20_000
"""Stop reading matches (and kill rg) past this many: the answer is "narrow your search" anyway."""
MAX_GREP_LINE_CHARS = 500
"""The longest line the model is shown (``grep`` cuts there, :mod:`refagent.tools.search`): the Python
engine's child process sends one character more at most, so that the cut is still seen."""
