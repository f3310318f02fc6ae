"""What a session offers the client to choose: its modes and its config options, as the responses that
open a session carry them (``modes``, ``configOptions``) and ``config_option_update`` repeats them.

Functions of the session's choices, not of a :class:`~refagent.session.state.Session`, so that start-up
can answer a ``session/new`` before the event loop exists with the same function as the agent on the loop
(:func:`new_session_result`; :mod:`refagent.server.handshake`). Light to import, for that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from refagent.session.modes import DEFAULT_MODE, modes_for

if TYPE_CHECKING:
    from refagent.acp.types import ConfigOption, SessionMode, SessionModeState
    from refagent.llm.profiles import ModelProfile
    from refagent.sandbox.holding import Holding
    from refagent.settings import Settings


def new_session_result(settings: Settings, session_id: str, holding: Holding) -> dict[str, Any]:
    """The ``session/new`` result of a new session ``session_id`` whose sandbox holds commands as ``holding``
    says: its id, and the modes and config options a new session starts with. The one builder of that
    answer, before the loop (:func:`refagent.server.handshake.early_new_session`) and on it
    (:meth:`refagent.session.manager.SessionManager.new_session`)."""
    profile = settings.active_profile()
    result = state(DEFAULT_MODE, holding, settings.profiles, profile.id, profile.default_reasoning_effort)
    return {"sessionId": session_id, **result}


def state(
    mode_id: str, holding: Holding, profiles: Sequence[ModelProfile], profile_id: str, effort: str | None
) -> dict[str, Any]:
    """``modes`` and ``configOptions`` of a session in mode ``mode_id`` on model ``profile_id`` (one of
    ``profiles``) at reasoning effort ``effort``, whose sandbox holds commands as ``holding`` says."""
    modes = modes_for(holding)
    current: SessionModeState = {"currentModeId": mode_id, "availableModes": modes}
    return {"modes": current, "configOptions": config_options(mode_id, modes, profiles, profile_id, effort)}


def config_options(
    mode_id: str, modes: list[SessionMode], profiles: Sequence[ModelProfile], profile_id: str, effort: str | None
) -> list[ConfigOption]:
    """The complete option list. The mode option mirrors ``modes`` (clients use one or the other); a
    ``thought_level`` option is there when the model takes a reasoning effort and one is chosen."""
    options: list[ConfigOption] = [
        {
            "id": "mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": mode_id,
            "options": [{"value": m["id"], "name": m["name"], "description": m.get("description", "")} for m in modes],
        },
        {
            "id": "model",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": profile_id,
            "options": [{"value": p.id, "name": p.name, "description": p.description} for p in profiles],
        },
    ]
    efforts = next(p for p in profiles if p.id == profile_id).reasoning_efforts
    if efforts and effort is not None:
        options.append(
            {
                "id": "thought_level",
                "name": "Reasoning effort",
                "category": "thought_level",
                "type": "select",
                "currentValue": effort,
                "options": [
                    {"value": level, "name": level.capitalize(), "description": f"Reasoning effort: {level}"}
                    for level in efforts
                ],
            }
        )
    return options
