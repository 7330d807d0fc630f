"""Usage of runs over a period, summed exactly (Decimal) by day, by user and by profile.

Costs add up per currency, never across currencies. A run without a price (its cost is
None) adds its tokens and counts as unpriced, so the tokens a price list misses stay visible.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from ...hosting import format_cost
from ...models import Run
from .period import Period

DEFAULT_CURRENCY = "USD"


@dataclass(slots=True)
class Usage:
    """What the runs of one group used: counts, tokens and cost per currency."""

    key: str  # the group: an ISO day, a username or a profile name; "" for the total
    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    unpriced_runs: int = 0
    unpriced_tokens: int = 0
    costs: dict[str, Decimal] = field(default_factory=dict)  # currency -> exact sum

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(
        self, input_tokens: int, output_tokens: int, cost: Decimal | None, currency: str
    ) -> None:
        self.runs += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if cost is None:
            self.unpriced_runs += 1
            self.unpriced_tokens += input_tokens + output_tokens
            return
        currency = currency or DEFAULT_CURRENCY
        self.costs[currency] = self.costs.get(currency, Decimal(0)) + cost

    def cost_in(self, currency: str) -> Decimal:
        return self.costs.get(currency, Decimal(0))

    @property
    def cost_label(self) -> str:
        """The costs for display, "$1.20 + 3.4000 EUR"; "no price set" when nothing was priced."""
        if not self.costs:
            return "no price set" if self.runs else "—"
        return " + ".join(
            format_cost(amount, currency) for currency, amount in sorted(self.costs.items())
        )


@dataclass(frozen=True, slots=True)
class Report:
    """A period's usage: every day of it (empty days too), each user and profile, the total."""

    period: Period
    days: list[Usage]
    users: list[Usage]  # most tokens first
    profiles: list[Usage]  # most tokens first
    total: Usage
    currencies: list[str]  # every currency a run was priced in, sorted

    @property
    def priced(self) -> bool:
        return bool(self.currencies)


def _rows(period: Period) -> Iterable[tuple[dt.datetime, str, str, int, int, Decimal | None, str]]:
    since, until = period.bounds()
    return (
        Run.objects.filter(created_at__gte=since, created_at__lt=until)
        .annotate(
            # The person who started the run; older rows without one belong to the owner.
            user_name=Coalesce(F("started_by__username"), F("session__owner__username")),
            profile_name=Coalesce(F("profile__name"), F("session__profile__name")),
        )
        .order_by()
        .values_list(
            "created_at",
            "user_name",
            "profile_name",
            "input_tokens",
            "output_tokens",
            "cost",
            "cost_currency",
        )
        .iterator(chunk_size=2000)
    )


def _ranked(groups: dict[str, Usage]) -> list[Usage]:
    return sorted(groups.values(), key=lambda usage: (-usage.tokens, usage.key))


def build(period: Period) -> Report:
    """The report of ``period``, from the Run rows created in it."""
    days = {day.isoformat(): Usage(day.isoformat()) for day in period.days}
    users: dict[str, Usage] = {}
    profiles: dict[str, Usage] = {}
    total = Usage("")
    zone = timezone.get_current_timezone()
    for created, user, profile, inputs, outputs, cost, currency in _rows(period):
        day = timezone.localtime(created, zone).date().isoformat()
        user = user or "(deleted user)"
        profile = profile or "(no profile)"
        for usage in (
            days[day],
            users.setdefault(user, Usage(user)),
            profiles.setdefault(profile, Usage(profile)),
            total,
        ):
            usage.add(inputs, outputs, cost, currency)
    return Report(
        period=period,
        days=list(days.values()),
        users=_ranked(users),
        profiles=_ranked(profiles),
        total=total,
        currencies=sorted(total.costs),
    )
