"""What a session's model responses cost: tokens in context and the cumulative price, reported to the
client as ``usage_update`` after each response; and a turn's tokens, for the prompt response's ``usage``.

Prices are per token, from the profile: input tokens read from the provider's cache at
``cached_input_price``, those written to it at ``cache_write_price`` (each the input price when the profile
names none), the rest of the input at ``input_price`` and the output at ``output_price``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from refagent.acp import updates
from refagent.llm.profiles import ModelProfile

if TYPE_CHECKING:  # an annotation: a session is made (session/new) long before its first model response
    from refagent.llm.protocol import Usage


class UsageMeter:
    """Adds up a session's cost (in the profile's currency) across its turns and profiles."""

    def __init__(self) -> None:
        self.cost = 0.0
        self.used = 0
        """The tokens in the session's context after its last response."""

    def update(self, usage: Usage, profile: ModelProfile) -> dict[str, object]:
        """The ``usage_update`` for one response: the tokens it used of the profile's context window and,
        when the profile has prices, the session's cost so far."""
        self.used = usage.prompt_tokens + usage.completion_tokens
        return updates.usage(self.used, profile.context_window, self._cost(usage, profile))

    def add_child(self, usage: Usage, profile: ModelProfile) -> dict[str, object]:
        """The ``usage_update`` for one response of a subagent: its cost joins the session's, and the
        context in use stays the session's own (the subagent's conversation is not in it)."""
        return updates.usage(self.used, profile.context_window, self._cost(usage, profile))

    def _cost(self, usage: Usage, profile: ModelProfile) -> tuple[float, str] | None:
        """The session's cost so far with ``usage`` added, when the profile has prices."""
        if profile.input_price is None and profile.output_price is None:
            return None
        self.cost += price(usage, profile)
        return (round(self.cost, 6), profile.currency)


def price(usage: Usage, profile: ModelProfile) -> float:
    """What ``usage`` costs at ``profile``'s prices (see the module docstring)."""
    full = profile.input_price or 0.0
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
    read_price = full if profile.cached_input_price is None else profile.cached_input_price
    write_price = full if profile.cache_write_price is None else profile.cache_write_price
    return (
        (usage.prompt_tokens - cached - written) * full
        + cached * read_price
        + written * write_price
        + usage.completion_tokens * (profile.output_price or 0.0)
    )


def turn_usage(used: Sequence[Usage]) -> dict[str, int] | None:
    """The prompt response's ``usage`` (unstable in ACP) for a turn's responses; None when none said."""
    if not used:
        return None
    inputs = sum(u.prompt_tokens for u in used)
    outputs = sum(u.completion_tokens for u in used)
    return {
        "totalTokens": inputs + outputs,
        "inputTokens": inputs,
        "outputTokens": outputs,
        "thoughtTokens": sum(u.reasoning_tokens for u in used),
        "cachedReadTokens": sum(u.cached_tokens for u in used),
        "cachedWriteTokens": sum(u.cache_write_tokens for u in used),
    }
