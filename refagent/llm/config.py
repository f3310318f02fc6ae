"""Configuration: which model profiles exist, which one is the default, and how hard a turn may try.

Sources, in rising priority:

1. a TOML file: ``--config PATH``, else ``$REFAGENT_CONFIG``, else ``config.toml`` in
   ``platformdirs.user_config_dir("refagent")`` (``~/.config/refagent/config.toml`` on Linux). A missing
   default file is fine; a missing file that was named explicitly is an error;
2. the environment: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``REFAGENT_MODEL``, ``REFAGENT_PROFILE``,
   ``REFAGENT_MAX_REQUESTS`` (empty values count as unset);
3. command-line flags (:func:`add_arguments`): ``--profile``, ``--model``, ``--base-url``, ``--max-requests``.

The file::

    default_profile = "work"      # else the first profile
    max_requests = 50             # model requests per prompt turn
    tools = ["outline:Outline"]   # custom tools, "module:Class" (refagent.tools.custom)
    tool_path = ["tools"]         # where their modules are, relative to this file (default: none)

    [retry]                       # transient failures (429, 5xx, lost connections)
    attempts = 4                  # total, the first included
    base_delay = 1.0              # seconds; doubled each time, with jitter

    [profiles.work]               # the id shown in the editor's model picker
    base_url = "https://api.example.com/v1"   # default: OpenAI's
    api_key_env = "EXAMPLE_API_KEY"           # or api_key = "..." (api_key = "": no key needed)
    model = "gpt-4.1"             # default: the first model the endpoint lists
    name = "Work: GPT-4.1"        # display name (default: the model and host)
    context_window = 1047576
    images = true
    input_price = 2.0             # per million tokens (stored per token in ModelProfile)
    output_price = 8.0
    currency = "USD"
    reasoning_effort = ["low", "medium", "high"]   # the efforts the model accepts, in order (default: none)
    default_reasoning_effort = "medium"            # default: "medium" if listed, else the first

Reasoning effort: a profile whose model takes one lists the levels it accepts (non-empty strings, no
duplicates, as the provider spells them: OpenAI's are ``minimal``, ``low``, ``medium``, ``high``); the session
offers them, and the chosen one is sent as the Chat Completions ``reasoning_effort``; a profile without the
key sends none. ``default_reasoning_effort`` must be one of the levels; without it, ``"medium"`` (most providers'
own default) when listed, else the first level.

How the layers combine:

- With profiles in the file, the active profile is ``--profile``, else ``$REFAGENT_PROFILE``, else
  ``default_profile``, else the first; ``OPENAI_BASE_URL``/``--base-url`` and ``REFAGENT_MODEL``/``--model``
  override its ``base_url`` and ``model`` (flags over environment over file).
- With no profiles in the file, any of ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``REFAGENT_MODEL``,
  ``--model``, ``--base-url`` forms one profile: ``openai`` when it talks to OpenAI (default model
  :data:`DEFAULT_OPENAI_MODEL`), ``custom`` otherwise (default model: the first the endpoint lists, which
  suits local servers that serve one model). ``OPENAI_API_KEY`` alone is enough; ``OPENAI_BASE_URL``
  alone, pointing at this machine, too (local endpoints need no key).
- With nothing at all, the only profile is the built-in scripted one.

Keys: a profile's ``api_key``, else the variable its ``api_key_env`` names. A profile with neither reads
``OPENAI_API_KEY`` when it talks to OpenAI or its ``base_url`` came from ``OPENAI_BASE_URL``/``--base-url``
(the pairing every OpenAI tool uses), and nothing otherwise: an OpenAI key is never sent to another host
by accident. :func:`missing_key` says what to set when a key is needed and missing.

Custom tools: each ``tools`` entry names a :class:`~refagent.tools.base.BaseTool` subclass, imported (from
the interpreter's path, then ``tool_path``) and instantiated with no arguments when the first session
opens, not here; a tool that cannot be used is left out and reported (:mod:`refagent.tools.custom`).

Works with a trimmed environment (no ``HOME``, as some ACP clients start agents): without a usable
config directory there is simply no default file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refagent.errors import ConfigError
from refagent.llm.profiles import (
    OPENAI_BASE_URL,
    SCRIPTED,
    ModelProfile,
    is_local,
    missing_key,
    scripted_profile,
)

if TYPE_CHECKING:
    from refagent.llm.protocol import ModelClient
    from refagent.llm.retry import RetryPolicy

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "Config",
    "add_arguments",
    "default_config_path",
    "load",
    "make_model",
    "missing_key",
]

log = logging.getLogger(__name__)

DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
"""The model of a profile formed from ``OPENAI_API_KEY`` alone: cheap, fast, good at tool calls, 1M context."""
CONFIG_ENV = "REFAGENT_CONFIG"
KEY_ENV = "OPENAI_API_KEY"
PER_MILLION = 1_000_000

_TOP_KEYS = frozenset({"default_profile", "max_requests", "retry", "profiles", "tools", "tool_path"})
_RETRY_KEYS = {"attempts": int, "base_delay": float, "max_delay": float, "max_retry_after": float}
_PROFILE_KEYS: dict[str, type] = {
    "base_url": str,
    "api_key": str,
    "api_key_env": str,
    "model": str,
    "name": str,
    "description": str,
    "context_window": int,
    "images": bool,
    "input_price": float,
    "output_price": float,
    "currency": str,
    "needs_key": bool,
}
_REASONING_KEYS = frozenset({"reasoning_effort", "default_reasoning_effort"})
PREFERRED_REASONING_EFFORT = "medium"
"""The default reasoning effort when a profile lists it and names no ``default_reasoning_effort``."""


@dataclass(frozen=True)
class Config:
    """The loaded configuration. ``profiles`` is never empty and contains ``default_profile``."""

    profiles: list[ModelProfile]
    default_profile: str
    max_requests: int | None = None
    """Model requests per prompt turn; ``None``: the turn's default."""
    retry: RetryPolicy | None = None
    """How the model adapter retries transient failures; ``None``: its defaults."""
    path: Path | None = None
    """The config file that was read, if any."""
    warnings: list[str] = field(default_factory=list)
    """Things worth telling the user (unknown keys...); they are also logged."""
    tools: list[str] = field(default_factory=list)
    """Custom tools, ``module:Class`` each, as written (checked when imported, not here)."""
    tool_path: list[Path] = field(default_factory=list)
    """Absolute directories to import custom tools from (after the interpreter's own path)."""

    @property
    def profile(self) -> ModelProfile:
        """The default profile."""
        return next(p for p in self.profiles if p.id == self.default_profile)

    def make_model(self, profile: ModelProfile) -> ModelClient:
        """:func:`make_model` with this configuration's retry policy."""
        return make_model(profile, retry=self.retry)


