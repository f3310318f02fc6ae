"""The model providers refagent knows by name: ``provider/model`` names, the profile a key variable alone
forms, and what is known of common models.

The package's data file (``refagent/providers.json``) holds each provider's endpoint (``base_url``, and the
variable that overrides it, ``base_url_env``), its API kind (``client``, a :mod:`refagent.config.clients`
kind), its key variable (``key_env``), its ``default_model``, whether it runs on this machine (``local``),
and for its common models their context window, output limit, images, reasoning efforts and prices (per
million tokens). The config file's ``[providers.ID]`` tables override any of it, key by key, and may add
providers of their own::

    [providers.anthropic]
    default_model = "claude-opus-4-5"
    [providers.anthropic.models."claude-opus-4-5"]
    input_price = 5.0

    [providers.work]                 # a provider of one's own, then `--model work/some-model`
    base_url = "https://llm.example.com/v1"
    key_env = "WORK_API_KEY"

How names are read (:func:`split_name`): ``openai/gpt-5.1`` is the provider ``openai`` and its model
``gpt-5.1``; the first part is a provider only when one is known by that name, so a model whose own name
has a slash is named with its provider in front (``openrouter/anthropic/claude-sonnet-4.5``,
``groq/openai/gpt-oss-120b``), and a name whose first part is no provider is a model of the active profile.

The file is JSON, read with the ``json`` the agent has loaded anyway (no ``tomllib`` before the first
answer), and only when a name, a key variable or the config file asks for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from refagent.config.file import typed
from refagent.config.flags import env_value
from refagent.errors import ConfigError
from refagent.llm.profiles import ANTHROPIC_CLIENT, DEFAULT_CLIENT, RESPONSES_CLIENT, ModelProfile, is_local

__all__ = [
    "DATA_FILE",
    "FACT_KEYS",
    "Provider",
    "built_in",
    "facts_for",
    "key_profiles",
    "known",
    "known_facts",
    "provider_profile",
    "split_name",
]

DATA_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "providers.json")
"""The package's data file (a plain path: ``pathlib`` is not loaded before the editor's first answer)."""
PER_MILLION = 1_000_000
PRICES = ("input_price", "output_price", "cached_input_price", "cache_write_price")
FACT_KEYS: dict[str, type] = {
    "context_window": int,
    "max_output_tokens": int,
    "images": bool,
    "input_price": float,
    "output_price": float,
    "cached_input_price": float,
    "cache_write_price": float,
}
"""What is known of a model, each a profile key of the same name (prices per million tokens); besides
these, ``reasoning_effort`` (a list of levels) and ``default_reasoning_effort``."""
PROVIDER_KEYS: dict[str, type] = {
    "name": str,
    "base_url": str,
    "base_url_env": str,
    "client": str,
    "key_env": str,
    "default_model": str,
    "local": bool,
}


@dataclass(frozen=True)
class Provider:
    """One provider: where it is, how it is spoken to, and what is known of its models."""

    id: str
    name: str
    base_url: str
    client: str = DEFAULT_CLIENT
    key_env: str | None = None
    base_url_env: str | None = None
    """A variable that, when set, replaces :attr:`base_url` (``ANTHROPIC_BASE_URL``)."""
    default_model: str = ""
    """The model of the profile its key variable alone forms (empty: the first the endpoint lists)."""
    local: bool = False
    """A server on this machine: needs no key, and no key variable forms its profile."""
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Model name -> its facts, as written (prices per million)."""

    def endpoint(self, env: Mapping[str, str]) -> str:
        """The base URL, :attr:`base_url_env` first."""
        return (env_value(env, self.base_url_env) if self.base_url_env else None) or self.base_url


_BUILT_IN: dict[str, Provider] | None = None


def built_in() -> dict[str, Provider]:
    """The providers of the package's data file, in its order (read once)."""
    global _BUILT_IN
    if _BUILT_IN is None:
        with open(DATA_FILE, encoding="utf-8") as file:
            data = json.load(file)
        _BUILT_IN = _merged({}, data["providers"], str(DATA_FILE))
    return _BUILT_IN


def known(overrides: Any, source: str) -> dict[str, Provider]:
    """The built-in providers with the config file's ``providers`` table (``None``: none) over them.
    Raises :class:`ConfigError` for a value of the wrong type or a new provider without ``base_url``."""
    if overrides is None:
        return built_in()
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: providers must be a table of tables ([providers.ID])")
    return _merged(built_in(), overrides, source)


def _merged(base: dict[str, Provider], tables: Mapping[str, Any], source: str) -> dict[str, Provider]:
    merged = dict(base)
    for provider_id, table in tables.items():
        where = f"{source} [providers.{provider_id}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: must be a table")
        unknown = set(table) - PROVIDER_KEYS.keys() - {"models"}
        if unknown:
            raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        values = {k: typed(table, k, kind, where) for k, kind in PROVIDER_KEYS.items() if k in table}
        models = _models(table.get("models"), where)
        old = merged.get(provider_id)
        if old is None:
            if "base_url" not in values:
                raise ConfigError(f"{where}: a provider of one's own needs base_url")
            values.setdefault("name", provider_id)
            merged[provider_id] = Provider(id=provider_id, models=models, **values)
        else:
            both = {name: {**old.models.get(name, {}), **facts} for name, facts in models.items()}
            merged[provider_id] = replace(old, models={**old.models, **both}, **values)
    return merged


