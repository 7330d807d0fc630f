"""What people do with messages: copy one, edit and resend a question, regenerate an answer."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, Message

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000


def test_copy_edit_and_resend_and_regenerate_work_on_the_transcript(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Echo", slug="echo-actions", provider="demo", provider_settings={"delay": 0}
    )
    session = ChatSession.objects.create(owner=user, profile=profile)
    context = new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.fill("[data-testid=message-form] textarea[name=text]", "hello there")
    page.keyboard.press("Enter")
    status = page.locator("[data-testid=run-status]")
    expect(status).to_have_attribute("data-status", "completed", timeout=RUN)

    answer = page.locator("#transcript [data-testid=message][data-role=assistant]").last
    answer.get_by_role("button", name="Copy").click()
    expect(answer.get_by_role("button", name="Copy")).to_have_attribute("data-copied", "1")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == answer.locator("[data-testid=answer]").inner_text().strip()

    question = page.locator("#transcript [data-testid=message][data-role=user]").first
    question.get_by_role("button", name="Edit and resend").click()
    box = page.locator("[data-testid=message-form] textarea[name=text]")
    expect(box).to_have_value("hello there")
    expect(box).to_be_focused()
    page.keyboard.type(", again")
    page.keyboard.press("Enter")
    users = page.locator("#transcript [data-testid=message][data-role=user]")
    expect(users).to_have_count(2, timeout=RUN)
    expect(status).to_have_attribute("data-status", "completed", timeout=RUN)

    page.locator("#transcript [data-testid=message][data-role=assistant]").last.get_by_role(
        "button", name="Regenerate"
    ).click()
    expect(users).to_have_count(3, timeout=RUN)
    expect(status).to_have_attribute("data-status", "completed", timeout=RUN)
    sent = list(
        Message.objects.filter(session=session, role="user")
        .order_by("seq")
        .values_list("content", flat=True)
    )
    assert sent == ["hello there", "hello there, again", "hello there, again"]
