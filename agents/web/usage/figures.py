"""Which charts the Usage page shows for a report, with their captions and descriptions."""

from __future__ import annotations

from decimal import Decimal

from django.utils.safestring import SafeString

from ...hosting import format_cost
from . import chart, report


def _tokens(count: int) -> str:
    return f"{count:,} tokens"


def charts(usage: report.Report) -> list[tuple[str, SafeString]]:
    """(caption, svg) of each chart: cost per day in each currency (tokens when nothing was
    priced), then tokens by user and by profile, since tokens compare across currencies and
    include unpriced runs. The svg's <title> repeats the caption for screen readers."""
    days = len(usage.days)
    figures: list[tuple[str, str, str, list[chart.Bar]]] = []
    for currency in usage.currencies:
        total = format_cost(usage.total.cost_in(currency), currency)
        figures.append(
            (
                f"cost-{currency.lower()}",
                f"Cost per day in {currency}",
                f"Total {total} over {days} days; runs without a price are not in this chart.",
                [
                    chart.Bar(
                        day.key, day.cost_in(currency), format_cost(day.cost_in(currency), currency)
                    )
                    for day in usage.days
                ],
            )
        )
    if not usage.priced:
        figures.append(
            (
                "tokens",
                "Tokens per day (no price set)",
                f"Total {_tokens(usage.total.tokens)} over {days} days.",
                [
                    chart.Bar(day.key, Decimal(day.tokens), _tokens(day.tokens))
                    for day in usage.days
                ],
            )
        )
    result = [
        (title, chart.columns(f"chart-{key}", title, desc, bars))
        for key, title, desc, bars in figures
    ]
    for key, title, groups in (
        ("users", "Tokens by user", usage.users),
        ("profiles", "Tokens by profile", usage.profiles),
    ):
        if groups:
            bars = [chart.Bar(g.key, Decimal(g.tokens), _tokens(g.tokens)) for g in groups]
            desc = f"{len(groups)} {key}, most tokens first."
            result.append((title, chart.bars(f"chart-{key}", title, desc, bars)))
    return result
