"""The layers combined: :func:`load` reads the config file, the environment and the flags into one
:class:`Config`.

Sources, in rising priority: the file (:mod:`refagent.config.file`), the environment, the command-line
flags (:mod:`refagent.config.flags`). How they combine:

- With profiles in the file, the active profile is ``--profile``, else ``$REFAGENT_PROFILE``, else
  ``default_profile``, else the first; ``OPENAI_BASE_URL``/``--base-url`` and ``REFAGENT_MODEL``/``--model``
  override its ``base_url`` and ``model`` (flags over environment over file). An endpoint from
  ``OPENAI_BASE_URL``/``--base-url`` pairs with ``OPENAI_API_KEY`` when the profile names no key, as in every
  OpenAI tool.
- A model named ``provider/model`` (``--model``, else ``REFAGENT_MODEL``, else
  ``HARBOR_ACP_REQUESTED_MODEL``) chooses that provider's profile: the file's profile of that id with the
  model, else one made from what refagent knows of the provider (:mod:`refagent.config.providers`).
- With no profiles in the file: ``OPENAI_BASE_URL``/``--base-url`` to another host forms a ``custom``
  profile on Chat Completions (:func:`refagent.config.profiles.env_profile`; alone, pointing at this
  machine, it is enough: local endpoints need no key); else each provider whose key variable is set
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...) forms its profile on its default model, OpenAI's first;
  a model alone, with no key set, forms OpenAI's (whose first prompt then says to set the key).
- With nothing at all, the only profile is the built-in scripted one; asked for by name (``--profile
  scripted``), it is added to the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from refagent.config import clients
from refagent.config.allowed import configured_servers, fetch_allow, project_server_names, trusted_projects
from refagent.config.custom_tools import tool_directories, tool_entries
from refagent.config.file import choose_path, read_table, typed
from refagent.config.flags import BASE_URL_ENV, HARBOR_MODEL_ENV, KEY_ENV, MODEL_ENV, PROFILE_ENV, Flags, env_value
from refagent.config.limits import SubagentLimits, max_requests, retry_policy, subagent_limits
from refagent.config.profiles import env_profile, file_profiles, find, host, named
from refagent.config.providers import Provider, key_profiles, known, known_facts, provider_profile, split_name
from refagent.llm.profiles import DEFAULT_CLIENT, SCRIPTED, ModelProfile, is_openai_host, scripted_profile
from refagent.logs import logger

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from refagent.llm.protocol import ModelClient
    from refagent.llm.retry import RetryPolicy

__all__ = ["TOP_KEYS", "Config", "config_file", "load"]

TOP_KEYS = frozenset(
    {
        "default_profile",
        "max_requests",
        "retry",
        "subagents",
        "profiles",
        "providers",
        "tools",
        "tool_path",
        "mcp_servers",
        "project_mcp_servers",
        "trusted_projects",
        "fetch",
    }
)
"""The keys of the file itself; any other is warned about and ignored."""


@dataclass(frozen=True)
class Config:
    """The loaded configuration. ``profiles`` is never empty and contains ``default_profile``."""

    profiles: list[ModelProfile]
    default_profile: str
    max_requests: int | None = None
    """Model requests per prompt turn; ``None``: the turn's default."""
    retry: RetryPolicy | None = None
    """How the model client retries transient failures; ``None``: its defaults."""
    path: str | None = None
    """The config file that was read, if any."""
    warnings: list[str] = field(default_factory=list)
    """Things worth telling the user (unknown keys...); they are also logged."""
    tools: list[str] = field(default_factory=list)
    """Custom tools, ``module:Class`` each, as written (checked when imported, not here)."""
    tool_path: list[Path] = field(default_factory=list)
    """Absolute directories to import custom tools from (after the interpreter's own path)."""
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    """The user's own MCP servers, as ACP ``McpServer`` entries (:mod:`refagent.config.allowed`)."""
    project_mcp_servers: tuple[str, ...] = ()
    """The names of a project's ``.mcp.json`` servers the user allows to start."""
    trusted_projects: tuple[str, ...] = ()
    """Directories (``~`` expanded) whose projects the user trusts with their own slash commands."""
    fetch_allow: tuple[str, ...] = ()
    """Hosts, addresses or networks the ``fetch`` tool may reach though they are not public."""
    subagents: SubagentLimits = field(default_factory=SubagentLimits)
    """What the ``task`` tool's subagents may do (the ``[subagents]`` table)."""

    @property
    def profile(self) -> ModelProfile:
        """The default profile."""
        return next(p for p in self.profiles if p.id == self.default_profile)

    def make_model(self, profile: ModelProfile) -> ModelClient:
        """The client for ``profile``, of the kind it names (:func:`refagent.config.clients.make_model`), with
        this configuration's retry policy."""
        return clients.make_model(profile, self.retry)

    def warm_up(self) -> Callable[[], Awaitable[None]] | None:
        """What imports the clients of this configuration's profiles ahead of time (None: none needs it)."""
        return clients.warm_up_for(self.profiles)


