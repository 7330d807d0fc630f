"""The chat's message box in a real browser: what it sends while a run waits, and what it keeps."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Message, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 15_000
LONG_PROMPT = " ".join(["this sentence is long so the answer streams for a while"] * 4)


def make_profile(slug: str, *, delay: float = 0.02, **fields: Any) -> AgentProfile:
    """A demo-model profile with ask-user and steering, so questions and steering both exist."""
    profile = AgentProfile.objects.create(
        name=f"Composer {slug}", slug=slug, provider="demo", provider_settings={"delay": delay},
        **fields,
    )  # fmt: skip
    for position, key in enumerate(("ask_user", "steering")):
        ExtensionSetting.objects.create(profile=profile, key=key, settings={}, position=position)
    return profile


def open_chat(page: Any, live_url: str, session: ChatSession) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)


def box(page: Any) -> Any:
    return page.locator("[data-testid=message-form] textarea[name=text]")


def send(page: Any, text: str) -> None:
    box(page).fill(text)
    page.click("[data-testid=message-form] button[type=submit]")


def run_status(page: Any) -> Any:
    return page.locator("[data-testid=run-status]")


def test_text_typed_in_the_main_box_answers_the_open_question(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("answer-box"))
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, "ask: Which colour should the report use?")
    question = page.locator("#waiting [data-testid=question-card]")
    expect(question).to_have_count(1, timeout=RUN)
    expect(box(page)).to_have_attribute(
        "placeholder", "Answer the agent's question: Which colour should the report use?"
    )

    send(page, "teal, please")
    expect(run_status(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(question).to_have_count(0)
    expect(box(page)).to_have_value("")
    expect(box(page)).not_to_have_attribute(
        "placeholder", "Answer the agent's question: Which colour should the report use?"
    )
    card = page.locator("#transcript [data-testid=tool-card]")
    expect(card.locator("[data-testid=tool-result]")).to_have_text("teal, please")
    # The answer went to the question, not into the transcript as steering.
    [run] = Run.objects.filter(session=session)
    assert not Message.objects.filter(session=session, attributes__steering=True).exists()
    assert run.status == "completed"


def test_a_message_the_reject_policy_refuses_stays_in_the_box_beside_the_reason(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = make_profile("reject-box", delay=0.05, double_texting="reject")
    session = ChatSession.objects.create(owner=user, profile=profile)
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, LONG_PROMPT)
    expect(page.locator("[data-testid=streaming-text]")).not_to_be_empty(timeout=RUN)
    expect(box(page)).to_have_value("")  # the accepted first message emptied the box
    send(page, "my carefully written follow-up")
    reply = page.locator("[data-testid=control-reply]")
    expect(reply).to_have_attribute("data-reply", "rejected", timeout=SHORT)
    expect(reply).to_contain_text("wait for it to finish")
    expect(box(page)).to_have_value("my carefully written follow-up")
    expect(run_status(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(box(page)).to_have_value("my carefully written follow-up")


def test_enter_sends_shift_enter_breaks_the_line_and_stop_cancels_the_active_run(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("keys", delay=0.05))
    login(page, user.username, password)
    open_chat(page, live_url, session)
    stop = page.locator("[data-testid=stop]")
    expect(box(page)).to_be_focused()
    expect(stop).to_be_hidden()

    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type(LONG_PROMPT)
    expect(box(page)).to_have_value(f"first line\n{LONG_PROMPT}")
    page.keyboard.press("Enter")
    user_turn = page.locator("#transcript [data-testid=message][data-role=user]")
    expect(user_turn).to_have_count(1, timeout=SHORT)
    expect(box(page)).to_have_value("")
    expect(box(page)).to_be_focused()
    assert Message.objects.get(session=session, role="user").content.startswith("first line\n")

    expect(stop).to_be_visible(timeout=SHORT)
    stop.click()
    expect(run_status(page)).to_have_attribute("data-status", "cancelled", timeout=RUN)
    expect(stop).to_be_hidden()
    assert Run.objects.get(session=session).status == "cancelled"