def add_arguments(parser: argparse.ArgumentParser, *, strict: bool = False) -> None:
    """Add ``--config``, ``--profile``, ``--model``, ``--base-url`` and ``--max-requests`` to ``parser``.

    ``strict``: ``--max-requests`` below 1 is bad usage, rejected by the parser (``refagent run``). The agent
    itself is not strict: an editor would only see it crash, so :func:`load` raises :class:`ConfigError`
    instead, which the agent reports at the first prompt.
    """
    group = parser.add_argument_group("model")
    group.add_argument(
        "--config",
        metavar="PATH",
        help=f"the config file (default: ${CONFIG_ENV}, else config.toml in the user config directory)",
    )
    group.add_argument("--profile", metavar="ID", help="the model profile to use (default: $REFAGENT_PROFILE)")
    group.add_argument("--model", metavar="NAME", help="the model to ask (default: $REFAGENT_MODEL)")
    group.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")
    group.add_argument(
        "--max-requests",
        metavar="N",
        type=positive_int if strict else int,
        help="model requests per prompt turn (default: 50)",
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def default_config_path() -> Path | None:
    """``config.toml`` in the user config directory, or ``None`` when there is no usable one."""
    try:
        import platformdirs

        directory = Path(platformdirs.user_config_dir("refagent"))
    except Exception as exc:  # a trimmed environment: no HOME, no passwd entry...
        log.debug("no user config directory: %s", exc)
        return None
    # Without HOME, expanduser() can leave "~" in place: a relative path would depend on the cwd.
    return directory / "config.toml" if directory.is_absolute() else None


def load(args: argparse.Namespace | None, env: Mapping[str, str]) -> Config:
    """Load the configuration from the file, ``env`` and ``args`` (see the module docstring).

    ``args`` may be ``None`` or lack some of the :func:`add_arguments` flags. Warnings (unknown keys) are
    logged and kept in :attr:`Config.warnings`. Raises :class:`ConfigError` for a malformed file, an explicit
    file that does not exist, a value of the wrong type, or an unknown profile. Custom tools are only
    listed here, never imported.
    """
    flags = _Flags.of(args)
    path, explicit = _choose_path(flags.config, env)
    data = _read(path, explicit) if path is not None else None
    warnings: list[str] = []
    source = str(path) if data is not None else "the config file"
    file_profiles: list[ModelProfile] = []
    retry = None
    max_requests: int | None = None
    default_id: str | None = None
    tools: list[str] = []
    tool_path: list[Path] = []
    if data is not None:
        warnings += [f"{source}: unknown key {k!r} (ignored)" for k in data if k not in _TOP_KEYS]
        default_id = _typed(data, "default_profile", str, source)
        max_requests = _typed(data, "max_requests", int, source)
        retry = _retry(data.get("retry"), source, warnings)
        file_profiles = _profiles(data.get("profiles"), source, env, warnings)
        assert path is not None  # data came from it
        tools = _strings(data, "tools", source)
        tool_path = _directories(_strings(data, "tool_path", source), path, source, warnings)
    for warning in warnings:
        log.warning("%s", warning)

    base_url = flags.base_url or _env(env, "OPENAI_BASE_URL")
    model = flags.model or _env(env, "REFAGENT_MODEL")
    wanted = flags.profile or _env(env, "REFAGENT_PROFILE") or default_id
    if file_profiles:
        profiles = file_profiles
    elif base_url or model or _env(env, KEY_ENV):
        profiles = [_env_profile(base_url, model, env)]
        base_url = model = None  # used up
    else:
        profiles = [scripted_profile()]
    if wanted == SCRIPTED and not profiles[0].scripted:
        profiles.append(scripted_profile())  # asked for by name: the offline model stays reachable
    active = _find(profiles, wanted or profiles[0].id, source)
    if not active.scripted and (base_url or model):
        overridden = replace(active, base_url=base_url or active.base_url, model=model or active.model)
        if base_url and overridden.api_key is None and not overridden.api_key_env:
            # An endpoint from OPENAI_BASE_URL/--base-url pairs with OPENAI_API_KEY, as in every OpenAI tool.
            overridden = replace(overridden, api_key=_env(env, KEY_ENV), api_key_env=KEY_ENV, api_key_from=KEY_ENV)
        profiles = [overridden if p.id == active.id else p for p in profiles]
    profiles = [_named(p) for p in profiles]
    default = active.id

    env_max = _env(env, "REFAGENT_MAX_REQUESTS")
    if flags.max_requests is not None:
        max_requests = flags.max_requests
    elif env_max is not None:
        try:
            max_requests = int(env_max)
        except ValueError:
            raise ConfigError(f"REFAGENT_MAX_REQUESTS must be a whole number, not {env_max!r}") from None
    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"max_requests must be at least 1, not {max_requests}")
    return Config(
        profiles,
        default,
        max_requests,
        retry,
        path if data is not None else None,
        warnings,
        tools=tools,
        tool_path=tool_path,
    )


