"""The monitor and the run page in a real browser, for runs that began before they were opened."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 30_000
LONG_PROMPT = " ".join(["a long sentence that keeps the model busy for a good while"] * 4)


def test_a_monitor_and_run_page_opened_mid_call_show_the_current_phase_calls_and_trace(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Slow", slug="slow-monitor", provider="demo", provider_settings={"delay": 0.08}
    )
    session = ChatSession.objects.create(owner=user, profile=profile)
    chat = new_context().new_page()
    login(chat, user.username, password)
    chat.goto(f"{live_url}/sessions/{session.pk}/")
    chat.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    chat.fill("[data-testid=message-form] textarea[name=text]", LONG_PROMPT)
    chat.click("[data-testid=message-form] button[type=submit]")
    expect(chat.locator("[data-testid=streaming-text]")).not_to_be_empty(timeout=SHORT)

    monitor = new_context().new_page()
    login(monitor, staff_user.username, password)
    monitor.goto(f"{live_url}/monitor/")
    monitor.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)
    run = Run.objects.get(session=session)
    row = monitor.locator(f"#active-runs [data-request-id='{run.request_id}']")
    expect(row).to_have_attribute("data-phase", "generating")
    expect(row.locator("[data-testid=monitor-iterations]")).to_have_text("1")

    monitor.goto(f"{live_url}/runs/{run.request_id}/")
    expect(monitor.locator("[data-testid=run-summary]")).to_contain_text("1 model call")
    turn = monitor.locator("[data-testid=turn][data-iteration='1']")
    expect(turn.locator("[data-testid=step][data-kind=model]")).to_have_attribute(
        "data-state", "running"
    )
    assert chat.locator("[data-testid=message][data-role=assistant]").count() == 0, (
        "the answer finished before the pages were checked: make the prompt longer"
    )
    # End the run here, so it does not finish during the next test on the shared server.
    chat.click("[data-testid=stop]")
    expect(chat.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "cancelled", timeout=RUN
    )


def test_staff_steer_and_cancel_a_run_from_its_monitor_row_and_see_the_outcome(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Slow", slug="slow-controls", provider="demo", provider_settings={"delay": 0.08}
    )
    ExtensionSetting.objects.create(profile=profile, key="steering", settings={}, position=0)
    session = ChatSession.objects.create(owner=user, profile=profile)
    monitor = new_context().new_page()
    login(monitor, staff_user.username, password)
    monitor.goto(f"{live_url}/monitor/")
    monitor.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)
    expect(monitor.locator("#active-runs [data-testid=empty-runs]")).to_be_visible()

    chat = new_context().new_page()
    login(chat, user.username, password)
    chat.goto(f"{live_url}/sessions/{session.pk}/")
    chat.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    chat.fill("[data-testid=message-form] textarea[name=text]", LONG_PROMPT)
    chat.click("[data-testid=message-form] button[type=submit]")

    row = monitor.locator("#active-runs [data-testid=monitor-row]")
    expect(row).to_have_count(1, timeout=SHORT)
    expect(monitor.locator("#active-runs [data-testid=empty-runs]")).to_be_hidden()
    row.locator("[data-testid=monitor-steer] input[name=text]").fill("mention the sea")
    row.locator("[data-testid=monitor-steer] button").click()
    reply = monitor.locator("[data-testid=control-reply]")
    expect(reply).to_have_attribute("data-action", "steer", timeout=SHORT)
    expect(reply).to_have_attribute("data-reply", "accepted")
    steering = chat.locator("#transcript [data-testid=message][data-role=user]").nth(1)
    expect(steering).to_contain_text("mention the sea", timeout=RUN)

    request_id = row.get_attribute("data-request-id")
    row.locator("[data-testid=monitor-cancel] button").click()
    # this run's row: an earlier test's run may still end meanwhile on the shared server
    finished = monitor.locator(f"#recent-runs #run-{request_id}")
    expect(finished).to_have_attribute("data-status", "cancelled", timeout=RUN)
    expect(finished.locator("[data-testid=monitor-outcome]")).to_have_text("stopped")
    expect(monitor.locator("#active-runs [data-testid=empty-runs]")).to_be_visible()
    expect(chat.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "cancelled", timeout=RUN
    )


def test_monitor_filters_by_status_agent_and_user(
    page: Any, live_url: str, login: Any, user: Any, other_user: Any, staff_user: Any, password: str
) -> None:
    from django.utils import timezone

    helper = AgentProfile.objects.create(name="Helper", slug="helper-f", provider="demo")
    coder = AgentProfile.objects.create(name="Coder", slug="coder-f", provider="demo")
    for owner, profile, status in [
        (user, helper, "completed"),
        (user, coder, "failed"),
        (other_user, helper, "cancelled"),
    ]:
        session = ChatSession.objects.create(owner=owner, profile=profile)
        Run.objects.create(
            session=session, profile=profile, input_text="x", status=status,
            finished_at=timezone.now(),
        )  # fmt: skip
    login(page, staff_user.username, password)
    page.goto(f"{live_url}/monitor/")
    page.wait_for_selector("#recent-runs[data-snapshot]", state="attached", timeout=SHORT)
    rows = page.locator("#recent-runs [data-testid=monitor-row]")
    expect(rows).to_have_count(3)

    def shown() -> list[tuple[str, str, str]]:
        visible = page.locator("#recent-runs [data-testid=monitor-row]:visible")
        return sorted(
            (
                visible.nth(i).get_attribute("data-user") or "",
                visible.nth(i).get_attribute("data-profile") or "",
                visible.nth(i).get_attribute("data-status") or "",
            )
            for i in range(visible.count())
        )

    page.fill("#filter-user", "ALI")
    assert shown() == [("alice", "Coder", "failed"), ("alice", "Helper", "completed")]
    page.fill("#filter-profile", "help")
    assert shown() == [("alice", "Helper", "completed")]
    page.click("#monitor-filters button[type=reset]")
    page.select_option("#filter-status", "cancelled")
    assert [who for who, _, _ in shown()] == [other_user.username]
