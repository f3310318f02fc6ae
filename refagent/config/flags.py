"""The command line and the environment: the flags :func:`add_arguments` adds to a parser, and the
environment variables the configuration reads (:func:`env_value`: an empty or blank value counts as unset).

Flags: ``--config``, ``--profile``, ``--model``, ``--base-url``, ``--max-requests``. Variables:
``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``REFAGENT_MODEL``, ``HARBOR_ACP_REQUESTED_MODEL``,
``REFAGENT_PROFILE``, ``REFAGENT_MAX_REQUESTS``, and ``REFAGENT_CONFIG`` (:mod:`refagent.config.file`); the
providers' key variables are :mod:`refagent.config.providers`'. A flag wins over its variable, which wins over the
file (:mod:`refagent.config.loading` combines them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from refagent.config.file import CONFIG_ENV

if TYPE_CHECKING:  # annotations: argparse is imported where a parser is built, not to answer an editor
    import argparse

__all__ = [
    "BASE_URL_ENV",
    "HARBOR_MODEL_ENV",
    "KEY_ENV",
    "MAX_REQUESTS_ENV",
    "MODEL_ENV",
    "PROFILE_ENV",
    "Flags",
    "add_arguments",
    "env_value",
    "positive_int",
]

KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
MODEL_ENV = "REFAGENT_MODEL"
HARBOR_MODEL_ENV = "HARBOR_ACP_REQUESTED_MODEL"
"""The model a benchmark harness that runs any ACP agent asks for (Harbor's ACP runner), ``provider/model``;
below ``REFAGENT_MODEL``."""
PROFILE_ENV = "REFAGENT_PROFILE"
MAX_REQUESTS_ENV = "REFAGENT_MAX_REQUESTS"


def add_arguments(parser: argparse.ArgumentParser, *, strict: bool = False) -> None:
    """Add ``--config``, ``--profile``, ``--model``, ``--base-url`` and ``--max-requests`` to ``parser``.

    ``strict``: ``--max-requests`` below 1 is bad usage, rejected by the parser (``refagent run``). The agent
    itself is not strict: an editor would only see it crash, so :func:`refagent.config.load` raises
    :class:`~refagent.errors.ConfigError` instead, which the agent reports at the first prompt.
    """
    group = parser.add_argument_group("model")
    group.add_argument(
        "--config",
        metavar="PATH",
        help=f"the config file (default: ${CONFIG_ENV}, else config.toml in the user config directory)",
    )
    group.add_argument("--profile", metavar="ID", help=f"the model profile to use (default: ${PROFILE_ENV})")
    group.add_argument(
        "--model",
        metavar="NAME",
        help=f"the model to ask, or provider/model (anthropic/claude-sonnet-4-5; default: ${MODEL_ENV})",
    )
    group.add_argument("--base-url", metavar="URL", help=f"an OpenAI-compatible endpoint (default: ${BASE_URL_ENV})")
    group.add_argument(
        "--max-requests",
        metavar="N",
        type=positive_int if strict else int,
        help="model requests per prompt turn (default: 50)",
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number, at least 1."""
    import argparse  # here: loaded by the parser that calls this; the first answer is made without it (1.8 ms)

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class Flags(NamedTuple):
    """The :func:`add_arguments` flags of a parsed command line; an empty one counts as not given. (A named
    tuple: a frozen dataclass takes a millisecond to create, on the way to the editor's first answer.)"""

    config: str | None = None
    profile: str | None = None
    model: str | None = None
    base_url: str | None = None
    max_requests: int | None = None

    @classmethod
    def of(cls, args: argparse.Namespace | None) -> Flags:
        """The flags of ``args``, which may be ``None`` or lack some of them (another program's parser)."""
        if args is None:
            return cls()
        values = {name: getattr(args, name, None) for name in cls._fields}
        return cls(**{name: None if value == "" else value for name, value in values.items()})


def env_value(env: Mapping[str, str], name: str) -> str | None:
    """``env[name]`` stripped; ``None`` when it is missing, empty or blank."""
    value = env.get(name, "").strip()
    return value or None
