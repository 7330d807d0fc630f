"""Prices per million tokens and the cost of a usage under them, in Decimal only.

A usage follows ModelUsage's normalisation: ``input_tokens`` is every prompt token and
the cache parts are inside it, ``output_tokens`` includes reasoning. So the cost charges
the uncached input at the input price, each cache part at its own price (the input price
when none is set), and all output, reasoning included, at the output price: no token is
charged twice. Results keep full precision; rounding is for display only.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fnmatch import fnmatchcase

from .model import ModelUsage

MILLION = Decimal(1_000_000)


@dataclass(slots=True, frozen=True)
class TokenPrices:
    """Prices per million tokens of one model, in one currency."""

    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None  # None: cache reads cost what input costs
    cache_write: Decimal | None = None  # None: cache writes cost what input costs
    currency: str = "USD"

    def __post_init__(self) -> None:
        for price in (self.input, self.output, self.cache_read, self.cache_write):
            if price is not None and (not isinstance(price, Decimal) or price < 0):
                raise ValueError("prices are non-negative Decimals")

    def cost(self, usage: ModelUsage) -> Decimal:
        """What ``usage`` costs, exactly."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        per_million = (
            usage.uncached_input_tokens * self.input
            + (usage.cache_read_tokens or 0) * read
            + (usage.cache_write_tokens or 0) * write
            + usage.output_tokens * self.output
        )
        return per_million / MILLION

    def output_cost(self, tokens: int) -> Decimal:
        """What ``tokens`` generated tokens cost (the live estimate of a streaming call)."""
        return tokens * self.output / MILLION


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of how many tokens ``text`` is: about four characters each."""
    return tokens_of_chars(len(text))


def tokens_of_chars(chars: int) -> int:
    """The token estimate of ``chars`` characters of text."""
    return (chars + 3) // 4


def pattern_matches(pattern: str, model_name: str) -> bool:
    """True when ``pattern`` (an exact name or a glob such as ``gpt-4o*``) names the model."""
    if any(ch in pattern for ch in "*?["):
        return fnmatchcase(model_name, pattern)
    return pattern == model_name


def specificity(pattern: str) -> tuple[int, int]:
    """Sort key preferring exact names, then the longest literal part of a glob."""
    literal = sum(1 for ch in pattern if ch not in "*?[]")
    return (0 if any(ch in pattern for ch in "*?[") else 1, literal)
