"""Usage in a real browser: the staff Usage page (chart, table, CSV), the quiet line under each
finished answer, and the monitor's totals of the active runs."""

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

from agents.hosting import format_cost
from agents.models import AgentProfile, ChatSession, ModelPrice, Run, RunStatus

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000

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


def test_a_finished_answer_shows_its_usage_line_live_and_after_a_reload(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Echo", slug="echo-usage", provider="demo", provider_settings={"delay": 0}
    )
    ModelPrice.objects.create(
        provider="demo", model_pattern="*", input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
    )  # fmt: skip
    session = ChatSession.objects.create(owner=user, profile=profile)
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.fill("[data-testid=message-form] textarea[name=text]", "hello there")
    page.keyboard.press("Enter")
    line = page.locator("#transcript [data-testid=answer-usage]")
    expect(line).to_have_count(1, timeout=RUN)
    run = Run.objects.get(session=session)
    expected = f"{run.input_tokens + run.output_tokens:,} tokens · {format_cost(run.cost, 'USD')}"
    expect(line).to_have_text(f"This answer used {expected}")
    # It sits right under the answer it belongs to.
    assert (
        page.evaluate(
            "() => document.querySelector('#transcript [data-testid=answer-usage]')"
            ".previousElementSibling.dataset.role"
        )
        == "assistant"
    )

    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    expect(line).to_have_count(1)
    expect(line).to_have_text(f"This answer used {expected}")


def test_the_monitor_totals_count_a_streaming_run_and_clear_when_it_ends(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Slow", slug="slow-usage", provider="demo",
        provider_settings={"delay": 0.05, "reply_words": 40},
    )  # fmt: skip
    session = ChatSession.objects.create(owner=user, profile=profile)
    monitor = new_context().new_page()
    login(monitor, staff_user.username, password)
    monitor.goto(f"{live_url}/monitor/")
    monitor.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)
    totals = monitor.get_by_test_id("active-totals")
    expect(totals).to_have_text("No active run.")

    chat = new_context().new_page()
    login(chat, user.username, password)
    chat.goto(f"{live_url}/sessions/{session.pk}/")
    chat.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    chat.fill("[data-testid=message-form] textarea[name=text]", "tell me a story")
    chat.keyboard.press("Enter")
    expect(totals).to_contain_text("1 active run · ", timeout=RUN)
    expect(totals).to_contain_text("no price set")
    expect(totals).to_have_text("No active run.", timeout=RUN)


def test_the_usage_page_has_no_serious_accessibility_violations(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    profile = AgentProfile.objects.create(name="Helper", slug="helper-a11y", provider="demo")
    Run.objects.create(
        session=ChatSession.objects.create(owner=user, profile=profile), profile=profile,
        started_by=user, input_text="hi", status=RunStatus.COMPLETED, input_tokens=10,
        output_tokens=5, cost=Decimal("0.5"), cost_currency="EUR", created_at=timezone.now(),
    )  # fmt: skip
    # axe is injected with evaluate, which the page's strict CSP would refuse.
    page = new_context(bypass_csp=True).new_page()
    login(page, staff_user.username, password)
    page.goto(f"{live_url}/usage/?period=7d")
    expect(page.locator("svg#chart-cost-eur")).to_be_visible()
    violations = [
        f"{v['id']}: {[n['target'][0] for n in v['nodes'][:4]]}"
        for v in Axe().run(page).response["violations"]
        if v.get("impact") in {"serious", "critical"}
    ]
    assert violations == []
