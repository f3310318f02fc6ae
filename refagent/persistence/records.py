"""The format of one session's files: what they hold. :mod:`refagent.persistence.writer` writes them,
:mod:`refagent.persistence.reader` reads them (and :class:`~refagent.persistence.reader.StoredSession` is
what they say); this module holds what the format fixes for both: the replay file's lines
(:func:`replay_line`, :func:`replay_head`).

A session is two files (their directory and index: :mod:`refagent.persistence.store`):

    <session id>.jsonl     its records, one JSON object per line, appended and flushed per record
    <session id>.replay    its visible history as ``session/load`` sends it: one ``session/update``
                           notification per line, byte for byte what goes to the client

Why two: a long session's records are mostly the model-facing conversation, which ``session/load`` does
not need, and its visible history would have to be folded (messages merged, each tool call shown once in
its final state) before it could be sent. The replay file holds the history already folded and framed, so
a load sends it as it is, and reads of the record file only its first line and its last ``meta`` and
``hold`` records, found from the end; the conversation is parsed when a prompt first needs it
(:meth:`refagent.persistence.reader.StoredSession.model_state`). Files are private to their user (0600).

Record kinds (``kind``; unknown kinds are skipped, so older agents can read newer files):

- ``session``: the first record: ``sessionId``, ``cwd``, ``additionalDirectories``, ``createdAt``.
- ``meta``: the session's state: ``title``, ``modeId``, ``profileId``, ``updatedAt``, ``turns`` (and, in
  newer files, ``reasoningEffort``, the client's ``systemPrompt``: ``{mode, text}`` or null, and
  ``archived``: true once ``session/archive`` archived it, false or absent otherwise), written
  whole each time one changes, so the last is all a load reads. (Older files hold partial ``meta``
  records and ``turn`` records, which are folded in order.)
- ``message``: one model-facing message (Chat Completions format), appended as the conversation grows.
- ``history``: the model-facing conversation replaced whole (after compaction or undo).
- ``change``: a file the agent changed in turn ``turn``: ``path``, ``before`` (None: it did not exist),
  ``after`` (None: deleted). The first of a turn for a path holds its state before the turn (``/undo``).
- ``undo``: the changes of turn ``turn`` were undone.
- ``child``: a subagent's session, as a client that shows subagents saw it, written when the subagent
  ended (:mod:`refagent.persistence.children`).
- ``start``: prompt turn ``turn`` began at message ``at`` of the conversation (``/rewind`` cuts there); a
  ``history`` record forgets the starts before it (the ones it keeps follow it again).
- ``hold``, ``update``, ``release``: the visible history that cannot go to the replay file yet. A replay
  shows each tool call once, where it began, in its final state; so from the moment a call begins until
  it ends (and everything shown after it meanwhile) the updates are recorded here as ``update`` records,
  after a ``hold`` record that holds the replay file's size then (``replayed``). When the held items are
  all complete, they go to the replay file, folded, and a ``release`` record follows. A ``hold`` with no
  ``release`` after it (a crash in between) means: the replay file is good up to ``replayed`` bytes, and
  the ``update`` records after it are the rest (:func:`refagent.persistence.recorder.load` folds them and repairs the
  replay file). A session without a replay file (an older agent's) is read the same way, every
  ``update`` record held.

Encoding: UTF-8 JSON, one record a line; a record holding a lone surrogate (a file name that is not UTF-8)
is written as ASCII JSON instead, with the surrogate escaped, so that it reads back exactly.

Robustness: a truncated last line (a crash mid-write) and corrupt lines are skipped with one log line per
file, and the next record starts on a line of its own; a replay file's cut last line is left out, and cut
off before the next line is appended; a replay file whose lines are not all this session's notifications
is filtered line by line; a record file that cannot be read is as good as absent. Not checked: a line of
the replay file damaged inside (a bit flipped on disk) goes to the client as it is.
"""

from __future__ import annotations

from typing import Any

from refagent.acp import jsonrpc

_UPDATE = "session/update"


def replay_line(session_id: str, update: dict[str, Any]) -> bytes:
    """One line of a replay file: the ``session/update`` notification of ``update``, as sent."""
    return jsonrpc.encode(jsonrpc.notification(_UPDATE, {"sessionId": session_id, "update": update}))


def replay_head(session_id: str) -> bytes:
    """How every line of ``session_id``'s replay file begins."""
    return jsonrpc.notification_frame(_UPDATE, {"sessionId": session_id}, "update")[0]
