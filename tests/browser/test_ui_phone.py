"""Every page at phone width (390 px): nothing wider than the screen, nothing clipped."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000
PHONE = {"width": 390, "height": 844}
# A calculator expression long enough that its JSON would be clipped if it did not wrap.
LONG_SUM = "+".join(str(n) for n in range(1, 40))
NO_OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll('body *')].filter((el) => {
    const box = el.getBoundingClientRect();
    // Inside a scroll box (a wide table) is fine: the page itself does not overflow.
    return box.width > 0 && box.right > width + 1 && !el.closest('.table-scroll')
      && getComputedStyle(el).position !== 'fixed';
  }).map((el) => el.tagName + '.' + el.className);
  const clipped = [...document.querySelectorAll('pre')].filter(
    (el) => el.scrollWidth > el.clientWidth + 1).map((el) => el.textContent.slice(0, 40));
  return {scroll: document.documentElement.scrollWidth, width, wide, clipped};
}"""


def fits(page: Any) -> None:
    found = page.evaluate(NO_OVERFLOW)
    assert found["scroll"] <= found["width"], found
    assert found["wide"] == [] and found["clipped"] == [], found


def test_the_chat_monitor_run_and_sessions_pages_fit_a_phone(
    new_context: Any, live_url: str, login: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Phone", slug="phone", provider="demo", provider_settings={"delay": 0}
    )
    for position, (key, settings) in enumerate(
        [("demo_tools", {"tools": ["calculator"]}), ("tool_approval", {"tools": ["calculator"]})]
    ):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    session = ChatSession.objects.create(owner=staff_user, profile=profile, title="On a phone")
    page = new_context(viewport=PHONE).new_page()
    login(page, staff_user.username, password)
    expect(page.get_by_role("button", name="Log out")).to_be_in_viewport()
    fits(page)

    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.fill("[data-testid=message-form] textarea[name=text]", f"what is {LONG_SUM}?")
    page.click("[data-testid=message-form] button[type=submit]")
    expect(page.locator("#waiting [data-testid=approval-card]")).to_be_visible(timeout=RUN)
    page.evaluate("window.scrollTo(0, 0)")
    expect(page.get_by_role("button", name="Log out")).to_be_in_viewport()
    fits(page)

    page.goto(f"{live_url}/monitor/")
    page.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)
    expect(page.locator("#active-runs [data-testid=approval-card]")).to_be_visible()
    fits(page)
    page.locator("#active-runs [data-testid=approve]").click()
    expect(page.locator("#recent-runs [data-testid=monitor-row]")).to_have_count(1, timeout=RUN)
    fits(page)

    page.goto(f"{live_url}/runs/{Run.objects.get().request_id}/")
    expect(page.locator("[data-testid=turn]").first).to_be_visible()
    fits(page)
