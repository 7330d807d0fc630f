"""The Usage page in a real browser: staff reach it from the nav, see the chart and the table,
and download the CSV; the page reports no CSP violation and a hostile name stays text."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, Run, RunStatus

pytestmark = pytest.mark.browser

HOSTILE = "<img src=x onerror=window.__pwned=1>"
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (event) => {
  window.__violations.push(event.effectiveDirective + ' ' + (event.blockedURI || 'inline'));
});
"""


def test_staff_see_the_usage_chart_and_table_and_download_the_csv(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    hostile = get_user_model().objects.create_user(username=HOSTILE, password=password)
    profile = AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")
    for owner, tokens, cost in ((user, (120, 30), "0.25"), (hostile, (40, 10), None)):
        Run.objects.create(
            session=ChatSession.objects.create(owner=owner, profile=profile), profile=profile,
            started_by=owner, input_text="hi", status=RunStatus.COMPLETED,
            input_tokens=tokens[0], output_tokens=tokens[1],
            cost=None if cost is None else Decimal(cost), cost_currency="USD" if cost else "",
            created_at=timezone.now(),
        )  # fmt: skip
    page = new_context(accept_downloads=True).new_page()
    page.add_init_script(RECORD_VIOLATIONS)
    login(page, staff_user.username, password)

    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("heading", name="Usage")).to_be_visible()
    chart = page.locator("svg#chart-cost-usd")
    expect(chart).to_be_visible()
    assert chart.get_attribute("role") == "img"
    assert chart.locator("rect").count() == 30  # one bar per day of the default 30 days
    expect(page.get_by_test_id("usage-summary")).to_contain_text("200 tokens · $0.2500")
    users = page.get_by_test_id("usage-users")
    expect(users.locator("tbody tr")).to_have_count(2)
    expect(users).to_contain_text(HOSTILE)  # shown as text, never parsed as markup
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__violations") == []

    with page.expect_download() as download_info:
        page.get_by_test_id("usage-csv").click()
    download = download_info.value
    assert download.suggested_filename.startswith("usage-")
    lines = list(csv.reader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert lines[0][-1] == "cost_USD"
    assert lines[-1] == ["total", "", "2", "160", "40", "200", "1", "0.25"]


def test_a_user_who_is_not_staff_has_no_usage_link_and_is_refused(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    login(page, user.username, password)
    expect(page.get_by_role("link", name="Usage")).to_have_count(0)
    assert page.goto(f"{live_url}/usage/").status == 403
