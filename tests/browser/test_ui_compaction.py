"""Compact conversation in the browser: the button, the divider, the summary behind it."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000


def _compaction_profile(slug: str) -> AgentProfile:
    profile = AgentProfile.objects.create(
        name="Echo", slug=slug, provider="demo", provider_settings={"delay": 0}
    )
    ExtensionSetting.objects.create(
        profile=profile,
        key="summary_compaction",
        settings={"auto": "never", "keep_last_messages": 2},
    )
    return profile


def _two_exchanges(page: Any) -> None:
    status = page.locator("[data-testid=run-status]")
    box = page.locator("[data-testid=message-form] textarea[name=text]")
    for text in ("first question", "second question"):
        box.fill(text)
        page.keyboard.press("Enter")
        expect(page.locator("#transcript [data-role=user]", has_text=text)).to_have_count(
            1, timeout=RUN
        )
        expect(status).to_have_attribute("data-status", "completed", timeout=RUN)


def test_compacting_shows_a_divider_whose_summary_expands_live_and_after_reload(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=_compaction_profile("echo-compact"))
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    status = page.locator("[data-testid=run-status]")
    _two_exchanges(page)

    page.get_by_role("button", name="Compact conversation").click()
    divider = page.locator("#transcript [data-testid=compaction-divider]")
    expect(divider).to_have_count(1, timeout=RUN)
    expect(divider.locator("summary")).to_have_text("2 earlier messages summarized")
    summary = divider.locator("[data-testid=compaction-summary]")
    expect(summary).to_be_hidden()
    divider.locator("summary").click()
    expect(summary).to_be_visible()
    expect(status).to_have_attribute("data-status", "completed", timeout=RUN)
    run = Run.objects.filter(session=session).order_by("-created_at").first()
    assert run is not None and run.kind == "compaction" and run.status == "completed"

    # The originals stay readable above the divider; the kept messages follow it.
    order = page.eval_on_selector_all(
        "#transcript > article",
        "items => items.map(i => i.dataset.role + ':' + i.innerText.slice(0, 40))",
    )
    roles = [entry.split(":", 1)[0] for entry in order]
    assert roles == ["user", "assistant", "summary", "user", "assistant"], order
    assert "first question" in order[0] and "second question" in order[3]

    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    divider = page.locator("#transcript [data-testid=compaction-divider]")
    expect(divider).to_have_count(1)
    divider.locator("summary").click()
    expect(divider.locator("[data-testid=compaction-summary]")).to_be_visible()
    expect(divider.locator("[data-testid=compaction-summary]")).not_to_be_empty()


def test_the_compact_button_and_the_divider_have_no_serious_accessibility_violations(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=_compaction_profile("echo-a11y"))
    # axe is injected with evaluate, which the page's strict CSP would refuse.
    page = new_context(bypass_csp=True).new_page()
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    _two_exchanges(page)
    page.get_by_role("button", name="Compact conversation").click()
    divider = page.locator("#transcript [data-testid=compaction-divider]")
    expect(divider).to_have_count(1, timeout=RUN)
    divider.locator("summary").click()

    violations = Axe().run(page).response["violations"]
    assert [v["id"] for v in violations if v.get("impact") in {"serious", "critical"}] == []
