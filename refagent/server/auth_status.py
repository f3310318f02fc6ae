"""``auth/status`` (unstable): whether refagent can start sessions without the user signing in first, that is,
whether a model is set up. A pure function of the settings as they are now (the configuration is not read
again: the request changes nothing; ``authenticate`` reads it again).

The states (the schema's ``AuthState``), for the default profile (the one a new session uses):

- ``authenticated``: a configured model with its key (whether the key is valid is only known when used);
- ``not_required``: a configured model without a key whose endpoint needs none (a local server: Ollama, LM
  Studio, llama.cpp), or only the built-in scripted model with no configuration to set one up in (tests, ``--demo``:
  there is nothing to sign in to, as the empty ``authMethods`` say);
- ``unauthenticated``: the model needs a key it lacks, or no model is set up though a configuration file
  could hold one (``refagent login``, the ``terminal`` sign-in method, sets one up).

``accounts`` lists the configured profiles, for display, the default one ``active``; never a key.
"""

from __future__ import annotations

from typing import Any

from refagent.llm.profiles import ModelProfile, missing_key, needs_key
from refagent.settings import Settings


def auth_status(settings: Settings) -> dict[str, Any]:
    """The ``auth/status`` result for ``settings`` (see the module docstring)."""
    profile = settings.active_profile()
    configured = [pr for pr in settings.profiles if not pr.scripted]
    if profile.scripted:
        state = "not_required" if not configured and settings.config_file is None else "unauthenticated"
    elif missing_key(profile) is not None:
        state = "unauthenticated"
    elif profile.api_key or needs_key(profile):
        state = "authenticated"
    else:
        state = "not_required"
    result: dict[str, Any] = {"state": state}
    if configured:
        result["accounts"] = [{"label": _label(pr), "active": pr is profile} for pr in configured]
    return result


def _label(profile: ModelProfile) -> str:
    """A profile as the user named it, with its model when the name does not say it."""
    if profile.model and profile.model not in profile.name:
        return f"{profile.name} ({profile.model})"
    return profile.name