def make_model(profile: ModelProfile, *, retry: RetryPolicy | None = None) -> ModelClient:
    """The model client for ``profile``: the offline scripted model for the scripted profile, else an
    :class:`~refagent.llm.openai_client.OpenAIModel` (which imports ``openai`` only when first used).
    ``retry`` is a :class:`~refagent.llm.retry.RetryPolicy` (``None``: its defaults)."""
    if profile.scripted:
        from refagent.llm.scripted import offline_model

        return offline_model()
    from refagent.llm.openai_client import OpenAIModel

    return OpenAIModel(profile, retry=retry)


# -- helpers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Flags:
    config: str | None = None
    profile: str | None = None
    model: str | None = None
    base_url: str | None = None
    max_requests: int | None = None

    @classmethod
    def of(cls, args: argparse.Namespace | None) -> _Flags:
        if args is None:
            return cls()
        values = {name: getattr(args, name, None) for name in cls.__dataclass_fields__}
        return cls(**{name: None if value == "" else value for name, value in values.items()})


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def config_file(args: argparse.Namespace | None, env: Mapping[str, str]) -> Path | None:
    """The config file :func:`load` reads for ``args`` and ``env`` (it may not exist yet: ``refagent login``
    writes it); None when there is no user config directory and none was named."""
    return _choose_path(_Flags.of(args).config, env)[0]


