"""The chat follows new content while its reader is at the bottom, and offers a jump otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 30_000
LONG_PROMPT = " ".join(f"word{i}" for i in range(160))
AT_BOTTOM = """() => {
  const doc = document.documentElement;
  return window.innerHeight + window.scrollY >= doc.scrollHeight - 48;
}"""


def chat_page(new_context: Any, live_url: str, login: Any, user: Any, password: str) -> Any:
    profile = AgentProfile.objects.create(
        name="Scroll", slug="scroll", provider="demo", provider_settings={"delay": 0.03}
    )
    session = ChatSession.objects.create(owner=user, profile=profile)
    page = new_context(viewport={"width": 640, "height": 480}).new_page()
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.fill("[data-testid=message-form] textarea[name=text]", LONG_PROMPT)
    page.click("[data-testid=message-form] button[type=submit]")
    return page


def test_a_reader_at_the_bottom_follows_the_answer_and_keeps_the_message_box_in_view(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    page = chat_page(new_context, live_url, login, user, password)
    expect(page.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
    assert page.evaluate("document.documentElement.scrollHeight > window.innerHeight * 1.5")
    assert page.evaluate(AT_BOTTOM)
    expect(page.locator("[data-testid=message-form] textarea")).to_be_in_viewport()
    expect(page.locator("[data-testid=jump-latest]")).to_be_hidden()


def test_a_reader_who_scrolled_up_keeps_their_place_and_can_jump_to_the_latest(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    page = chat_page(new_context, live_url, login, user, password)
    page.wait_for_function(
        "() => document.documentElement.scrollHeight > window.innerHeight * 1.2", timeout=RUN
    )
    page.evaluate("window.scrollTo(0, 0)")
    jump = page.locator("[data-testid=jump-latest]")
    expect(jump).to_be_visible(timeout=SHORT)
    assert page.evaluate("window.scrollY") == 0
    expect(page.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
    assert page.evaluate("window.scrollY") == 0
    jump.click()
    page.wait_for_function(AT_BOTTOM, timeout=SHORT)
    expect(jump).to_be_hidden()
    expect(page.locator("[data-testid=message-form] textarea")).to_be_focused()
