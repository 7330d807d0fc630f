"""The live monitor in a real browser: a run appears, finishes, and is answered from there."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Message, Run

pytestmark = pytest.mark.browser


def open_monitor(page: Any, live_url: str) -> None:
    page.goto(f"{live_url}/monitor/")
    page.wait_for_selector("#active-runs[data-snapshot]", state="attached")


def open_chat_and_send(page: Any, live_url: str, session: ChatSession, text: str) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached")
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def test_staff_sees_a_users_run_appear_and_finish_live_on_the_monitor(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Slow demo", slug="slow-demo", provider="demo", provider_settings={"delay": 0.08}
    )
    session = ChatSession.objects.create(owner=user, profile=profile, title="Watched chat")
    operator = new_context().new_page()
    login(operator, staff_user.username, password)
    open_monitor(operator, live_url)
    assert operator.locator("#active-runs [data-testid=monitor-row]").count() == 0

    chat = new_context().new_page()
    login(chat, user.username, password)
    open_chat_and_send(chat, live_url, session, "hello monitor")

    active = operator.locator("#active-runs [data-testid=monitor-row]")
    active.first.wait_for()
    run = Run.objects.get(session=session)
    row = operator.locator(f"#active-runs #run-{run.request_id}")
    assert row.locator("td").first.inner_text() == "alice"
    assert row.locator(f'a[href="/sessions/{session.pk}/"]').inner_text() == "Watched chat"
    operator.wait_for_selector(
        f"#active-runs #run-{run.request_id}[data-phase=generating] "
        "[data-testid=monitor-phase]:text-is('writing')"
    )

    operator.wait_for_selector(f"#recent-runs #run-{run.request_id}[data-status=completed]",
                               timeout=20_000)  # fmt: skip
    assert operator.locator(f"#active-runs #run-{run.request_id}").count() == 0
    assert operator.locator(f"#run-{run.request_id}").count() == 1
    chat.wait_for_selector("[data-testid=run-status][data-status=completed]")


def test_staff_approves_a_tool_call_on_the_monitor_and_the_users_chat_continues(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    profile = AgentProfile.objects.create(
        name="Gated demo", slug="gated-demo", provider="demo", provider_settings={"delay": 0}
    )
    ExtensionSetting.objects.create(profile=profile, key="demo_tools", position=0)
    ExtensionSetting.objects.create(
        profile=profile, key="tool_approval", settings={"tools": ["calculator"]}, position=1
    )
    session = ChatSession.objects.create(owner=user, profile=profile)
    operator = new_context().new_page()
    login(operator, staff_user.username, password)
    open_monitor(operator, live_url)

    chat = new_context().new_page()
    login(chat, user.username, password)
    open_chat_and_send(chat, live_url, session, "what is 2 + 3?")
    chat.wait_for_selector("[data-testid=approval-card]")  # the owner sees it too

    card = operator.locator("#active-runs [data-testid=approval-card]")
    card.wait_for()
    assert "calculator" in card.inner_text()
    card.locator("[data-testid=approve]").click()
    operator.wait_for_selector(
        "[data-testid=control-reply][data-reply=accepted][data-action=approve]"
    )

    chat.wait_for_selector("[data-testid=run-status][data-status=completed]")
    assert (
        chat.locator("[data-testid=tool-card][data-state=ok] .tool-name").inner_text()
        == "calculator"
    )
    answers = chat.locator("[data-testid=message][data-role=assistant] [data-testid=answer]")
    assert answers.last.inner_text() == "The result is 5."
    assert Message.objects.filter(session=session, role="tool", content="5").exists()
    assert chat.locator("[data-testid=approval-card]").count() == 0


def test_a_monitor_over_many_active_runs_shows_every_row_once_though_the_snapshot_is_split(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    # 150 rows of ~2 KB are more than one frame may carry (256 KiB; the first frame takes half):
    # the snapshot replaces the table with its first rows and appends the rest in more frames.
    profile = AgentProfile.objects.create(name="Many", slug="many", provider="demo")
    for i in range(150):
        session = ChatSession.objects.create(
            owner=user, profile=profile, title=f"chat {i:03d} " + "long title " * 27
        )
        Run.objects.create(
            session=session, request_id=f"many-{i:03d}", input_text="hi", status="running"
        )
    page = new_context().new_page()
    login(page, staff_user.username, password)
    open_monitor(page, live_url)

    page.wait_for_function(
        "document.querySelectorAll('#active-runs [data-testid=monitor-row]').length === 150"
        " && document.querySelector('[data-testid=active-totals]').dataset.runs === '150'"
    )
    ids = page.eval_on_selector_all(
        "#active-runs [data-testid=monitor-row]", "rows => rows.map(r => r.dataset.requestId)"
    )
    assert ids == [f"many-{i:03d}" for i in range(150)]  # each once, oldest first
    assert page.locator("#active-runs[data-snapshot]").count() == 1
