"""The staff Usage page: who reaches it, the sums it shows, its period, chart and CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import AgentProfile, ChatSession, Run, RunStatus
from agents.web.usage import chart, export, period, report

pytestmark = pytest.mark.django_db

DAY = dt.date(2026, 3, 10)
QUERY = "?start=2026-03-04&end=2026-03-10"
HOSTILE = "<script>alert(1)</script>"


def _at(day: dt.date, hour: int = 12) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour), tzinfo=dt.UTC)


@pytest.fixture
def known_runs(user: Any) -> dict[str, Any]:
    """Four runs in the week to DAY (USD, EUR and one unpriced) and one long before it."""
    hostile = get_user_model().objects.create_user(username=HOSTILE, password="x-unused-x")
    helper = AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")
    formula = AgentProfile.objects.create(name='=HYPERLINK("http://x")', slug="f", provider="demo")
    mine = ChatSession.objects.create(owner=user, profile=helper)
    theirs = ChatSession.objects.create(owner=hostile, profile=formula)

    def run(
        session: ChatSession,
        who: Any,
        when: dt.datetime,
        tokens: tuple[int, int],
        cost: str | None,
        currency: str = "",
    ) -> Run:
        return Run.objects.create(
            session=session, profile=session.profile, started_by=who, input_text="hi",
            status=RunStatus.COMPLETED, input_tokens=tokens[0], output_tokens=tokens[1],
            cost=None if cost is None else Decimal(cost), cost_currency=currency,
            created_at=when,
        )  # fmt: skip

    run(mine, user, _at(DAY - dt.timedelta(days=1)), (100, 50), "0.0123", "USD")
    run(mine, user, _at(DAY, 9), (200, 100), "1.5", "USD")
    run(theirs, hostile, _at(DAY, 10), (10, 5), "2.25", "EUR")
    run(theirs, hostile, _at(DAY, 11), (1000, 0), None)
    run(mine, user, _at(DAY - dt.timedelta(days=40)), (7, 7), "9", "USD")  # outside the period
    return {"hostile": hostile, "formula": formula}


def _staff(client: Client, staff_user: Any) -> Client:
    client.force_login(staff_user)
    return client


# Access


@pytest.mark.parametrize("path", ["/usage/", "/usage/csv/"])
def test_usage_sends_anonymous_visitors_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("path", ["/usage/", "/usage/csv/"])
def test_usage_is_forbidden_to_users_who_are_not_staff(
    client: Client, user: Any, path: str
) -> None:
    client.force_login(user)
    assert client.get(path).status_code == 403


def test_nav_links_usage_for_staff_only(client: Client, user: Any, staff_user: Any) -> None:
    client.force_login(user)
    assert 'href="/usage/"' not in client.get("/").content.decode()
    client.force_login(staff_user)
    assert 'href="/usage/"' in client.get("/").content.decode()


# Aggregation


def test_report_sums_per_currency_and_counts_unpriced_runs(known_runs: dict[str, Any]) -> None:
    usage = report.build(period.Period(DAY - dt.timedelta(days=6), DAY))
    total = usage.total
    assert (total.runs, total.input_tokens, total.output_tokens) == (4, 1310, 155)
    assert total.costs == {"USD": Decimal("1.5123"), "EUR": Decimal("2.25")}
    assert all(isinstance(amount, Decimal) for amount in total.costs.values())
    assert (total.unpriced_runs, total.unpriced_tokens) == (1, 1000)
    assert usage.currencies == ["EUR", "USD"]
    assert [day.key for day in usage.days] == [
        (DAY - dt.timedelta(days=offset)).isoformat() for offset in range(6, -1, -1)
    ]
    by_day = {day.key: day for day in usage.days}
    assert by_day["2026-03-10"].runs == 3
    assert by_day["2026-03-10"].costs == {"USD": Decimal("1.5"), "EUR": Decimal("2.25")}
    assert by_day["2026-03-09"].costs == {"USD": Decimal("0.0123")}
    assert by_day["2026-03-08"].runs == 0
    assert [(u.key, u.tokens, u.unpriced_runs) for u in usage.users] == [
        (HOSTILE, 1015, 1),
        ("alice", 450, 0),
    ]
    assert [(p.key, p.runs) for p in usage.profiles] == [
        ('=HYPERLINK("http://x")', 2),
        ("Helper", 2),
    ]


def test_usage_page_shows_totals_per_currency_and_unpriced_tokens(
    client: Client, staff_user: Any, known_runs: dict[str, Any]
) -> None:
    response = _staff(client, staff_user).get("/usage/" + QUERY)
    assert response.status_code == 200
    page = response.content.decode()
    summary = re.search(r'data-testid="usage-summary">(.*?)</p>', page, re.S).group(1)
    assert "4 runs" in summary
    assert "1,465 tokens" in summary
    assert "2.25 EUR + $1.51" in summary
    assert "1 run with no price set (1,000 tokens)" in summary
    assert 'data-testid="usage-days"' in page
    assert 'data-testid="usage-users"' in page
    assert 'data-testid="usage-profiles"' in page


def test_a_period_without_prices_charts_tokens_and_says_no_price_set(
    client: Client, staff_user: Any, user: Any
) -> None:
    profile = AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")
    session = ChatSession.objects.create(owner=user, profile=profile)
    Run.objects.create(
        session=session, profile=profile, started_by=user, input_text="hi",
        input_tokens=30, output_tokens=12, created_at=_at(DAY),
    )  # fmt: skip
    page = _staff(client, staff_user).get("/usage/" + QUERY).content.decode()
    assert 'id="chart-tokens"' in page
    assert "chart-cost-" not in page
    assert "42 tokens · no price set" in page


# Period


def test_presets_end_today() -> None:
    today = dt.date(2026, 3, 10)
    assert period.parse({"period": "7d"}, today) == period.Period(dt.date(2026, 3, 4), today, "7d")
    assert period.parse({}, today).start == dt.date(2026, 2, 9)  # the 30-day default
    assert period.parse({"period": "month"}, today).start == dt.date(2026, 3, 1)
    assert period.parse({"start": "2026-03-01"}, today) == period.Period(dt.date(2026, 3, 1), today)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"period": "forever"}, "Unknown period"),
        ({"start": "10/03/2026"}, "not a date like"),
        ({"start": "2026-03-01", "end": "2026-02-30"}, "end date '2026-02-30' is not a date"),
        ({"end": "2026-03-01"}, "needs a start date"),
        ({"start": "2026-03-10", "end": "2026-03-01"}, "before the start date"),
        ({"start": "2024-01-01", "end": "2026-03-01"}, "at most 366 days"),
    ],
)
def test_bad_periods_are_refused_with_a_clear_message(params: dict[str, str], message: str) -> None:
    with pytest.raises(period.PeriodError, match=re.escape(message)):
        period.parse(params, dt.date(2026, 3, 10))


def test_usage_page_answers_a_bad_period_with_400_and_the_reason(
    client: Client, staff_user: Any
) -> None:
    response = _staff(client, staff_user).get("/usage/?start=2026-03-10&end=2026-03-01")
    assert response.status_code == 400
    assert "The end date is before the start date." in response.content.decode()
    assert client.get("/usage/csv/?period=forever").status_code == 400


# Chart


def test_chart_is_an_accessible_svg_with_escaped_labels(
    client: Client, staff_user: Any, known_runs: dict[str, Any]
) -> None:
    page = _staff(client, staff_user).get("/usage/" + QUERY).content.decode()
    assert "<script>alert" not in page
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == 4  # cost per day in EUR and in USD, tokens by user and by profile
    for svg in svgs:
        assert 'role="img"' in svg
        ids = re.search(r'aria-labelledby="([^"]+)"', svg).group(1).split()
        assert [f'<title id="{ids[0]}">' in svg, f'<desc id="{ids[1]}">' in svg] == [True, True]
    users = next(svg for svg in svgs if 'id="chart-users"' in svg)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;: 1,015 tokens" in users
    assert 'id="chart-cost-usd"' in page and 'id="chart-cost-eur"' in page


def test_columns_scale_the_largest_value_to_the_full_height() -> None:
    svg = chart.columns(
        "c",
        "t",
        "d",
        [
            chart.Bar("2026-03-09", Decimal("0.5"), "$0.50"),
            chart.Bar("2026-03-10", Decimal("2"), "$2.00"),
            chart.Bar("2026-03-11", Decimal("0"), "$0.00"),
        ],
    )
    heights = [int(h) for h in re.findall(r'<rect [^>]*height="(\d+)"', svg)]
    assert heights == [chart.COLUMN_PLOT_HEIGHT // 4, chart.COLUMN_PLOT_HEIGHT, 0]
    assert "max $2.00" in svg


# CSV


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_csv_cells_that_a_spreadsheet_would_evaluate_become_text(text: str) -> None:
    assert export.safe_cell(text) == "'" + text


def test_csv_cells_that_are_plain_stay_as_they_are() -> None:
    assert [export.safe_cell(value) for value in ("alice", 12, "1.5", "a=b")] == [
        "alice", "12", "1.5", "a=b",
    ]  # fmt: skip


def test_csv_download_has_every_group_exact_costs_and_escaped_names(
    client: Client, staff_user: Any, known_runs: dict[str, Any]
) -> None:
    response = _staff(client, staff_user).get("/usage/csv/" + QUERY)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="usage-2026-03-04-2026-03-10.csv"' in response["Content-Disposition"]
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert lines[0] == [
        "group", "key", "runs", "input_tokens", "output_tokens", "total_tokens",
        "unpriced_runs", "cost_EUR", "cost_USD",
    ]  # fmt: skip
    rows = {(line[0], line[1]): line[2:] for line in lines[1:]}
    assert len([key for key in rows if key[0] == "day"]) == 7
    assert rows[("day", "2026-03-10")] == ["3", "1210", "105", "1315", "1", "2.25", "1.5"]
    assert rows[("day", "2026-03-08")] == ["0", "0", "0", "0", "0", "0", "0"]
    assert rows[("user", HOSTILE)] == ["2", "1010", "5", "1015", "1", "2.25", "0"]
    assert rows[("profile", '\'=HYPERLINK("http://x")')][0] == "2"
    assert rows[("total", "")] == ["4", "1310", "155", "1465", "1", "2.25", "1.5123"]
