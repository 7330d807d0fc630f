"""Accessibility in a real browser: axe-core finds no serious violation on the main pages."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000
SERIOUS = {"serious", "critical"}


def serious_violations(page: Any) -> list[str]:
    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): "
        + "; ".join(f"{n['target'][0]} {n.get('failureSummary', '')[-90:]}" for n in v["nodes"][:6])
        for v in results.response["violations"]
        if v.get("impact") in SERIOUS
    ]


def test_chat_monitor_and_run_pages_have_no_serious_accessibility_violations(
    new_context: Any, live_url: str, login: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="A11y", slug="a11y", provider="demo", provider_settings={"delay": 0}
    )
    for position, (key, settings) in enumerate(
        [("demo_tools", {"tools": ["calculator"]}), ("tool_approval", {"tools": ["calculator"]})]
    ):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    session = ChatSession.objects.create(owner=staff_user, profile=profile, title="Checked")
    # axe is injected with evaluate, which the page's strict CSP would refuse.
    page = new_context(bypass_csp=True).new_page()
    found: dict[str, list[str]] = {}
    login(page, staff_user.username, password)
    found[page.url] = serious_violations(page)

    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.fill("[data-testid=message-form] textarea[name=text]", "what is 6*7?")
    page.click("[data-testid=message-form] button[type=submit]")
    expect(page.locator("#waiting [data-testid=approval-card]")).to_be_visible(timeout=RUN)
    found[page.url] = serious_violations(page)

    page.goto(f"{live_url}/monitor/")
    page.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)
    expect(page.locator("#active-runs [data-testid=approval-card]")).to_be_visible()
    found[page.url] = serious_violations(page)
    page.locator("#active-runs [data-testid=approve]").click()
    expect(page.locator("#recent-runs [data-testid=monitor-row]")).to_have_count(1, timeout=RUN)
    found[page.url] = serious_violations(page)

    page.goto(f"{live_url}/runs/{Run.objects.get().request_id}/")
    expect(page.locator("[data-testid=turn]").first).to_be_visible()
    found[page.url] = serious_violations(page)
    assert {url: problems for url, problems in found.items() if problems} == {}


def test_an_approval_is_reachable_and_operable_from_the_keyboard_alone(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Keys", slug="keys-a11y", provider="demo", provider_settings={"delay": 0}
    )
    for position, (key, settings) in enumerate(
        [("demo_tools", {"tools": ["calculator"]}), ("tool_approval", {"tools": ["calculator"]})]
    ):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    session = ChatSession.objects.create(owner=user, profile=profile)
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.keyboard.type("what is 6*7?")  # the box has focus on load
    page.keyboard.press("Enter")
    approve = page.locator("#waiting [data-testid=approve]")
    expect(approve).to_be_visible(timeout=RUN)
    for _ in range(40):
        if page.evaluate("document.activeElement?.dataset?.testid") == "approve":
            break
        page.keyboard.press("Tab")
    expect(approve).to_be_focused()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")  # focus is visible
    page.keyboard.press("Enter")
    expect(page.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
