"""What a session's model responses cost: tokens in context and the cumulative price, reported to the
client as ``usage_update`` after each response."""

from __future__ import annotations

from typing import TYPE_CHECKING

from refagent.acp import updates
from refagent.llm.profiles import ModelProfile

if TYPE_CHECKING:  # an annotation: a session is made (session/new) long before its first model response
    from refagent.llm.protocol import Usage


class UsageMeter:
    """Adds up a session's cost (in the profile's currency) across its turns and profiles."""

    def __init__(self) -> None:
        self.cost = 0.0

    def update(self, usage: Usage, profile: ModelProfile) -> dict[str, object]:
        """The ``usage_update`` for one response: the tokens it used of the profile's context window and,
        when the profile has prices, the session's cost so far."""
        cost: tuple[float, str] | None = None
        if profile.input_price is not None or profile.output_price is not None:
            self.cost += usage.prompt_tokens * (profile.input_price or 0.0)
            self.cost += usage.completion_tokens * (profile.output_price or 0.0)
            cost = (round(self.cost, 6), profile.currency)
        used = usage.prompt_tokens + usage.completion_tokens
        return updates.usage(used, profile.context_window, cost)
