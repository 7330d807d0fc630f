"""The chat page in a real browser: a new chat, streaming, reopening mid-stream, hostile output."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agents.models import AgentProfile, ChatSession, Message

pytestmark = pytest.mark.browser

STREAMING_BEFORE_FINAL = """() => {
  const text = document.querySelector('[data-testid=streaming-text]');
  const final = document.querySelector('[data-testid=message][data-role=assistant]');
  return !!text && text.textContent.trim().split(/\\s+/).length >= 2 && !final;
}"""


def demo_profile(delay: float) -> AgentProfile:
    """A demo-model profile whose words arrive `delay` seconds apart, so streaming is visible."""
    return AgentProfile.objects.create(
        name="Slow demo", slug=f"slow-demo-{int(delay * 1000)}", provider="demo",
        provider_settings={"delay": delay},
    )  # fmt: skip


def open_chat(page: Any, live_url: str, session: ChatSession) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached")


def send(page: Any, text: str) -> None:
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def final_answers(page: Any) -> list[str]:
    return page.locator(
        "[data-testid=message][data-role=assistant] [data-testid=answer]"
    ).all_inner_texts()


def assistant_content(session: ChatSession) -> str:
    return Message.objects.get(session=session, role="assistant").content


def test_user_starts_a_chat_and_sees_tokens_before_the_answer_is_complete(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = demo_profile(0.04)
    login(page, user.username, password)
    page.select_option("select[name=profile]", str(profile.pk))
    page.click("[data-testid=new-chat-form] button[type=submit]")
    page.wait_for_url(re.compile(r".*/sessions/[^/]+/$"))
    page.wait_for_selector("#transcript[data-snapshot]", state="attached")
    session = ChatSession.objects.get(owner=user)
    assert session.profile == profile

    send(page, "hello browser")
    # Polled on every animation frame: some words shown while no final answer exists yet.
    page.wait_for_function(STREAMING_BEFORE_FINAL, polling="raf")
    page.wait_for_selector("[data-testid=run-status][data-status=completed]")
    [answer] = final_answers(page)
    assert answer.startswith('You said: "hello browser".')
    assert " ".join(answer.split()) == " ".join(assistant_content(session).split())
    assert page.locator("[data-testid=streaming]").count() == 0
    assert page.locator("textarea[name=text]").input_value() == ""


def test_closing_and_reopening_the_chat_mid_stream_shows_the_full_answer_exactly_once(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=demo_profile(0.06))
    context = new_context()
    page = context.new_page()
    login(page, user.username, password)
    open_chat(page, live_url, session)
    send(page, "please stream a long answer")
    page.wait_for_function(STREAMING_BEFORE_FINAL, polling="raf")
    page.close()

    reopened = context.new_page()
    open_chat(reopened, live_url, session)
    reopened.wait_for_selector("[data-testid=run-status][data-status=completed]", timeout=20_000)
    answers = final_answers(reopened)
    assert len(answers) == 1
    assert " ".join(answers[0].split()) == " ".join(assistant_content(session).split())
    assert reopened.locator("[data-testid=streaming]").count() == 0
    user_messages = reopened.locator("[data-testid=message][data-role=user]")
    assert user_messages.all_inner_texts() == ["please stream a long answer"]


HOSTILE = (
    "Look: <script>window.__pwned = 'script'</script> and "
    "<img src=x onerror=\"window.__pwned = 'img'\"> and [link](javascript:window.__pwned='link') "
    "**bold**"
)


def test_model_output_with_script_and_img_onerror_never_executes(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Hostile", slug="hostile", provider="scripted",
        provider_settings={"responses": [HOSTILE], "delay": 0.01},
    )  # fmt: skip
    session = ChatSession.objects.create(owner=user, profile=profile)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, user.username, password)
    open_chat(page, live_url, session)
    send(page, "say something nasty")
    page.wait_for_selector("[data-testid=run-status][data-status=completed]")

    def assert_inert() -> None:
        answer = page.locator("[data-testid=message][data-role=assistant] [data-testid=answer]")
        assert "<script>window.__pwned = 'script'</script>" in answer.inner_text()
        assert answer.locator("strong").inner_text() == "bold"
        assert answer.locator("img, script, a").count() == 0
        assert page.evaluate("() => window.__pwned") is None

    assert_inert()
    page.reload()  # the server-rendered transcript, then the socket's snapshot
    page.wait_for_selector("#transcript[data-snapshot]", state="attached")
    assert_inert()
    assert dialogs == []
