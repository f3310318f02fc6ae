"""Deleting and moving on the local disk (:func:`delete_entry`, :func:`move_entry`): all of it or none
of it, or an error that says exactly what was done.

Contract: paths come from the path policy and are reached through the descriptor walk of
:mod:`refagent.sandbox.disk.walk`; trees are walked with :mod:`refagent.sandbox.disk.trees`. Both functions
block (the file system calls them in worker threads) and raise :class:`~refagent.errors.ToolError` with
a message for the model.

``delete`` never follows a link: a link is unlinked, and a directory tree is removed with the same
descriptor walk, so a subdirectory swapped for a link mid-way is unlinked, not descended into.
``move`` refuses an existing destination (checked just before ``rename``: a file created in that
instant could still be replaced; Python has no ``RENAME_NOREPLACE``). Across file systems, where
``rename`` cannot go, it copies through descriptors to a temporary name beside the destination, renames
that into place and then deletes the source (see :func:`_move_across` for what that can and cannot undo).

Nothing half done. A recursive delete first walks the whole tree (through descriptors, as above) and
refuses before deleting anything when the tree holds a ``.git`` (:data:`~refagent.sandbox.disk.trees.PROTECTED_NAME`)
or a directory whose entries we may not remove; the deleting walk then checks every directory again before
it removes anything in it, so a ``.git`` that appears in between is never deleted either, and the error says
exactly what was deleted before it stopped. A move of a tree that holds a ``.git`` is refused, checked
before the ``rename`` and again on the moved tree (which is then moved back). A move that fails after
making parent directories removes the ones it made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator

from refagent.errors import ToolError
from refagent.sandbox.disk.trees import Appeared, Removal, Survey, copy_entry, survey_tree, under
from refagent.sandbox.disk.walk import fsync_dir, kind_name, lstat_at, open_parent, os_error, remove_made
from refagent.sandbox.disk.write import TEMP_PREFIX, TEMP_SUFFIX


def delete_entry(path: str, recursive: bool) -> None:
    """Delete a file, a link (not its target) or, with ``recursive``, a directory tree."""
    dir_fd, name = open_parent(path, "delete")
    with _acting_on("delete", path, dir_fd):
        info = lstat_at(dir_fd, name)
        if info is None:
            raise ToolError(f"Cannot delete {path}: it does not exist.")
        if stat.S_ISDIR(info.st_mode):
            if not recursive:
                raise ToolError(
                    f"{path} is a directory; deleting it needs recursive=true (which deletes everything in it)."
                )
            _delete_tree(dir_fd, name, path)
        else:
            os.unlink(name, dir_fd=dir_fd)


@contextlib.contextmanager
def _acting_on(verb: str, path: str, dir_fd: int) -> Iterator[None]:
    """What goes wrong while ``verb``-ing ``path`` said for the model (a tree too deep to walk, an OS error);
    ``dir_fd`` (its parent's) closed whatever happens."""
    try:
        yield
    except RecursionError:
        raise ToolError(f"Cannot {verb} {path}: the directory tree is too deep.") from None
    except OSError as exc:
        raise os_error(verb, path, exc) from None
    finally:
        os.close(dir_fd)


def _delete_tree(dir_fd: int, name: str, path: str) -> None:
    """Survey the tree, refuse before deleting anything if it may not all go, then remove it."""
    survey = _surveyed(dir_fd, name, path, "delete")
    blocked = under(path, survey.blocked) if survey.blocked is not None else None
    parent = os.path.dirname(path) or "/"
    if blocked is None and not os.access(parent, os.W_OK | os.X_OK):
        blocked = parent  # by name, but only advisory: the removal still goes through descriptors
    if blocked is not None:
        raise ToolError(
            f"Cannot delete {path}: the entries of {blocked} may not be removed (no write permission, or a "
            "read-only file system), so only part of the tree could go. Nothing was deleted."
        )
    removal = Removal()
    try:
        removal.remove(dir_fd, name)
    except Appeared as exc:
        raise ToolError(
            f"Stopped deleting {path}: {under(path, exc.relative)} (a .git) appeared in it while it was being "
            f"deleted, and the file tools never delete a .git. Deleted before that: {removal.done()}; the rest "
            f"of {path} is still there."
        ) from None
    except OSError as exc:
        raise ToolError(
            f"Deleting {path} failed at {under(path, removal.at)}: {exc.strerror or exc}. Deleted before that: "
            f"{removal.done()}; the rest of {path} is still there."
        ) from None


_MOVE_BREAKS = " (its paths would break)"
"""Why a ``.git`` is never moved, said in the refusal."""


def _surveyed(dir_fd: int, name: str, path: str, verb: str, why: str = "") -> Survey:
    """The tree ``name`` in ``dir_fd`` (``path``), surveyed before it is ``verb``-d; refused, with nothing done,
    when it holds a ``.git`` (``why``: what that would break, said after the rule)."""
    survey = Survey()
    survey_tree(dir_fd, name, survey)
    if survey.protected is not None:
        raise ToolError(
            f"Cannot {verb} {path}: it contains {under(path, survey.protected)}, a git repository's .git, and the "
            f"file tools never {verb} a .git, at any depth{why}. Nothing was {verb}d."
        )
    return survey


def move_entry(source: str, destination: str) -> None:
    """Rename ``source`` to ``destination`` (parents made), which must not exist yet."""
    if source.rstrip("/") == destination.rstrip("/"):
        raise ToolError(f"The source and the destination are the same path ({source}).")
    if destination.startswith(source.rstrip("/") + "/"):
        raise ToolError(f"Cannot move {source} into itself ({destination}).")
    src_fd, src_name = open_parent(source, "move")
    with _acting_on("move", source, src_fd):
        info = lstat_at(src_fd, src_name)
        if info is None:
            raise ToolError(f"Cannot move {source}: it does not exist.")
        tree = stat.S_ISDIR(info.st_mode)
        if tree:
            _surveyed(src_fd, src_name, source, "move", _MOVE_BREAKS)
        made: list[str] = []
        try:
            dst_fd, dst_name = open_parent(destination, "move to", create=True, made=made)
        except ToolError as exc:
            remove_made(made)
            raise ToolError(str(exc).replace("Cannot move to", f"Cannot move {source} to")) from None
        try:
            if lstat_at(dst_fd, dst_name) is not None:
                raise ToolError(
                    f"Cannot move {source} to {destination}: the destination already exists. Delete it first, or "
                    "choose another name."
                )
            try:
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _move_across(src_fd, src_name, dst_fd, dst_name, source, destination)
            else:
                if tree:
                    _check_moved(src_fd, src_name, dst_fd, dst_name, source, destination)
        except BaseException:
            remove_made(made)  # only the empty ones go: after a half-done move they hold what is there
            raise
        finally:
            os.close(dst_fd)


def _check_moved(src_fd: int, src_name: str, dst_fd: int, dst_name: str, source: str, destination: str) -> None:
    """The tree just renamed is the one that was surveyed, without a ``.git``; if one appeared in between,
    rename it back (``rename`` is atomic both ways) and refuse."""
    survey = Survey()
    survey_tree(dst_fd, dst_name, survey)
    if survey.protected is None:
        return
    found = under(source, survey.protected)
    try:
        if lstat_at(src_fd, src_name) is not None:
            raise FileExistsError(errno.EEXIST, "something else is there now", source)
        os.rename(dst_name, src_name, src_dir_fd=dst_fd, dst_dir_fd=src_fd)
    except OSError as exc:
        raise ToolError(
            f"Moved {source} to {destination}, then found {found} (a .git) in it, which appeared during the "
            f"move; moving it back failed ({exc.strerror or exc}), so it is at {destination} now."
        ) from None
    raise ToolError(
        f"Cannot move {source}: {found} (a .git) appeared in it while it was being moved, and the file tools "
        "never move a .git. It was moved back; nothing was moved."
    )


def _move_across(src_fd: int, src_name: str, dst_fd: int, dst_name: str, source: str, destination: str) -> None:
    """``rename`` cannot cross file systems: copy (:func:`copy_entry`) to a temporary name beside the destination,
    rename that into place, then delete the source.

    Up to the last step a failure removes the copy, and nothing has moved. The source is surveyed first so
    that deleting it is unlikely to fail; if it fails anyway, a file's copy is removed again (nothing
    moved), while a tree keeps its whole copy and the error says what is left of the source."""
    info = os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
    tree = stat.S_ISDIR(info.st_mode)
    across = "they are on different file systems, so it would be copied and then deleted"
    if tree:
        survey = _surveyed(src_fd, src_name, source, "move", _MOVE_BREAKS)
        if survey.special is not None:
            raise ToolError(
                f"Cannot move {source} to {destination}: {across}, and {under(source, survey.special)} is a "
                "special file (a FIFO, a socket or a device), which cannot be copied. Nothing was moved."
            )
        if survey.blocked is not None:
            raise ToolError(
                f"Cannot move {source} to {destination}: {across}, and the entries of "
                f"{under(source, survey.blocked)} may not be removed. Nothing was moved."
            )
    elif not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise ToolError(
            f"Cannot move {source} to {destination}: {across}, and it is {kind_name(info.st_mode)}. Nothing was moved."
        )
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
    try:
        copy_entry(src_fd, src_name, dst_fd, temp)
        if lstat_at(dst_fd, dst_name) is not None:
            raise FileExistsError(errno.EEXIST, "the destination appeared while copying", destination)
        os.rename(temp, dst_name, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError, Appeared, RecursionError):
            if lstat_at(dst_fd, temp) is not None:
                Removal().remove(dst_fd, temp)
        if isinstance(exc, Appeared):
            raise ToolError(
                f"Cannot move {source}: {under(source, exc.relative)} (a .git) appeared in it while it was "
                "being copied, and the file tools never move a .git. The partial copy was removed; nothing was moved."
            ) from None
        if isinstance(exc, ToolError):
            raise ToolError(f"Cannot move {source} to {destination} ({across}): {exc} Nothing was moved.") from None
        if isinstance(exc, OSError):
            raise ToolError(
                f"Cannot move {source} to {destination} ({across}): copying failed: {exc.strerror or exc}. The "
                "partial copy was removed; nothing was moved."
            ) from None
        raise
    fsync_dir(dst_fd)
    removal = Removal()
    try:
        if tree:
            removal.remove(src_fd, src_name)
        else:
            os.unlink(src_name, dir_fd=src_fd)
    except (OSError, Appeared) as exc:
        reason = f"{under(source, exc.relative)} (a .git) appeared in it" if isinstance(exc, Appeared) else exc
        if not tree:
            with contextlib.suppress(OSError):
                os.unlink(dst_name, dir_fd=dst_fd)
            raise ToolError(
                f"Cannot move {source} to {destination} ({across}): deleting the original failed ({reason}); "
                "the copy was removed again. Nothing was moved."
            ) from None
        raise ToolError(
            f"{source} was copied to {destination} ({across}), but deleting the original then failed at "
            f"{under(source, removal.at)} ({reason}). The whole copy is at {destination}; of {source}, "
            f"{removal.done()} had been deleted, and the rest is still there."
        ) from None
