"""What the chat says about a run, in a real browser: in people's words, and never stale."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 20_000
LONG_PROMPT = " ".join(["this sentence is long so the answer streams for a while"] * 4)
INTERNAL_WORDS = ("loading_context", "running_tool", "message: accepted", "cancel stopped")


def make_profile(slug: str, *, delay: float = 0.02, approval: bool = False, **fields: Any) -> Any:
    profile = AgentProfile.objects.create(
        name=f"States {slug}", slug=slug, provider="demo", provider_settings={"delay": delay},
        **fields,
    )  # fmt: skip
    rows: list[tuple[str, dict[str, Any]]] = [("demo_tools", {"tools": ["calculator"]})]
    if approval:
        rows.append(("tool_approval", {"tools": ["calculator"], "timeout_seconds": 60}))
    for position, (key, settings) in enumerate(rows):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    return profile


def open_chat(page: Any, live_url: str, session: ChatSession) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)


def send(page: Any, text: str) -> None:
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def status_bar(page: Any) -> Any:
    return page.locator("[data-testid=run-status]")


def no_internal_words(page: Any) -> None:
    text = page.locator("main").inner_text()
    for word in INTERNAL_WORDS:
        assert word not in text


def test_a_tool_awaiting_approval_says_so_live_and_after_reload(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("await", approval=True))
    login(page, user.username, password)
    open_chat(page, live_url, session)
    send(page, "what is 6*7?")
    card = page.locator("#transcript [data-testid=tool-card]")
    expect(card).to_have_attribute("data-state", "awaiting", timeout=RUN)
    expect(card.locator("[data-testid=tool-state]")).to_have_text("awaiting approval")

    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    expect(card).to_have_attribute("data-state", "awaiting")
    expect(card.locator("[data-testid=tool-state]")).to_have_text("awaiting approval")
    no_internal_words(page)

    page.locator("#waiting [data-testid=approve]").click()
    expect(card).to_have_attribute("data-state", "ok", timeout=RUN)
    expect(card.locator("[data-testid=tool-state]")).to_have_text("done")


def test_streaming_shows_words_not_tokens_and_a_reload_keeps_the_last_outcome_and_usage(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("usage", delay=0.05))
    login(page, user.username, password)
    open_chat(page, live_url, session)
    send(page, LONG_PROMPT)
    expect(page.locator("[data-testid=streaming-text]")).not_to_be_empty(timeout=RUN)
    expect(page.locator("[data-testid=phase]")).to_have_text("writing")
    usage = page.locator("[data-testid=run-usage]")
    # Before the first delta the tokens are not counted yet; after it they are an estimate.
    expect(usage).to_contain_text(
        re.compile(r"tokens counted when the model call ends|≈ \d+ tokens")
    )
    expect(page.locator("[data-testid=control-reply]")).to_have_text("Sent.")
    expect(status_bar(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(usage).to_contain_text("last run completed")
    finished = usage.inner_text()
    assert " in / " in finished and "0 in / 0 out" not in finished

    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    expect(status_bar(page)).to_have_attribute("data-status", "completed")
    expect(usage).to_have_text(finished)
    no_internal_words(page)


def test_notices_go_away_once_they_stop_applying_and_a_queued_message_is_shown(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = make_profile("notices", delay=0.05, double_texting="queue")
    session = ChatSession.objects.create(owner=user, profile=profile)
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, "   ")  # passes the box's `required`, refused by the server
    error = page.locator("#errors [data-testid=frame-error]")
    expect(error).to_contain_text("must not be empty", timeout=SHORT)
    send(page, LONG_PROMPT)
    expect(error).to_have_count(0)

    expect(page.locator("[data-testid=streaming-text]")).not_to_be_empty(timeout=RUN)
    send(page, "and then the weather")
    reply = page.locator("[data-testid=control-reply]")
    expect(reply).to_have_attribute("data-action", "queue", timeout=SHORT)
    expect(reply.locator("[data-testid=pending-text]")).to_have_text("and then the weather")
    # The first run ends and the queued message starts the next: the notice is gone.
    expect(reply).to_have_count(0, timeout=RUN)
    user_turns = page.locator("#transcript [data-testid=message][data-role=user]")
    expect(user_turns.last).to_contain_text("and then the weather", timeout=RUN)

    expect(status_bar(page)).to_have_attribute("data-status", "running", timeout=RUN)
    page.locator("[data-testid=cancel-form] button[type=submit]").click()
    expect(status_bar(page)).to_have_attribute("data-status", "cancelled", timeout=RUN)
    expect(reply).to_have_text("The run has stopped.")  # not "Stopping the run…"
    expect(page.locator("[data-testid=cancel-state]")).to_have_text("stopped on request")
    no_internal_words(page)