def _models(table: Any, where: str) -> dict[str, dict[str, Any]]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f'{where}: models must be a table of tables ([providers.ID.models."NAME"])')
    models = {}
    for name, facts in table.items():
        here = f"{where} models.{name!r}"
        if not isinstance(facts, dict):
            raise ConfigError(f"{here}: must be a table")
        unknown = set(facts) - FACT_KEYS.keys() - {"reasoning_effort", "default_reasoning_effort"}
        if unknown:
            raise ConfigError(f"{here}: unknown key {sorted(unknown)[0]!r}")
        for key, kind in FACT_KEYS.items():
            typed(facts, key, kind, here)
        models[name] = dict(facts)
    return models


def split_name(name: str, providers: Mapping[str, Provider]) -> tuple[Provider, str] | None:
    """``(provider, model)`` for a ``provider/model`` name whose first part is a known provider (its model
    may be empty: ``anthropic/`` is its default model); ``None`` for any other name."""
    head, slash, model = name.strip().partition("/")
    provider = providers.get(head.strip().lower()) if slash else None
    if provider is None:
        return None
    return provider, model.strip() or provider.default_model


def facts_for(provider: Provider, model: str) -> dict[str, Any]:
    """What is known of ``model`` at ``provider``: its own entry, else the entry whose name it extends with
    a dated or other suffix (``claude-sonnet-4-5-20250929``: ``claude-sonnet-4-5``'s); empty when unknown."""
    if model in provider.models:
        return provider.models[model]
    stems = [name for name in provider.models if model.startswith(f"{name}-")]
    return provider.models[max(stems, key=len)] if stems else {}


def known_facts(providers: Mapping[str, Provider], base_url: str | None, client: str, model: str) -> dict[str, Any]:
    """What is known of ``model`` (as :class:`ModelProfile` fields) at the provider whose endpoint
    ``base_url`` is (the same host), or, without one, at the provider whose kind ``client`` is (OpenAI's for
    both of its APIs); empty when no provider or model matches."""
    from urllib.parse import urlsplit  # here: a file profile with a model only (2.1 ms)

    def host(url: str) -> str:
        return (urlsplit(url).hostname or "").lower()

    for provider in providers.values():
        if base_url is not None:
            matches = host(base_url) == host(provider.base_url) and not is_local(base_url)
        else:
            matches = provider.id == _HOME.get(client)
        if matches and (facts := facts_for(provider, model)):
            return profile_values(facts)
    return {}


_HOME = {DEFAULT_CLIENT: "openai", RESPONSES_CLIENT: "openai", ANTHROPIC_CLIENT: "anthropic"}
"""The provider a profile of each kind talks to when it names no ``base_url``."""


def profile_values(facts: Mapping[str, Any]) -> dict[str, Any]:
    """A model's facts as :class:`ModelProfile` fields (prices per token, reasoning levels as a tuple)."""
    values = {key: facts[key] for key in FACT_KEYS if key in facts}
    for price in PRICES:
        if price in values:
            values[price] = float(values[price]) / PER_MILLION
    levels = facts.get("reasoning_effort")
    if levels:
        values["reasoning_efforts"] = tuple(levels)
        default = facts.get("default_reasoning_effort")
        values["default_reasoning_effort"] = default if default in levels else _preferred(levels)
    return values


def _preferred(levels: list[str]) -> str:
    return "medium" if "medium" in levels else levels[0]


def provider_profile(provider: Provider, model: str, env: Mapping[str, str]) -> ModelProfile:
    """The profile of ``model`` at ``provider``: its endpoint, kind and key variable, and what is known of
    the model. Its id is the provider's; its key is read from the provider's variable (none for a local one)."""
    key = env_value(env, provider.key_env) if provider.key_env and not provider.local else None
    base_url = provider.endpoint(env)
    return ModelProfile(
        id=provider.id,
        name=f"{provider.name}: {model}" if model else provider.name,
        model=model,
        base_url=base_url,
        api_key=key,
        api_key_env=provider.key_env,
        api_key_from=provider.key_env or "",
        needs_key=False if provider.local or is_local(base_url) else None,
        source="environment",
        client=provider.client,
        **profile_values(facts_for(provider, model)),
    )


def key_profiles(providers: Mapping[str, Provider], env: Mapping[str, str]) -> list[ModelProfile]:
    """One profile for each provider whose key variable is set, with its default model, in the providers'
    order (so ``OPENAI_API_KEY`` alone, or ``ANTHROPIC_API_KEY`` alone, is a working setup)."""
    return [
        provider_profile(p, p.default_model, env)
        for p in providers.values()
        if p.key_env and not p.local and env_value(env, p.key_env)
    ]
