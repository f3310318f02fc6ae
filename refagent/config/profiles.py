"""The model profiles as configured: the config file's ``[profiles.NAME]`` tables, or the one profile the
environment forms, each checked, given its key, and named.

A profile's table (every key optional)::

    [profiles.work]               # the id shown in the editor's model picker
    client = "openai"             # the kind of model client (refagent.config.clients; default "openai")
    base_url = "https://api.example.com/v1"   # default: OpenAI's
    api_key_env = "EXAMPLE_API_KEY"           # or api_key = "..." (api_key = "": no key needed)
    model = "gpt-4.1"             # default: the first model the endpoint lists
    name = "Work: GPT-4.1"        # display name (default: the model and host)
    description = "..."           # default: the model and the endpoint
    context_window = 1047576
    max_output_tokens = 32768     # the most one response may have (default: the model's own)
    images = true
    input_price = 2.0             # per million tokens (stored per token in ModelProfile)
    output_price = 8.0
    cached_input_price = 0.5      # input read from the provider's prompt cache (default: input_price)
    cache_write_price = 2.5       # input written to it (Anthropic; default: input_price)
    currency = "USD"
    needs_key = true              # default: any endpoint but this machine's needs a key
    reasoning_effort = ["low", "medium", "high"]   # the efforts the model accepts, in order (default: none)
    default_reasoning_effort = "medium"            # default: "medium" if listed, else the first

Reasoning effort: a profile whose model takes one lists the levels it accepts (non-empty strings, no
duplicates, as the provider spells them: OpenAI's are ``minimal``, ``low``, ``medium``, ``high``); the session
offers them, and the chosen one is sent as the Chat Completions ``reasoning_effort``; a profile without the
key sends none. ``default_reasoning_effort`` must be one of the levels; without it, ``"medium"`` (most providers'
own default) when listed, else the first level.

Keys: a profile's ``api_key``, else the variable its ``api_key_env`` names. A profile with neither reads its
kind's variable (:attr:`~refagent.config.clients.ClientKind.key_env`: ``OPENAI_API_KEY`` for ``openai``,
``ANTHROPIC_API_KEY`` for ``anthropic``) when it talks to that kind's own host (OpenAI's, Anthropic's), and
nothing otherwise: a key is never sent to another host by accident. (A ``base_url`` from ``OPENAI_BASE_URL``/
``--base-url`` pairs with ``OPENAI_API_KEY`` too, as in every OpenAI tool: :mod:`refagent.config.loading`.) A
kind that talks to no endpoint (``scripted``, ``demo``) needs no key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeAlias

from refagent.config import clients
from refagent.config.file import typed
from refagent.config.flags import KEY_ENV, env_value
from refagent.config.providers import FACT_KEYS
from refagent.errors import ConfigError
from refagent.llm.profiles import (
    DEFAULT_CLIENT,
    OPENAI_BASE_URL,
    RESPONSES_CLIENT,
    SCRIPTED,
    ModelProfile,
    is_local,
    is_openai_host,
)

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "PREFERRED_REASONING_EFFORT",
    "env_profile",
    "file_profiles",
    "find",
    "named",
]

DEFAULT_OPENAI_MODEL = "gpt-5-mini"
"""OpenAI's ``default_model`` in the providers' data file (a test holds them equal), for ``refagent login``,
which suggests it without reading that file: cheap, fast, good at tool calls, reasoning kept across them."""
PER_MILLION = 1_000_000
PREFERRED_REASONING_EFFORT = "medium"
"""The default reasoning effort when a profile lists it and names no ``default_reasoning_effort``."""

PROFILE_KEYS: dict[str, type] = {
    "client": str,
    "base_url": str,
    "api_key": str,
    "api_key_env": str,
    "model": str,
    "name": str,
    "description": str,
    **FACT_KEYS,  # what is known of a model: its window, output limit, images, prices
    "currency": str,
    "needs_key": bool,
}
"""The keys of a profile's table with a value of one type; the reasoning keys are checked apart."""
REASONING_KEYS = frozenset({"reasoning_effort", "default_reasoning_effort"})
Facts: TypeAlias = Callable[[str | None, str, str], dict[str, Any]]
"""``(base_url, client kind, model) -> profile fields`` known of the model (prices per token)."""


