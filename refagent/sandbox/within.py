"""The path test the sandbox's modules share (:func:`within`): a string comparison, standard library only.

Apart from :mod:`refagent.sandbox.confine.libc` so that the path policy and the confinement, which need only this,
do not load ``ctypes`` and the C library on the way to a session's first response."""

from __future__ import annotations


def within(path: str, ancestor: str) -> bool:
    """Whether ``path`` is ``ancestor`` or lies beneath it (both absolute and normalised)."""
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")