def config_file(args: argparse.Namespace | None, env: Mapping[str, str]) -> str | None:
    """The config file :func:`load` reads for ``args`` and ``env`` (it may not exist yet: ``refagent login``
    writes it); None when there is no user config directory and none was named."""
    return choose_path(Flags.of(args).config, env)[0]


def load(args: argparse.Namespace | None, env: Mapping[str, str]) -> Config:
    """Load the configuration from the file, ``env`` and ``args`` (see the module docstring).

    ``args`` may be ``None`` or lack some of the :func:`~refagent.config.flags.add_arguments` flags. Warnings
    (unknown keys) are logged and kept in :attr:`Config.warnings`. Raises
    :class:`~refagent.errors.ConfigError` for a malformed file, an explicit file that does not exist, a value
    of the wrong type, an unknown model client kind, or an unknown profile. Custom tools are only listed
    here, never imported; no model client is made.
    """
    flags = Flags.of(args)
    path, explicit = choose_path(flags.config, env)
    data = read_table(path, explicit) if path is not None else None
    warnings: list[str] = []
    source = str(path) if data is not None else "the config file"
    profiles: list[ModelProfile] = []
    retry = None
    subagents = SubagentLimits()
    in_file: int | None = None
    default_id: str | None = None
    tools: list[str] = []
    tool_path: list[Path] = []
    mcp_servers: list[dict[str, Any]] = []
    project_mcp: tuple[str, ...] = ()
    trusted: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    table = data.get("providers") if data is not None else None
    providers = _Providers(table, source)
    if data is not None:
        assert path is not None  # data came from it
        warnings += [f"{source}: unknown key {k!r} (ignored)" for k in data if k not in TOP_KEYS]
        default_id = typed(data, "default_profile", str, source)
        in_file = typed(data, "max_requests", int, source)
        retry = retry_policy(data.get("retry"), source, warnings)
        subagents = subagent_limits(data.get("subagents"), source, warnings)
        profiles = file_profiles(data.get("profiles"), source, env, warnings, providers.facts)
        profiles = [_with_default_model(p, data, source, env, providers) for p in profiles]
        tools = tool_entries(data, source)
        tool_path = tool_directories(data, path, source, warnings)
        mcp_servers = configured_servers(data.get("mcp_servers"), source)
        project_mcp = project_server_names(data, source)
        trusted = trusted_projects(data, source)
        allow = fetch_allow(data, source)
    for warning in warnings:
        logger(__name__).warning("%s", warning)

    base_url = flags.base_url or env_value(env, BASE_URL_ENV)
    model = flags.model or env_value(env, MODEL_ENV) or env_value(env, HARBOR_MODEL_ENV)
    wanted = flags.profile or env_value(env, PROFILE_ENV) or default_id
    by_name = providers.split(model) if model and not base_url else None
    chosen: ModelProfile | None = None
    if by_name is not None:  # `provider/model`: that provider's profile, whatever else is configured
        provider, model = by_name
        wanted = provider.id
        if all(p.id != provider.id for p in profiles):
            chosen, model = provider_profile(provider, model, env), None  # else the file's, with the model
    if not profiles:
        if base_url and not is_openai_host(base_url):  # an endpoint of one's own: Chat Completions
            profiles = [env_profile(base_url, model, env)]
            base_url = model = None  # used up
        elif base_url or (model and not providers.keyed(env)):  # OpenAI, named by its URL or a model alone
            openai = providers.known["openai"]
            profiles = [replace(provider_profile(openai, model or openai.default_model, env), base_url=base_url)]
            base_url = model = None  # used up
        else:
            profiles = list(providers.keyed(env))  # one per key variable set (OPENAI_API_KEY, ...)
    if chosen is not None:
        profiles = [chosen, *(p for p in profiles if p.id != chosen.id)]
    if not profiles:
        profiles = [scripted_profile()]
    if wanted == SCRIPTED and not profiles[0].scripted:
        profiles.append(scripted_profile())  # asked for by name: the offline model stays reachable
    active = find(profiles, wanted or profiles[0].id, source)
    if not active.scripted and (base_url or model):
        overridden = replace(active, base_url=base_url or active.base_url, model=model or active.model)
        home = providers.get(active.id) if model and not base_url and active.source == "environment" else None
        entry = _file_entry(data, active.id) if model and not base_url else None
        if home is not None:  # a key variable's profile: what is known of the model named
            overridden = provider_profile(home, model or home.default_model, env)
        elif entry is not None:  # the file's profile made again: what is known of the model named fills in
            # what the table leaves out (its context window, prices, reasoning levels), not the table's model's
            overridden = file_profiles({active.id: {**entry, "model": model}}, source, env, [], providers.facts)[0]
        if base_url and overridden.api_key is None and not overridden.api_key_env:
            # An endpoint from OPENAI_BASE_URL/--base-url pairs with OPENAI_API_KEY, as in every OpenAI tool.
            key = env_value(env, KEY_ENV)
            overridden = replace(overridden, api_key=key, api_key_env=KEY_ENV, api_key_from=KEY_ENV)
        profiles = [overridden if p.id == active.id else p for p in profiles]
    return Config(
        [named(p) for p in profiles],
        active.id,
        max_requests(in_file, flags.max_requests, env),
        retry,
        path if data is not None else None,
        warnings,
        tools=tools,
        tool_path=tool_path,
        mcp_servers=mcp_servers,
        project_mcp_servers=project_mcp,
        trusted_projects=trusted,
        fetch_allow=allow,
        subagents=subagents,
    )