def file_profiles(
    table: Any, source: str, env: Mapping[str, str], warnings: list[str], facts: Facts | None = None
) -> list[ModelProfile]:
    """The profiles of the file's ``profiles`` table (``None``: none), in its order, with their keys read
    from ``env`` and unnamed yet (:func:`named` names them once flags and environment have had their say).
    A profile names its model's context window, prices and the like, or ``facts`` (what is known of the
    model at its endpoint, :func:`refagent.config.providers.known_facts`) fills them in. A profile on
    OpenAI's own host speaks the Responses API unless its ``client`` says otherwise.
    Unknown keys are added to ``warnings``. Raises :class:`ConfigError` for a value of the wrong type, an
    unknown client kind, the reserved id ``scripted``, or reasoning efforts that do not hold together."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: profiles must be a table of tables ([profiles.NAME])")
    profiles = []
    for profile_id, entry in table.items():
        where = f"{source} [profiles.{profile_id}]"
        if profile_id == SCRIPTED:
            raise ConfigError(f"{where}: the profile id {SCRIPTED!r} is reserved for the built-in model")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a table")
        known = PROFILE_KEYS.keys() | REASONING_KEYS
        warnings += [f"{where}: unknown key {k!r} (ignored)" for k in entry if k not in known]
        values = {k: typed(entry, k, kind, where) for k, kind in PROFILE_KEYS.items() if k in entry}
        default_kind = RESPONSES_CLIENT if is_openai_host(values.get("base_url")) else DEFAULT_CLIENT
        kind = clients.find(values.setdefault("client", default_kind), where)
        of_model: dict[str, Any] = {}
        if facts is not None and kind.endpoint and values.get("model"):
            of_model = facts(values.get("base_url"), kind.name, values["model"])
        levels, default = reasoning(entry, where, of_model.get("reasoning_efforts", ()))
        if levels:
            values["reasoning_efforts"], values["default_reasoning_effort"] = levels, default
        if not kind.endpoint:
            values.setdefault("needs_key", False)
        for price in ("input_price", "output_price", "cached_input_price", "cache_write_price"):
            if price in values:
                values[price] /= PER_MILLION
        for key, value in of_model.items():
            values.setdefault(key, value)  # what the table says wins
        from_env = env_value(env, kind.base_url_env) if kind.base_url_env and "base_url" not in values else None
        if from_env:  # the user named the kind's endpoint in its own variable: its key variable goes with it
            values["base_url"] = from_env
        base_url = values.get("base_url")
        key_env = values.get("api_key_env")
        if "api_key" not in values:
            ours = base_url is None or from_env or host(base_url).lower() in kind.key_hosts
            if key_env is None and kind.key_env and ours:
                key_env = kind.key_env
            values["api_key"] = env_value(env, key_env) if key_env else None
            values["api_key_from"] = key_env or ""
        else:  # the file's key wins over its api_key_env
            values["api_key_from"] = f"`api_key` in {where}"
        values["api_key_env"] = key_env
        values.setdefault("name", "")  # named once flags and environment have had their say
        profiles.append(ModelProfile(id=profile_id, source=where, **values))
    return profiles


def reasoning(entry: Mapping[str, Any], where: str, known: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str | None]:
    """A profile's ``reasoning_effort`` levels and its default level, checked (see the module docstring);
    ``known``: the levels refagent knows the model takes, which a table without ``reasoning_effort`` has."""
    levels = entry.get("reasoning_effort")
    default = typed(entry, "default_reasoning_effort", str, where)
    if levels is None and known:
        levels = list(known)
    if levels is None:
        if default is not None:
            raise ConfigError(
                f"{where}: default_reasoning_effort needs reasoning_effort (the levels the model accepts)"
            )
        return (), None
    if not isinstance(levels, list) or not all(isinstance(level, str) and level.strip() for level in levels):
        raise ConfigError(
            f"{where}: reasoning_effort must be a list of the levels the model accepts, as non-empty strings "
            f'(e.g. ["low", "medium", "high"]), not {levels!r}'
        )
    if not levels:
        raise ConfigError(
            f"{where}: reasoning_effort must list at least one level (leave it out if the model takes none)"
        )
    duplicates = sorted({level for level in levels if levels.count(level) > 1})
    if duplicates:
        raise ConfigError(f"{where}: reasoning_effort lists {', '.join(map(repr, duplicates))} more than once")
    if default is None:
        default = PREFERRED_REASONING_EFFORT if PREFERRED_REASONING_EFFORT in levels else levels[0]
    elif default not in levels:
        listed = ", ".join(map(repr, levels))
        raise ConfigError(f"{where}: default_reasoning_effort {default!r} is not one of reasoning_effort ({listed})")
    return tuple(levels), default


def env_profile(base_url: str, model: str | None, env: Mapping[str, str]) -> ModelProfile:
    """The profile an endpoint of one's own forms from the environment (or the flags) when the file has
    none: ``custom``, spoken to with Chat Completions, its model named or else the first the endpoint lists
    (which suits local servers that serve one model), its key ``OPENAI_API_KEY``'s."""
    return ModelProfile(
        id="custom",
        name="",
        model=model or "",
        base_url=base_url,
        api_key=env_value(env, KEY_ENV),
        api_key_env=KEY_ENV,
        api_key_from=KEY_ENV,
        source="environment",
    )


def find(profiles: list[ModelProfile], wanted: str, source: str) -> ModelProfile:
    """The profile ``wanted`` of ``profiles``. Raises :class:`ConfigError` naming the known ones and the
    three places the wanted one is named."""
    for profile in profiles:
        if profile.id == wanted:
            return profile
    known = ", ".join(p.id for p in profiles)
    raise ConfigError(
        f"unknown model profile {wanted!r} (known: {known}); check default_profile in {source}, "
        "$REFAGENT_PROFILE and --profile"
    )


def host(base_url: str | None) -> str:
    """The host (and port) of ``base_url``; OpenAI's when it is None."""
    from urllib.parse import urlsplit  # here: a profile with a base URL only, not before every first answer (2.1 ms)

    return urlsplit(base_url or OPENAI_BASE_URL).netloc or str(base_url)


def named(profile: ModelProfile) -> ModelProfile:
    """``profile`` with a display name and description, if it has none, made from its id, model and endpoint
    (for a client kind that talks to no endpoint, from the kind's name)."""
    kind = clients.find(profile.client, profile.source or f"the model profile {profile.id!r}")
    name = profile.name
    if not name:
        if kind.endpoint:
            where = f"{'local, ' if is_local(profile.base_url) else ''}{host(profile.endpoint)}"
        else:
            where = f"{kind.name} model"
        what = profile.model if profile.source == "environment" else f"{profile.id}: {profile.model}".rstrip(": ")
        name = f"{what or profile.id} ({where})"
    via = profile.endpoint if kind.endpoint else f"the {kind.name} model client"
    description = profile.description or f"{profile.model or 'the first model listed'} via {via}"
    return replace(profile, name=name, description=description)
