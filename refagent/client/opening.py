"""Choosing and opening the session a terminal client works in: new, ``--resume <id>`` or ``--continue``.

``refagent run`` and ``refagent chat`` both start their session with :func:`open_session`, and
``refagent sessions`` lists through :func:`list_sessions` and finds ids with :func:`find_session`. All of
it is plain ACP, asked of the agent the client started (the agent owns the saved sessions and their
index; the client never reads the store):

- a new session: ``session/new``;
- ``--resume <id>`` (a whole id, or the start of one that names a single session): ``session/resume``,
  or ``session/load`` (see :func:`open_session` for which, and why);
- ``--continue``: the most recently updated session of this directory, found with ``session/list``
  (``cwd`` given), then reopened as ``--resume`` would.

What can go wrong in choosing or reopening is a :class:`SessionError` whose ``str()`` is a sentence for
the user (callers print it and exit 1); an error the agent answered for another reason (authentication
required, say) stays the :class:`~refagent.acp.errors.RequestError` it was.

Spec: ACP "Session Setup" (``session/new``, ``session/load``), "Session List", "Resume Session"
(``session/resume``: reopen without the replay).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from refagent.acp.connection import Connection
from refagent.acp.errors import RESOURCE_NOT_FOUND, RequestError

MAX_PAGES = 10_000
"""A bound on ``session/list`` pages followed, against an agent whose cursors never end."""

How = Literal["new", "load", "resume"]


class SessionError(Exception):
    """A session could not be chosen or reopened; ``str()`` says why, for the user."""


class NoSuchSession(SessionError):
    """The id names no session the agent has (or its start names several)."""


class NoEarlierSession(SessionError):
    """``--continue``, and this directory has no session yet."""


class NotSupported(SessionError):
    """The agent does not offer what was asked (listing, reopening, deleting sessions)."""


@dataclass(frozen=True)
class OpenedSession:
    """The session a client works in, as :func:`open_session` opened it."""

    session_id: str
    cwd: str
    """The directory the session was opened in (a reopened session's own, see :func:`open_session`)."""
    result: dict[str, Any]
    """The agent's answer to ``session/new``, ``session/load`` or ``session/resume``: its ``modes``,
    ``configOptions`` (and ``models``, from an agent that sends them)."""
    how: How
    """Which request opened it."""
    info: dict[str, Any] = field(default_factory=dict)
    """The ``session/list`` entry of a reopened session (``title``, ``updatedAt``), when the agent lists."""

    @property
    def resumed(self) -> bool:
        """Whether this is an earlier session reopened (``--resume``, ``--continue``), not a new one."""
        return self.how != "new"

    @property
    def replayed(self) -> bool:
        """Whether the agent replayed the session's history (``session/load``): its ``session/update``
        notifications reached the connection's handler before :func:`open_session` returned."""
        return self.how == "load"


# -- capabilities -----------------------------------------------------------------------------------


def session_capability(init: dict[str, Any], name: str) -> bool:
    """Whether the ``initialize`` result advertises ``agentCapabilities.sessionCapabilities.<name>``
    (ACP: a capability is offered by its object being there)."""
    capabilities = init.get("agentCapabilities")
    session = capabilities.get("sessionCapabilities") if isinstance(capabilities, dict) else None
    return isinstance(session, dict) and isinstance(session.get(name), dict)


def can_load(init: dict[str, Any]) -> bool:
    """Whether the agent advertises ``loadSession``."""
    capabilities = init.get("agentCapabilities")
    return isinstance(capabilities, dict) and capabilities.get("loadSession") is True


def _agent_name(init: dict[str, Any]) -> str:
    info = init.get("agentInfo")
    return str(info.get("name") or "the agent") if isinstance(info, dict) else "the agent"


# -- listing and finding ----------------------------------------------------------------------------


async def list_sessions(connection: Connection, init: dict[str, Any], cwd: str | None = None) -> list[dict[str, Any]]:
    """Every session the agent lists, newest first (by ``updatedAt``): of ``cwd`` if given, else of every
    directory (``session/list`` without ``cwd``). All pages are fetched (``nextCursor``).

    A directory reached through a symbolic link is asked for both as written and as resolved: the
    session may have been opened with either (an editor often resolves it). Entries of other
    directories are left out even if the agent sent them. Raises :class:`NotSupported` if the agent
    does not advertise ``sessionCapabilities.list``."""
    if not session_capability(init, "list"):
        raise NotSupported(f"{_agent_name(init)} cannot list its sessions (it does not offer session/list)")
    if cwd is None:
        found = await _pages(connection, {})
    else:
        directories = _directories(cwd)
        found = {}
        for directory in directories:
            found.update(await _pages(connection, {"cwd": directory}))
        found = {sid: entry for sid, entry in found.items() if entry.get("cwd") in directories}
    # Newest first whatever the agent's order (and two directories' lists are merged): stable, so
    # entries without a time keep the agent's order, after the others.
    return sorted(found.values(), key=lambda entry: str(entry.get("updatedAt") or ""), reverse=True)


async def _pages(connection: Connection, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One listing, page after page: the entries by session id."""
    found: dict[str, dict[str, Any]] = {}
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        result = await connection.request("session/list", {**params, **({"cursor": cursor} if cursor else {})})
        sessions = result.get("sessions") if isinstance(result, dict) else None
        for entry in sessions if isinstance(sessions, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("sessionId"), str):
                found.setdefault(entry["sessionId"], entry)
        cursor = result.get("nextCursor") if isinstance(result, dict) else None
        if not isinstance(cursor, str) or cursor in seen:  # the end (or a cursor given twice: a loop)
            break
        seen.add(cursor)
    return found


def _directories(cwd: str) -> list[str]:
    """``cwd`` as written (made absolute) and resolved, once each."""
    written = os.path.abspath(cwd)
    return list(dict.fromkeys([written, os.path.realpath(written)]))


def find_session(sessions: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    """The entry of ``sessions`` whose id is ``wanted``, or, failing that, the one whose id starts with it.

    Raises :class:`NoSuchSession` when none does, or when several start with it (the message lists
    them)."""
    for entry in sessions:
        if entry.get("sessionId") == wanted:
            return entry
    matches = [entry for entry in sessions if wanted and str(entry.get("sessionId", "")).startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(str(entry["sessionId"]) for entry in matches[:5]) + (", …" if len(matches) > 5 else "")
        raise NoSuchSession(f"{wanted!r} is the start of {len(matches)} session ids ({ids}): give more of it")
    raise NoSuchSession(f"no session {wanted!r} (refagent sessions list --all lists them)")


# -- opening ----------------------------------------------------------------------------------------


async def open_session(
    connection: Connection,
    init: dict[str, Any],
    cwd: str,
    *,
    resume: str | None = None,
    latest: bool = False,
    replay: bool = False,
    before: Callable[[str, dict[str, Any]], None] | None = None,
) -> OpenedSession:
    """Open the session a client works in: a new one in ``cwd`` (an absolute path; ``session/new``) unless
    asked otherwise.

    ``resume``: the session with this id (or the start of one, when the agent lists its sessions and
    only one id starts so). ``latest`` (``--continue``): the most recently updated session whose
    directory is ``cwd``; :class:`NoEarlierSession` if there is none. Not both (``ValueError``).

    A reopened session is opened in its own directory (and additional directories) as the agent lists
    them, not in ``cwd``, when the agent lists it: its conversation, its file paths and its ``/undo``
    records are about that project (``OpenedSession.cwd`` says which was used).

    Which request reopens it: ``session/resume`` when the ``initialize`` result advertises
    ``agentCapabilities.sessionCapabilities.resume``, because it answers at once without sending the
    history back (``run`` goes straight to its prompt); else ``session/load`` if it advertises
    ``loadSession``. With ``replay`` the preference is the other way round: ``session/load``, whose
    replay of the history (as ``session/update`` notifications, to the connection's handler, all before
    this returns) lets ``chat`` show the earlier conversation; ``OpenedSession.replayed`` says whether
    that happened. :class:`NotSupported` if the agent offers neither. (No callback for the replayed
    updates: they are notifications, and the handler the caller gave ``open_agent`` draws them as it draws
    a live turn's; the replay is over when this returns, since the agent answers after it.)

    ``before``: called with the session's id and its ``session/list`` entry (``{}`` if not listed) just
    before it is reopened, so a client can say which session it is before its history is drawn.

    Raises :class:`NoSuchSession` for an id the agent does not have (it answers ``-32002``), and the
    agent's other errors as :class:`~refagent.acp.errors.RequestError`.
    """
    if resume is not None and latest:
        raise ValueError("resume an id, or the latest session: not both")
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd must be an absolute path, not {cwd!r}")
    if resume is None and not latest:
        result = await connection.request("session/new", {"cwd": cwd, "mcpServers": []})
        return OpenedSession(str(result["sessionId"]), cwd, dict(result), "new")
    how = _reopen_with(init, replay)
    entry: dict[str, Any] = {}
    if latest:
        found = await list_sessions(connection, init, cwd)
        if not found:
            raise NoEarlierSession(
                f"no earlier session in {cwd}: start one with refagent chat or refagent run (without --continue)"
            )
        entry = found[0]
    elif session_capability(init, "list"):
        assert resume is not None
        entry = find_session(await list_sessions(connection, init), resume)
    session_id = str(entry.get("sessionId") or resume)
    params: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
    if isinstance(entry.get("cwd"), str) and os.path.isabs(entry["cwd"]):
        params["cwd"] = entry["cwd"]
    extra = entry.get("additionalDirectories")
    if extra and isinstance(extra, list) and session_capability(init, "additionalDirectories"):
        params["additionalDirectories"] = extra
    if before is not None:
        before(session_id, entry)
    try:
        result = await connection.request(f"session/{how}", params)
    except RequestError as exc:
        if exc.code == RESOURCE_NOT_FOUND:
            raise NoSuchSession(f"no session {session_id!r} (the agent answered: {exc.message})") from None
        raise
    return OpenedSession(session_id, params["cwd"], dict(result) if isinstance(result, dict) else {}, how, entry)


def _reopen_with(init: dict[str, Any], replay: bool) -> How:
    """``resume`` or ``load``, as :func:`open_session` says; :class:`NotSupported` if neither is offered."""
    offered: list[How] = []
    if session_capability(init, "resume"):
        offered.append("resume")
    if can_load(init):
        offered.append("load")
    if not offered:
        raise NotSupported(f"{_agent_name(init)} cannot reopen sessions (it offers neither session/resume nor load)")
    if replay and "load" in offered:
        return "load"
    return offered[0]
