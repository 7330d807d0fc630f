"""The monitor's totals over the active runs: counts, tokens and cost per currency."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from agents.models import AgentProfile, ChatSession, Run, RunStatus
from agents.web.totals import active_totals


def _row(tokens: int, cost: str | None, currency: str = "", estimated: bool = False) -> dict:
    usage: dict[str, Any] = {"total_tokens": tokens, "cost": cost, "currency": currency}
    return {"request_id": f"r{tokens}", "usage": {**usage, "estimated": estimated}}


def test_totals_add_tokens_and_exact_costs_per_currency_and_count_unpriced_runs() -> None:
    totals = active_totals(
        [
            _row(1000, "0.0001", "USD"),
            _row(200, "0.00025", "USD"),
            _row(30, "1.5", "EUR"),
            _row(4, None),
        ]
    )
    assert (totals.runs, totals.tokens, totals.unpriced_runs) == (4, 1234, 1)
    assert totals.costs == {"USD": Decimal("0.00035"), "EUR": Decimal("1.5")}
    assert totals.label == "4 active runs · 1,234 tokens · 1.50 EUR + $0.0004 · 1 with no price set"


def test_a_streaming_run_makes_the_tokens_an_estimate() -> None:
    totals = active_totals([_row(12, None, estimated=True)])
    assert totals.label == "1 active run · ≈ 12 tokens · 1 with no price set"


def test_no_active_run_says_so() -> None:
    assert active_totals([]).label == "No active run."


@pytest.mark.django_db
def test_the_monitor_page_shows_the_totals_of_the_active_runs_under_their_table(
    client: Client, user: Any, staff_user: Any
) -> None:
    profile = AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")
    for index, (status, tokens, cost) in enumerate(
        [
            (RunStatus.RUNNING, 300, "0.002"),
            (RunStatus.WAITING, 40, None),
            (RunStatus.COMPLETED, 9, "5"),
        ]
    ):
        Run.objects.create(
            session=ChatSession.objects.create(owner=user, profile=profile), profile=profile,
            input_text=str(index), status=status, input_tokens=tokens,
            cost=None if cost is None else Decimal(cost), cost_currency="USD" if cost else "",
        )  # fmt: skip
    client.force_login(staff_user)
    page = client.get("/monitor/").content.decode()
    cell = re.search(r'data-testid="active-totals"[^>]*>([^<]*)<', page).group(1)
    assert cell == "2 active runs · 340 tokens · $0.0020 · 1 with no price set"
    assert (
        page.index('id="active-runs"')
        < page.index('id="active-totals"')
        < page.index("recent-runs")
    )
