"""What a session's responses cost, cached tokens priced as cached, and a turn's ``usage``."""

from __future__ import annotations

import pytest

from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import Usage
from refagent.session.usage import UsageMeter, price, turn_usage

PER_MILLION = 1e-6
PRICED = ModelProfile(
    id="p",
    name="p",
    input_price=3 * PER_MILLION,
    output_price=15 * PER_MILLION,
    cached_input_price=0.3 * PER_MILLION,
    cache_write_price=3.75 * PER_MILLION,
)


def test_cached_and_written_tokens_have_their_own_prices() -> None:
    usage = Usage(1_000_000, 100_000, cached_tokens=800_000, cache_write_tokens=100_000)
    expected = 100_000 * 3 + 800_000 * 0.3 + 100_000 * 3.75 + 100_000 * 15
    assert price(usage, PRICED) == pytest.approx(expected * PER_MILLION)


def test_without_cache_prices_cached_tokens_cost_the_input_price() -> None:
    plain = ModelProfile(id="p", name="p", input_price=2 * PER_MILLION, output_price=8 * PER_MILLION)
    assert price(Usage(1000, 10, cached_tokens=900), plain) == pytest.approx((1000 * 2 + 10 * 8) * PER_MILLION)


def test_counts_a_provider_got_wrong_never_price_below_zero() -> None:
    """More cached than prompt tokens (a provider's mistake) is read as all of them cached, not negative."""
    assert price(Usage(100, 0, cached_tokens=500, cache_write_tokens=50), PRICED) == pytest.approx(100 * 0.3e-6)


def test_the_meter_adds_up_the_session_and_reports_the_context() -> None:
    meter = UsageMeter()
    meter.update(Usage(1_000_000, 0, cached_tokens=1_000_000), PRICED)
    update = meter.update(Usage(1_000_000, 0), PRICED)
    assert update["cost"] == {"amount": pytest.approx(3.3), "currency": "USD"}
    assert update["used"] == 1_000_000


def test_a_subagents_cost_joins_the_session_and_the_context_stays_the_sessions() -> None:
    meter = UsageMeter()
    meter.update(Usage(1000, 100), PRICED)
    child = meter.add_child(Usage(1_000_000, 0), PRICED)
    assert child["used"] == 1100  # the session's context, not the child's
    assert child["cost"] == {"amount": pytest.approx(3.0 + (1000 * 3 + 100 * 15) * PER_MILLION), "currency": "USD"}
    assert meter.update(Usage(2000, 0), PRICED)["cost"]["amount"] == pytest.approx(meter.cost, abs=1e-6)


def test_a_turns_usage_sums_its_responses() -> None:
    used = [Usage(100, 10, cache_write_tokens=90), Usage(120, 20, cached_tokens=90, reasoning_tokens=5)]
    assert turn_usage(used) == {
        "totalTokens": 250,
        "inputTokens": 220,
        "outputTokens": 30,
        "thoughtTokens": 5,
        "cachedReadTokens": 90,
        "cachedWriteTokens": 90,
    }
    assert turn_usage([]) is None


def test_a_turns_usage_is_what_the_unstable_schema_describes() -> None:
    """The stable schema leaves the prompt response open, so the check of every message does not look
    inside ``usage``: the unstable schema's PromptResponse does."""
    from tests.support.acp_schema import _check

    used = [Usage(1200, 40, cached_tokens=1024, cache_write_tokens=100, reasoning_tokens=12)]
    _check("PromptResponse", {"stopReason": "end_turn", "usage": turn_usage(used)}, "a prompt response", "unstable")
    with pytest.raises(AssertionError):
        _check("PromptResponse", {"stopReason": "end_turn", "usage": {"inputTokens": 1}}, "a broken one", "unstable")
