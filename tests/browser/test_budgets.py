"""Budgets in a real browser: the stopped answer and its reason in the chat and the monitor,
and a refused start that says when the cap resets."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run, UserBudget

pytestmark = pytest.mark.browser


def _open_chat_and_send(page: Any, live_url: str, session: ChatSession, text: str) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached")
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def test_a_run_stopped_by_a_budget_says_which_in_the_chat_and_on_the_monitor(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Budgeted", slug="budgeted", provider="demo",
        provider_settings={"delay": 0.01, "reply_words": 300}, max_tokens_per_run=120,
    )  # fmt: skip
    ExtensionSetting.objects.create(profile=profile, key="budget", settings={})
    session = ChatSession.objects.create(owner=user, profile=profile, title="Budget chat")
    operator = new_context().new_page()
    login(operator, staff_user.username, password)
    operator.goto(f"{live_url}/monitor/")
    operator.wait_for_selector("#active-runs[data-snapshot]", state="attached")

    chat = new_context().new_page()
    login(chat, user.username, password)
    _open_chat_and_send(chat, live_url, session, "<b>tell</b> me everything")

    notice = chat.locator("[data-testid=run-notice][data-status=budget_exceeded]")
    notice.wait_for(timeout=20_000)
    text = notice.inner_text()
    assert text.startswith("Run stopped by a budget: Budget exceeded: the run's token budget")
    assert "(120 tokens) was crossed while the answer streamed" in text
    mark = chat.locator("[data-testid=partial-mark]")
    assert mark.inner_text() == "stopped by a budget before the answer was complete"
    assert chat.locator("b", has_text="tell").count() == 0  # the echoed input stays text

    run = Run.objects.get(session=session)
    row = operator.locator(f"#recent-runs #run-{run.request_id}[data-status=budget_exceeded]")
    row.wait_for(timeout=20_000)
    assert row.locator("[data-testid=monitor-outcome]").inner_text() == "budget exceeded"
    assert "the run's token budget (120 tokens)" in row.inner_text()


def test_a_user_over_the_daily_cap_is_told_why_and_when_it_resets(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(name="Capped", slug="capped", provider="demo")
    session = ChatSession.objects.create(owner=user, profile=profile)
    Run.objects.create(
        session=session, profile=profile, started_by=user, input_text="earlier",
        status="completed", cost=Decimal("2"), cost_currency="USD",
    )  # fmt: skip
    UserBudget.objects.create(user=user, daily_cost_cap=Decimal("1"))
    login(page, user.username, password)

    _open_chat_and_send(page, live_url, session, "hello")

    reply = page.locator("[data-testid=control-reply][data-reply=rejected]")
    reply.wait_for()
    text = reply.inner_text()
    assert "alice's daily cost cap (1) is used up (2 spent)" in text
    assert "It resets at" in text and "00:00 UTC" in text
    assert Run.objects.filter(session=session).count() == 1
