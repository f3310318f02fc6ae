"""The kinds of model client a profile can name, and the one place a client is made from a profile.

A profile names its kind in the config file, ``client = "KIND"`` in its ``[profiles.NAME]`` table (default
``openai``), or in code, :attr:`~refagent.llm.profiles.ModelProfile.client`. The kinds are a registry of
factories, each a :class:`ClientKind`:

- ``openai`` (the default): :class:`~refagent.llm.openai_client.OpenAIModel`, for any OpenAI-compatible
  Chat Completions endpoint;
- ``openai-responses``: :class:`~refagent.llm.responses_client.ResponsesModel`, for OpenAI's Responses API
  (reasoning kept across the tool loop, summaries shown as thoughts);
- ``anthropic``: :class:`~refagent.llm.anthropic_client.AnthropicModel`, for Anthropic's Messages API (its
  key from ``ANTHROPIC_API_KEY`` on Anthropic's host);
- ``scripted``: the offline scripted model (:func:`refagent.llm.scripted.offline_model`), what refagent runs
  on when nothing is configured;
- ``demo``: the demo model of ``refagent demo`` (:func:`refagent.llm.demo.demo_model`).

A fork adds its own with :func:`register`, at import time of its entry point, before the configuration is
read (before :func:`refagent.cli.main`); the config file can then name it. A name that is not registered is
a :class:`~refagent.errors.ConfigError` when the file is read (:func:`find` says which kinds there are), and
a profile made in code with such a name gets a model whose every turn fails saying so
(:func:`make_model`), as for a broken configuration.

Nothing here imports a client: each factory imports its module when it is called (``openai`` costs most of
a second, and this module is read before the editor's first answer); a kind's :attr:`ClientKind.warm_up`
imports it ahead of time, once ``initialize`` is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from refagent.errors import ConfigError
from refagent.llm.profiles import (
    ANTHROPIC_CLIENT,
    DEFAULT_CLIENT,
    DEMO_CLIENT,
    RESPONSES_CLIENT,
    SCRIPTED,
    ModelProfile,
)

if TYPE_CHECKING:
    from refagent.llm.protocol import ModelClient
    from refagent.llm.retry import RetryPolicy

__all__ = ["ClientKind", "MakeClient", "find", "kinds", "make_model", "register", "warm_up_for"]

MakeClient: TypeAlias = Callable[[ModelProfile, "RetryPolicy | None"], "ModelClient"]
"""A factory: the client for a profile, with the configuration's retry policy (``None``: the client's own
defaults; a client that does not retry ignores it). Called once per profile and model: the client is
reused across turns and sessions (:class:`refagent.llm.pool.ModelPool`) and closed with ``aclose`` if it
has one."""


class ClientKind(NamedTuple):
    """One kind of model client: its name (what ``client =`` says) and how to make one. (A named tuple: a
    frozen dataclass takes a millisecond to create, and the registry is made on the way to the editor's
    first answer.)"""

    name: str
    make: MakeClient
    warm_up: Callable[[], Awaitable[None]] | None = None
    """Imports what the client needs ahead of its first request, in the background (never on the way to
    the editor's first answer); None: nothing worth it."""
    endpoint: bool = True
    """Whether the client talks to the profile's endpoint (``base_url``): then a profile may need a key
    (:func:`~refagent.llm.profiles.needs_key`) and is named after the endpoint's host. False (the scripted
    and demo models): a profile of the kind needs no key unless it says ``needs_key = true``."""
    key_env: str | None = None
    """The environment variable a profile of this kind reads its key from when it names neither ``api_key``
    nor ``api_key_env``, if its ``base_url`` is unset or on one of :attr:`key_hosts` (so that a provider's key
    never goes to another host by accident)."""
    key_hosts: frozenset[str] = frozenset()
    """The hosts (lower case) :attr:`key_env`'s key is meant for."""
    base_url_env: str | None = None
    """A variable that, when set, is the endpoint of a profile of this kind that names no ``base_url``
    (``ANTHROPIC_BASE_URL``, as Anthropic's own tools read it); its key variable's key goes there too."""


def _openai(profile: ModelProfile, retry: RetryPolicy | None) -> ModelClient:
    # here: this module is read before the first answer, the client only after session/new (14 ms, openai not yet)
    from refagent.llm.openai_client import OpenAIModel

    return OpenAIModel(profile, retry=retry)


def _responses(profile: ModelProfile, retry: RetryPolicy | None) -> ModelClient:
    from refagent.llm.responses_client import ResponsesModel  # here: as in _openai (its module and the Chat one's)

    return ResponsesModel(profile, retry=retry)


async def _warm_up_openai() -> None:
    from refagent.llm.openai_client import warm_up  # here: as in _openai, once the first answers are out (14 ms)

    await warm_up()


def _anthropic(profile: ModelProfile, retry: RetryPolicy | None) -> ModelClient:
    # here: this module is read before the first answer, the client only after session/new (httpx2 not yet)
    from refagent.llm.anthropic_client import AnthropicModel

    return AnthropicModel(profile, retry=retry)


async def _warm_up_anthropic() -> None:
    import anyio  # here: loaded by then (the agent runs on it), and this module is read before the first answer

    await anyio.to_thread.run_sync(_import_anthropic)  # the loop keeps serving the editor meanwhile


def _import_anthropic() -> None:
    from refagent.llm.anthropic_client import import_httpx  # here: in a worker thread, as in _anthropic (6 ms)

    import_httpx()  # ~50 ms


def _scripted(profile: ModelProfile, retry: RetryPolicy | None) -> ModelClient:
    from refagent.llm.scripted import offline_model  # here: not before the first answer (4.5 ms)

    return offline_model()


def _demo(profile: ModelProfile, retry: RetryPolicy | None) -> ModelClient:
    from refagent.llm.demo import demo_model  # here: the demo profile only (9.6 ms)

    return demo_model()


_KINDS: dict[str, ClientKind] = {
    kind.name: kind
    for kind in (
        ClientKind(
            DEFAULT_CLIENT,
            _openai,
            warm_up=_warm_up_openai,
            key_env="OPENAI_API_KEY",
            key_hosts=frozenset({"api.openai.com"}),
        ),
        ClientKind(
            RESPONSES_CLIENT,
            _responses,
            warm_up=_warm_up_openai,
            key_env="OPENAI_API_KEY",
            key_hosts=frozenset({"api.openai.com"}),
        ),
        ClientKind(
            ANTHROPIC_CLIENT,
            _anthropic,
            warm_up=_warm_up_anthropic,
            key_env="ANTHROPIC_API_KEY",
            key_hosts=frozenset({"api.anthropic.com"}),
            base_url_env="ANTHROPIC_BASE_URL",
        ),
        ClientKind(SCRIPTED, _scripted, endpoint=False),
        ClientKind(DEMO_CLIENT, _demo, endpoint=False),
    )
}


def register(kind: ClientKind, *, replace: bool = False) -> None:
    """Add ``kind`` to the registry, for profiles to name. Raises :class:`ValueError` for a name that is not
    a non-empty word of letters, digits, ``-`` and ``_``, or one that is taken, unless ``replace`` (a fork
    that swaps a built-in kind's client for its own)."""
    if not kind.name or not kind.name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a model client kind is named with letters, digits, - and _, not {kind.name!r}")
    if kind.name in _KINDS and not replace:
        raise ValueError(f"the model client kind {kind.name!r} is registered already (pass replace=True)")
    _KINDS[kind.name] = kind


def kinds() -> list[str]:
    """The registered kinds' names, sorted."""
    return sorted(_KINDS)


def find(name: str, where: str) -> ClientKind:
    """The kind called ``name``. Raises :class:`ConfigError` naming ``where`` (the profile's table) and the
    kinds there are, when there is none."""
    kind = _KINDS.get(name)
    if kind is None:
        raise ConfigError(
            f"{where}: unknown model client {name!r} (known: {', '.join(kinds())}); a fork adds its own with "
            "refagent.config.clients.register"
        )
    return kind


def make_model(profile: ModelProfile, retry: RetryPolicy | None = None) -> ModelClient:
    """The client for ``profile``, made by the factory of its kind (:attr:`ModelProfile.client`) with
    ``retry``. A kind that is not registered (a profile made in code: the config file's are checked when
    read) makes a model whose every turn fails with what is wrong, of kind ``config``, rather than raising
    where nobody reports it."""
    try:
        kind = find(profile.client, f"the model profile {profile.id!r}")
    except ConfigError as exc:
        from refagent.llm.scripted import broken_config_model  # here: a broken profile only (4.5 ms)

        return broken_config_model(str(exc))
    return kind.make(profile, retry)


def warm_up_for(profiles: Iterable[ModelProfile]) -> Callable[[], Awaitable[None]] | None:
    """What warms up the clients of ``profiles``' kinds (each kind's :attr:`ClientKind.warm_up` once, in
    turn); None when none of them has one."""
    found = [_KINDS[p.client].warm_up for p in profiles if p.client in _KINDS]
    steps = list(dict.fromkeys(step for step in found if step is not None))
    if not steps:
        return None

    async def warm_up() -> None:
        for step in steps:
            await step()

    return warm_up
