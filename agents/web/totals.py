"""The monitor's totals over the active runs: how many, their tokens and their cost so far.

Built from the same run rows the monitor's table shows (``hosting.run_row``), so the totals
and the rows never disagree. Costs add up per currency from the rows' exact Decimal strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..hosting import format_cost


@dataclass(slots=True)
class ActiveTotals:
    """What the active runs used so far."""

    runs: int = 0
    tokens: int = 0
    estimated: bool = False  # some run is streaming: its output is an estimate until it ends
    unpriced_runs: int = 0
    costs: dict[str, Decimal] = field(default_factory=dict)  # currency -> exact sum

    @property
    def label(self) -> str:
        """Such as "2 active runs · ≈ 1,234 tokens · $0.0123 · 1 with no price set"."""
        if not self.runs:
            return "No active run."
        parts = [
            f"{self.runs} active run{'s' if self.runs != 1 else ''}",
            f"{'≈ ' if self.estimated else ''}{self.tokens:,} tokens",
        ]
        if self.costs:
            parts.append(
                " + ".join(
                    format_cost(amount, currency) for currency, amount in sorted(self.costs.items())
                )
            )
        if self.unpriced_runs:
            parts.append(f"{self.unpriced_runs} with no price set")
        return " · ".join(parts)


def active_totals(rows: Iterable[Mapping[str, Any]]) -> ActiveTotals:
    """The totals of ``rows`` (the monitor rows of the active runs)."""
    totals = ActiveTotals()
    for row in rows:
        usage = row.get("usage") or {}
        totals.runs += 1
        totals.tokens += int(usage.get("total_tokens") or 0)
        totals.estimated = totals.estimated or bool(usage.get("estimated"))
        cost = usage.get("cost")
        if cost is None:
            totals.unpriced_runs += 1
            continue
        currency = usage.get("currency") or "USD"
        totals.costs[currency] = totals.costs.get(currency, Decimal(0)) + Decimal(cost)
    return totals