def _with_default_model(
    profile: ModelProfile, data: dict[str, Any], source: str, env: Mapping[str, str], providers: _Providers
) -> ModelProfile:
    """A file's profile that names no model and speaks a provider's own API (not Chat Completions, whose
    endpoints list their models) at the provider's own host: made again with the provider's default model,
    what its key variable alone would give, rather than failing at the first prompt. On another host (a
    proxy, whose names may differ) it stays without one, and the first prompt says where to set it."""
    if profile.model or profile.client == DEFAULT_CLIENT or profile.scripted:
        return profile
    where = host(profile.base_url).lower() if profile.base_url else None
    for provider in providers.known.values():
        if provider.client != profile.client or not provider.default_model:
            continue
        if where is not None and where != host(provider.base_url).lower():
            continue
        entry = _file_entry(data, profile.id)
        if entry is None:
            return profile
        table = {profile.id: {**entry, "model": provider.default_model}}
        return file_profiles(table, source, env, [], providers.facts)[0]
    return profile


def _file_entry(data: dict[str, Any] | None, profile_id: str) -> dict[str, Any] | None:
    """The config file's table of the profile ``profile_id``, if the file has one."""
    table = data.get("profiles") if data is not None else None
    entry = table.get(profile_id) if isinstance(table, dict) else None
    return entry if isinstance(entry, dict) else None


class _Providers:
    """The known providers (:mod:`refagent.config.providers`), read only when something asks: a name with a
    slash, no profile in the file, or a file profile to complete."""

    def __init__(self, table: Any, source: str) -> None:
        self._table = table
        self._source = source
        self._known: dict[str, Provider] | None = None
        self._keyed: list[ModelProfile] | None = None

    @property
    def known(self) -> dict[str, Provider]:
        if self._known is None:
            self._known = known(self._table, self._source)
        return self._known

    def get(self, provider_id: str) -> Provider | None:
        return self.known.get(provider_id)

    def split(self, name: str) -> tuple[Provider, str] | None:
        return split_name(name, self.known) if "/" in name else None

    def keyed(self, env: Mapping[str, str]) -> list[ModelProfile]:
        """The profiles the providers' key variables form (:func:`~refagent.config.providers.key_profiles`)."""
        if self._keyed is None:
            self._keyed = key_profiles(self.known, env)
        return self._keyed

    def facts(self, base_url: str | None, client: str, model: str) -> dict[str, Any]:
        """What is known of ``model`` at the provider whose endpoint ``base_url`` is (see
        :func:`~refagent.config.providers.known_facts`)."""
        return known_facts(self.known, base_url, client, model)
