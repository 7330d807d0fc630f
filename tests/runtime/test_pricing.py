"""Cost arithmetic: exact Decimals, cached input charged once, reasoning inside output."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.runtime import ModelUsage
from agents.runtime.pricing import TokenPrices, estimate_tokens, pattern_matches, specificity

PRICES = TokenPrices(
    input=Decimal("3"),
    output=Decimal("15"),
    cache_read=Decimal("0.30"),
    cache_write=Decimal("3.75"),
)


def test_plain_usage_costs_input_and_output_at_their_prices_exactly() -> None:
    cost = PRICES.cost(ModelUsage(input_tokens=1_000, output_tokens=500))
    # 1000 * 3 / 1e6 + 500 * 15 / 1e6 = 0.003 + 0.0075; a float would not give this exactly.
    assert cost == Decimal("0.0105") and isinstance(cost, Decimal)


def test_cached_input_is_charged_once_at_the_cache_prices() -> None:
    usage = ModelUsage(
        input_tokens=10_000, output_tokens=0, cache_read_tokens=8_000, cache_write_tokens=1_000
    )
    # 1000 uncached at 3, 8000 read at 0.30, 1000 written at 3.75 (per million).
    assert PRICES.cost(usage) == Decimal("0.003") + Decimal("0.0024") + Decimal("0.00375")


def test_reasoning_tokens_are_part_of_output_not_an_extra_charge() -> None:
    with_reasoning = ModelUsage(input_tokens=0, output_tokens=2_000, reasoning_tokens=1_500)
    assert PRICES.cost(with_reasoning) == PRICES.cost(ModelUsage(0, 2_000)) == Decimal("0.03")


def test_cache_prices_default_to_the_input_price() -> None:
    prices = TokenPrices(input=Decimal("2"), output=Decimal("8"))
    cached = ModelUsage(input_tokens=1_000, output_tokens=0, cache_read_tokens=600)
    assert prices.cost(cached) == prices.cost(ModelUsage(1_000, 0)) == Decimal("0.002")


def test_prices_must_be_non_negative_decimals() -> None:
    with pytest.raises(ValueError):
        TokenPrices(input=3.0, output=Decimal(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TokenPrices(input=Decimal(-1), output=Decimal(1))


def test_patterns_match_exactly_or_as_globs_and_exact_names_win() -> None:
    assert pattern_matches("gpt-4o", "gpt-4o") and not pattern_matches("gpt-4o", "gpt-4o-mini")
    assert pattern_matches("gpt-4o*", "gpt-4o-mini")
    assert specificity("gpt-4o-mini") > specificity("gpt-4o*") > specificity("gpt-*")


def test_the_live_estimate_is_about_four_characters_a_token() -> None:
    assert (estimate_tokens(""), estimate_tokens("abcd"), estimate_tokens("abcde")) == (0, 1, 2)
