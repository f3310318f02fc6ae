"""refagent with a model client of its own: run this instead of ``refagent``.

    python examples/custom_model/agent.py [any refagent flag: --config, --profile, --log-file ...]

A model client is anything with ``stream(request)`` (:class:`refagent.llm.protocol.ModelClient`). This one,
:class:`EchoModel`, answers every prompt with the prompt's own text, so that the whole path can be seen
working without a key or a network; a real one talks to its API there (``refagent/llm/openai_client.py`` is
the model to follow: retries, cancellation that closes the HTTP stream, ``ModelError`` for what retrying
cannot fix).

The registration is one call, :func:`refagent.config.clients.register`, made before ``cli.main`` reads the
configuration; a profile of the config file then names the kind::

    [profiles.echo]
    client = "echo"
    model = "parrot"      # what EchoModel says its answers come from

and the rest is refagent's own command line, :func:`refagent.cli.main`, unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

from refagent import cli
from refagent.config.clients import ClientKind, register
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import Finished, ModelEvent, ModelRequest, TextDelta, Usage
from refagent.llm.retry import RetryPolicy


class EchoModel:
    """Answers each request with the text of its last user message, as ``<model>: <text>``."""

    def __init__(self, profile: ModelProfile) -> None:
        self.name = profile.model or "echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """One response: the text, the tokens it counted (words, here), and exactly one ``Finished``."""
        said = next((_text(m) for m in reversed(request.messages) if m.get("role") == "user"), "")
        yield TextDelta(f"{self.name}: {said}")
        yield Usage(prompt_tokens=len(said.split()), completion_tokens=len(said.split()) + 1)
        yield Finished("stop")


def _text(message: dict[str, object]) -> str:
    """A user message's text: its content is a string, or a list of parts (text, images, resources)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return " ".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def make_echo(profile: ModelProfile, retry: RetryPolicy | None) -> EchoModel:
    """The factory: one client per profile (refagent reuses it across turns); nothing to retry here."""
    return EchoModel(profile)


# endpoint=False: the model is in this process, so an "echo" profile needs no key and no base_url.
register(ClientKind("echo", make_echo, endpoint=False))

if __name__ == "__main__":
    sys.exit(cli.main())
