"""Model profiles: which endpoint, which model, and what it can do.

A profile is one entry of the editor's model picker (the ``model`` config option). The built-in
``scripted`` profile needs no endpoint: it is what refagent runs on when nothing is configured. Which kind
of model client a profile is for (:attr:`ModelProfile.client`) is a name, looked up when the client is made
(:mod:`refagent.config.clients`): nothing here knows the clients.
"""

from __future__ import annotations

from dataclasses import dataclass

SCRIPTED = "scripted"
"""The built-in profile's id, and the client kind of the offline scripted model."""
DEFAULT_CLIENT = "openai"
"""The client kind of a profile that names none: the OpenAI-compatible adapter."""
DEMO_CLIENT = "demo"
RESPONSES_CLIENT = "openai-responses"
"""The client kind of OpenAI's Responses API (the default on OpenAI's own host)."""
ANTHROPIC_CLIENT = "anthropic"
"""The client kind of Anthropic's Messages API."""
"""The client kind of the demo model (``refagent --demo``)."""
OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where a profile without ``base_url`` goes (the ``openai`` client's own default)."""
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""Where a profile of the ``anthropic`` kind without ``base_url`` goes."""


DEFAULT_WINDOW = 128_000
"""The context window of a profile that does not say (tokens)."""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    id: str
    name: str
    model: str = ""
    """The model name sent to the endpoint."""
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    """The environment variable the key was (or would be) read from, for error messages."""
    context_window: int = DEFAULT_WINDOW
    max_output_tokens: int | None = None
    """The most tokens one response may have (the Anthropic Messages API requires a limit: its client
    sends this, or its own default); ``None``: the model's own."""
    images: bool = False
    input_price: float | None = None
    """Price per input token, in ``currency``."""
    output_price: float | None = None
    cached_input_price: float | None = None
    """Price per input token read from the provider's prompt cache; ``None``: :attr:`input_price`."""
    cache_write_price: float | None = None
    """Price per input token written to the prompt cache (Anthropic charges more); ``None``: :attr:`input_price`."""
    currency: str = "USD"
    description: str = ""
    needs_key: bool | None = None
    """Whether the endpoint needs an API key; ``None``: decide from ``base_url`` (see :func:`needs_key`)."""
    reasoning_efforts: tuple[str, ...] = ()
    """The reasoning efforts the model accepts, in order (e.g. ``("low", "medium", "high")``), each sent as
    the Chat Completions ``reasoning_effort``; empty: the model takes none, and requests carry none."""
    default_reasoning_effort: str | None = None
    """One of :attr:`reasoning_efforts` (the config sets it whenever they are given); ``None`` when there are none."""
    source: str = ""
    """Where the profile was defined, for messages: ``"environment"``, or ``"<config file> [profiles.<id>]"``."""
    api_key_from: str = ""
    """Where :attr:`api_key` came from, for messages (the key itself is never shown): the environment
    variable's name, or ``"`api_key` in <config file> [profiles.<id>]"``; empty: :attr:`api_key_env`, if any."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers sent with every request, besides the key (an editor's routing, ``providers/set``); never
    logged or shown."""
    client: str = DEFAULT_CLIENT
    """The kind of model client that talks to the model (``client`` in the profile's table): a name in
    :mod:`refagent.config.clients`' registry (``openai``, ``scripted``, ``demo``, or a fork's own)."""

    @property
    def scripted(self) -> bool:
        return self.id == SCRIPTED

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (when the profile names none: Anthropic's for its kind, else OpenAI's)."""
        if self.base_url:
            return self.base_url
        return ANTHROPIC_BASE_URL if self.client == ANTHROPIC_CLIENT else OPENAI_BASE_URL


def scripted_profile() -> ModelProfile:
    return ModelProfile(
        id=SCRIPTED,
        name="Built-in scripted model (offline)",
        model=SCRIPTED,
        description="No model endpoint configured: a scripted model answers.",
        client=SCRIPTED,
    )


def is_local(base_url: str | None) -> bool:
    """Whether ``base_url`` points at this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if not base_url:
        return False
    # here: a profile with an endpoint only, not before every first answer: urllib.parse and ipaddress, 2.9 ms
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_openai_host(base_url: str | None) -> bool:
    """Whether ``base_url`` is OpenAI's own API (``None``: the default, so it is)."""
    return not base_url or _host(base_url) == "api.openai.com"


def is_openrouter(profile: ModelProfile) -> bool:
    """Whether ``profile`` talks to OpenRouter: its host, or the provider of that name (whose endpoint the
    configuration may have moved, to a proxy of one's own)."""
    return profile.id == "openrouter" or (profile.base_url is not None and _host(profile.base_url) == "openrouter.ai")


def _host(base_url: str) -> str:
    from urllib.parse import urlsplit  # here: as in is_local

    return (urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()


def needs_key(profile: ModelProfile) -> bool:
    """Whether requests need an API key.

    An explicit ``needs_key`` wins; ``api_key = ""`` means "none"; local endpoints (Ollama, LM Studio,
    llama.cpp, vLLM on this machine) need none; every other endpoint does. The scripted model needs none.
    """
    if profile.scripted:
        return False
    if profile.needs_key is not None:
        return profile.needs_key
    if profile.api_key == "":
        return False
    return not is_local(profile.base_url)


def key_hint(profile: ModelProfile) -> str:
    """What the user should set to give ``profile`` a key, as a phrase: "set the X environment variable"."""
    where = f"`api_key` or `api_key_env` in {profile.source}" if profile.source.endswith("]") else ""
    if profile.api_key_env:
        hint = f"set the {profile.api_key_env} environment variable"
        return f"{hint} (or {where})" if where else hint
    return f"set {where}" if where else "set the OPENAI_API_KEY environment variable"


def key_origin(profile: ModelProfile) -> str:
    """The key a request carried, named by where it came from: "the key from OPENAI_API_KEY"."""
    origin = profile.api_key_from or profile.api_key_env
    return f"the key from {origin}" if origin else "the API key"


def model_setting(profile: ModelProfile) -> str:
    """Where the user names ``profile``'s model, as a phrase: "`model` in <file> [profiles.x]"."""
    if profile.source == "environment":
        return "REFAGENT_MODEL (or --model)"
    if profile.source.endswith("]"):
        return f"`model` in {profile.source}"
    return "`model` in its profile, or REFAGENT_MODEL"


def missing_key(profile: ModelProfile) -> str | None:
    """A message for the user when ``profile`` needs an API key and has none; ``None`` when all is well."""
    if not needs_key(profile) or profile.api_key:
        return None
    hint = f"{key_hint(profile)}, or run `refagent login`"
    return f"The model profile {profile.id!r} ({profile.endpoint}) needs an API key: {hint}."
