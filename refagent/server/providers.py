"""ACP's unstable ``providers/*`` methods: the editor chooses where the agent's model requests go.

A provider here is one model profile that talks to an endpoint (the scripted and demo models are not
providers): its id is the profile's (``openai``, ``anthropic``, a config file's ``work``), its protocol the
API its client kind speaks (``openai`` for Chat Completions and the Responses API, ``anthropic`` for the
Messages API), its base URL the profile's endpoint.

- ``providers/list``: every provider, with the protocol and base URL in effect (``current``; none when
  disabled). None is ``required``: with every one disabled the agent runs on its built-in model.
- ``providers/set``: replaces one provider's routing for the rest of the agent's life: base URL, protocol
  (the client kind changes with it: ``anthropic`` is the Messages API; ``openai`` keeps an OpenAI kind the
  profile had, else Chat Completions, the kind every OpenAI-compatible gateway serves) and headers, sent
  with every request (an ``Authorization`` or ``x-api-key`` among them stands for the key, which is then
  not needed from the configuration). A provider id the configuration lacks but the providers' data
  file knows (``anthropic``) is added, on its default model. Anything else is ``-32602``.
- ``providers/disable``: the provider's profile leaves the model picker for new sessions.

A routing outlives a configuration read again (``authenticate``): it is applied to each one
(:func:`routed`). Sessions already open keep the model client they have; new sessions and prompts use the
new routing. Headers are never logged or shown: only their names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from refagent.acp.errors import InvalidParams
from refagent.llm.profiles import ANTHROPIC_CLIENT, DEFAULT_CLIENT, RESPONSES_CLIENT, ModelProfile

__all__ = ["PROTOCOLS", "Route", "known_provider_profiles", "listing", "protocol_of", "route_from", "routed"]

PROTOCOLS: dict[str, tuple[str, ...]] = {"openai": (DEFAULT_CLIENT, RESPONSES_CLIENT), "anthropic": (ANTHROPIC_CLIENT,)}
"""Each protocol refagent speaks, and the client kinds that speak it (the first: the kind a routing to
that protocol gets when the profile's own kind does not speak it)."""
KEY_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
"""Headers that carry a key: with one of them, a profile needs no key of its own."""


@dataclass(frozen=True)
class Route:
    """An editor's routing of one provider (``providers/set``)."""

    protocol: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()


def protocol_of(profile: ModelProfile) -> str | None:
    """The protocol ``profile``'s client kind speaks; None for a kind that is no provider."""
    return next((name for name, kinds in PROTOCOLS.items() if profile.client in kinds), None)


def listing(profiles: Sequence[ModelProfile], disabled: Sequence[ModelProfile]) -> dict[str, Any]:
    """The ``providers/list`` result: ``profiles`` in effect, then the ``disabled`` ones (current: none)."""
    providers: list[dict[str, Any]] = []
    for profile in profiles:
        protocol = protocol_of(profile)
        if protocol is not None:
            current = {"apiType": protocol, "baseUrl": profile.endpoint}
            providers.append(
                {"providerId": profile.id, "supported": list(PROTOCOLS), "required": False, "current": current}
            )
    for profile in disabled:
        providers.append({"providerId": profile.id, "supported": list(PROTOCOLS), "required": False, "current": None})
    return {"providers": providers}


def route_from(params: Mapping[str, Any]) -> tuple[str, Route]:
    """The provider id and routing of ``providers/set`` params; ``-32602`` for a protocol refagent does
    not speak, a base URL that is not http(s), or headers that are not strings."""
    provider_id, protocol, base_url = (params.get(k) for k in ("providerId", "apiType", "baseUrl"))
    if not isinstance(provider_id, str) or not provider_id:
        raise InvalidParams("Invalid params: providerId must be a non-empty string")
    if protocol not in PROTOCOLS:
        raise InvalidParams(f"Invalid params: apiType {protocol!r} is not one refagent speaks ({', '.join(PROTOCOLS)})")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise InvalidParams("Invalid params: baseUrl must be an http:// or https:// URL")
    headers = params.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidParams("Invalid params: headers must map names to string values")
    if any(any(c in k + v for c in "\r\n\0") for k, v in headers.items()):
        raise InvalidParams("Invalid params: a header name or value has a line break or NUL")
    return provider_id, Route(str(protocol), base_url.rstrip("/"), tuple(sorted(headers.items())))


def routed(
    profiles: Sequence[ModelProfile], routes: Mapping[str, Route | None], known: Mapping[str, ModelProfile]
) -> tuple[list[ModelProfile], list[ModelProfile]]:
    """``profiles`` with the editor's routings applied, and the profiles it disabled (``routes[id]`` None).
    A routed id no profile has is added from ``known`` (the providers' data file's profiles by id)."""
    kept: list[ModelProfile] = []
    disabled: list[ModelProfile] = []
    for profile in profiles:
        route = routes.get(profile.id, ...)
        if route is None:
            disabled.append(profile)
        elif isinstance(route, Route):
            kept.append(_apply(profile, route))
        else:
            kept.append(profile)
    for provider_id, route in routes.items():
        if isinstance(route, Route) and all(p.id != provider_id for p in kept) and provider_id in known:
            kept.append(_apply(known[provider_id], route))
    return kept, disabled


def _apply(profile: ModelProfile, route: Route) -> ModelProfile:
    kinds = PROTOCOLS[route.protocol]
    client = profile.client if profile.client in kinds else kinds[0]
    keyed = any(name.lower() in KEY_HEADERS for name, _ in route.headers)
    changed = replace(profile, base_url=route.base_url, client=client, headers=route.headers)
    if keyed:  # the headers carry the key: none is needed from the configuration, and none is sent
        changed = replace(changed, api_key="", needs_key=False, api_key_from="the editor's provider headers")
    return changed


def known_provider_profiles() -> dict[str, ModelProfile]:
    """The profile of each provider of the providers' data file, on its default model, by id: what a
    routing of a provider the configuration lacks starts from."""
    # here: only when an editor routes providers (the data file, and the config's naming of profiles)
    from refagent.config.profiles import named
    from refagent.config.providers import built_in, provider_profile

    return {pid: named(provider_profile(pr, pr.default_model, os.environ)) for pid, pr in built_in().items()}