def _choose_path(flag: str | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    explicit = flag or _env(env, CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser(), True
    return default_config_path(), False


def _read(path: Path, explicit: bool) -> dict[str, Any] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: no such config file") from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    import tomllib  # only when there is a file: one less import before the editor's first answer

    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _typed(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    """``table[key]`` checked against ``kind`` (an int is a fine float; a bool is not an int)."""
    value = table.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: {key} must be {_KIND_NAMES[kind]}, not {value!r}")
    return value


_KIND_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}


def _strings(table: Mapping[str, Any], key: str, where: str) -> list[str]:
    """``table[key]`` checked to be a list of strings (missing: empty)."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: {key} must be a list of strings, not {value!r}")
    return value


def _directories(entries: list[str], config_file: Path, where: str, warnings: list[str]) -> list[Path]:
    """``tool_path`` entries as absolute paths: ``~`` expanded, relative ones from the config file's directory."""
    directories = []
    for entry in entries:
        try:
            expanded = Path(entry).expanduser()
        except RuntimeError:  # "~" with no home directory (a trimmed environment)
            warnings.append(f"{where}: tool_path entry {entry!r}: no home directory to expand ~ in (ignored)")
            continue
        directories.append((config_file.parent / expanded).absolute())
    return directories


def _retry(table: Any, source: str, warnings: list[str]) -> RetryPolicy | None:
    if table is None:
        return None
    where = f"{source} [retry]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: retry must be a table ([retry])")
    warnings += [f"{where}: unknown key {k!r} (ignored)" for k in table if k not in _RETRY_KEYS]
    values = {k: _typed(table, k, kind, where) for k, kind in _RETRY_KEYS.items() if k in table}
    if values.get("attempts", 1) < 1:
        raise ConfigError(f"{where}: attempts must be at least 1")
    from refagent.llm.retry import RetryPolicy  # light: the standard library only

    return RetryPolicy(**values)


def _profiles(table: Any, source: str, env: Mapping[str, str], warnings: list[str]) -> list[ModelProfile]:
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
        known = _PROFILE_KEYS.keys() | _REASONING_KEYS
        warnings += [f"{where}: unknown key {k!r} (ignored)" for k in entry if k not in known]
        values = {k: _typed(entry, k, kind, where) for k, kind in _PROFILE_KEYS.items() if k in entry}
        values["reasoning_efforts"], values["default_reasoning_effort"] = _reasoning(entry, where)
        for price in ("input_price", "output_price"):
            if price in values:
                values[price] /= PER_MILLION
        base_url = values.get("base_url")
        key_env = values.get("api_key_env")
        if "api_key" not in values:
            if key_env is None and (base_url is None or _is_openai(base_url)):
                key_env = KEY_ENV
            values["api_key"] = _env(env, key_env) if key_env else None
            values["api_key_from"] = key_env or ""
        else:  # the file's key wins over its api_key_env
            values["api_key_from"] = f"`api_key` in {where}"
        values["api_key_env"] = key_env
        values.setdefault("name", "")  # named once flags and environment have had their say
        profiles.append(ModelProfile(id=profile_id, source=where, **values))
    return profiles


def _reasoning(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], str | None]:
    """A profile's ``reasoning_effort`` levels and its default level, checked (see the module docstring)."""
    levels = entry.get("reasoning_effort")
    default = _typed(entry, "default_reasoning_effort", str, where)
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


def _env_profile(base_url: str | None, model: str | None, env: Mapping[str, str]) -> ModelProfile:
    openai = base_url is None or _is_openai(base_url)
    model = model or (DEFAULT_OPENAI_MODEL if openai else "")
    return ModelProfile(
        id="openai" if openai else "custom",
        name="",
        model=model,
        base_url=base_url,
        api_key=_env(env, KEY_ENV),
        api_key_env=KEY_ENV,
        api_key_from=KEY_ENV,
        source="environment",
    )


def _find(profiles: list[ModelProfile], wanted: str, source: str) -> ModelProfile:
    for profile in profiles:
        if profile.id == wanted:
            return profile
    known = ", ".join(p.id for p in profiles)
    raise ConfigError(
        f"unknown model profile {wanted!r} (known: {known}); check default_profile in {source}, "
        "$REFAGENT_PROFILE and --profile"
    )


def _host(base_url: str | None) -> str:
    from urllib.parse import urlsplit

    return urlsplit(base_url or OPENAI_BASE_URL).netloc or str(base_url)


def _is_openai(base_url: str) -> bool:
    return _host(base_url).lower() == "api.openai.com"


def _named(profile: ModelProfile) -> ModelProfile:
    """``profile`` with a display name and description, if it has none, made from its id, model and endpoint."""
    name = profile.name
    if not name:
        where = f"{'local, ' if is_local(profile.base_url) else ''}{_host(profile.base_url)}"
        what = profile.model if profile.source == "environment" else f"{profile.id}: {profile.model}".rstrip(": ")
        name = f"{what or profile.id} ({where})"
    description = profile.description or f"{profile.model or 'the first model listed'} via {profile.endpoint}"
    return replace(profile, name=name, description=description)
