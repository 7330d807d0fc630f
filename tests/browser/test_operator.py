"""Operators in a real browser: approve, deny, answer, steer and cancel a run, and who may."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Message, OperatorAction, Run

pytestmark = pytest.mark.browser

# Explicit waits (milliseconds). A demo run with approval finishes well inside these.
SHORT = 5_000
RUN = 15_000

CALCULATOR_PROMPT = "what is 6*7?"
ANSWER_42 = "The result is 42."
LONG_PROMPT = (
    "please repeat this long sentence slowly so that there is plenty of room to steer the "
    "run while its answer is still streaming into the chat page word by word"
)

STREAMING_BEFORE_FINAL = """() => {
  const text = document.querySelector('[data-testid=streaming-text]');
  const final = document.querySelector('[data-testid=message][data-role=assistant]');
  return !!text && text.textContent.trim().split(/\\s+/).length >= 2 && !final;
}"""

# Records every cancel_state the run-status bar shows; the bar is replaced out of band, so
# watch the whole page and read the current bar after each change.
RECORD_CANCEL_STATES = """() => {
  window.__cancelStates = [];
  const note = () => {
    const bar = document.querySelector('#run-status');
    const state = bar ? bar.dataset.cancelState : '';
    const seen = window.__cancelStates;
    if (state && seen[seen.length - 1] !== state) { seen.push(state); }
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true,
    attributes: true, attributeFilter: ['data-cancel-state']});
  note();
}"""


# -- setup ------------------------------------------------------------------------------------


def make_profile(
    slug: str,
    *,
    delay: float = 0.02,
    approval: bool = True,
    ask_user: bool = False,
    steering: bool = True,
) -> AgentProfile:
    """A demo-model profile with the demo tools and the chosen operator extensions."""
    profile = AgentProfile.objects.create(
        name=f"Operator demo {slug}", slug=slug, provider="demo",
        provider_settings={"delay": delay},
    )  # fmt: skip
    rows: list[tuple[str, dict[str, Any]]] = [("demo_tools", {"tools": ["calculator", "clock"]})]
    if approval:
        rows.append(("tool_approval", {"tools": ["calculator"], "timeout_seconds": 60}))
    if ask_user:
        rows.append(("ask_user", {}))
    if steering:
        rows.append(("steering", {}))
    for position, (key, settings) in enumerate(rows):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    return profile


def open_chat(page: Any, live_url: str, session: ChatSession) -> None:
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)


def open_monitor(page: Any, live_url: str) -> None:
    page.goto(f"{live_url}/monitor/")
    page.wait_for_selector("#active-runs[data-snapshot]", state="attached", timeout=SHORT)


def send(page: Any, text: str) -> None:
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def run_status(page: Any) -> Any:
    return page.locator("[data-testid=run-status]")


def answers(page: Any) -> Any:
    return page.locator("[data-testid=message][data-role=assistant] [data-testid=answer]")


def transcript_lines(page: Any) -> list[tuple[str, str]]:
    """(role, visible text) of every message bubble, in page order."""
    rows = page.locator("#transcript [data-testid=message]")
    return [
        (rows.nth(i).get_attribute("data-role") or "", " ".join(rows.nth(i).inner_text().split()))
        for i in range(rows.count())
    ]


def only_run(session: ChatSession) -> Run:
    [run] = Run.objects.filter(session=session)
    return run


def operator_actions(page: Any, live_url: str, run: Run) -> list[list[str]]:
    """The run page's operator-action rows as [who, action, details, outcome] cell texts."""
    page.goto(f"{live_url}/runs/{run.request_id}/")
    rows = page.locator("[data-testid=operator-actions] [data-testid=operator-action]")
    rows.first.wait_for(timeout=SHORT)
    return [
        [" ".join(text.split()) for text in rows.nth(i).locator("td").all_inner_texts()[1:]]
        for i in range(rows.count())
    ]


# -- approval -----------------------------------------------------------------------------------


def test_staff_approves_on_the_monitor_while_the_owners_chat_shows_the_wait_and_the_result(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("approve"))
    monitor = new_context().new_page()
    login(monitor, staff_user.username, password)
    open_monitor(monitor, live_url)
    chat = new_context().new_page()
    login(chat, user.username, password)
    open_chat(chat, live_url, session)

    send(chat, CALCULATOR_PROMPT)
    chat_wait = chat.locator("#waiting [data-testid=approval-card]")
    expect(chat_wait).to_be_visible(timeout=SHORT)
    expect(chat_wait.locator("code")).to_have_text("calculator")
    expect(chat_wait.locator("pre")).to_contain_text("6*7")
    card = chat.locator("#transcript [data-testid=tool-card]")
    expect(card).to_have_attribute("data-state", "awaiting", timeout=SHORT)
    expect(run_status(chat)).to_have_attribute("data-status", "waiting", timeout=SHORT)

    run = only_run(session)
    monitor_wait = monitor.locator(
        f"#active-runs #run-{run.request_id} [data-testid=approval-card]"
    )
    expect(monitor_wait).to_be_visible(timeout=SHORT)
    expect(monitor_wait).to_contain_text("calculator")
    monitor_wait.locator("[data-testid=approve]").click()
    expect(monitor.locator("[data-testid=control-reply][data-action=approve]")).to_have_attribute(
        "data-reply", "accepted", timeout=SHORT
    )

    expect(run_status(chat)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(card).to_have_attribute("data-state", "ok")
    expect(card.locator("[data-testid=tool-result]")).to_have_text("42")
    expect(card.locator("[data-testid=approval-outcome]")).to_have_text("approved by operator")
    expect(answers(chat).last).to_have_text(ANSWER_42)
    expect(chat.locator("[data-testid=approval-card]")).to_have_count(0)
    # The monitor's row left the active table when the run ended.
    expect(monitor.locator(f"#active-runs #run-{run.request_id}")).to_have_count(0, timeout=SHORT)
    chat.reload()  # the server-rendered transcript keeps the record
    expect(card.locator("[data-testid=approval-outcome]")).to_have_text(
        "approved by operator", timeout=SHORT
    )

    call_id = card.get_attribute("data-call-id")
    assert operator_actions(monitor, live_url, run) == [
        ["operator", "approve", f"id {call_id}", "accepted"]
    ]
    action = OperatorAction.objects.get(run=run)
    assert (action.user, action.action, action.outcome) == (staff_user, "approve", "accepted")


def test_owner_denies_with_a_reason_and_the_tool_never_runs(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("deny"))
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, CALCULATOR_PROMPT)
    wait = page.locator("#waiting [data-testid=approval-card]")
    expect(wait).to_be_visible(timeout=SHORT)
    wait.locator("input[name=reason]").fill("not on my budget")
    wait.locator("[data-testid=deny]").click()
    expect(page.locator("[data-testid=control-reply][data-action=deny]")).to_have_attribute(
        "data-reply", "accepted", timeout=SHORT
    )

    expect(run_status(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    card = page.locator("#transcript [data-testid=tool-card]")
    expect(card).to_have_attribute("data-state", "denied")
    expect(card.locator(".badge")).to_have_text("denied")
    expect(card.locator("[data-testid=tool-result]")).to_have_text(
        "Denied by the operator: not on my budget"
    )
    expect(card.locator("[data-testid=approval-outcome]")).to_have_text(
        "denied by alice: not on my budget"
    )
    expect(answers(page).last).to_have_text(
        "The calculator tool reported a problem: Denied by the operator: not on my budget"
    )
    expect(page.locator("[data-testid=approval-card]")).to_have_count(0)
    # The reloaded page (the server's transcript) tells the same story.
    page.reload()
    expect(card).to_have_attribute("data-state", "denied", timeout=SHORT)
    expect(card.locator("[data-testid=tool-result]")).to_contain_text("not on my budget")
    expect(card.locator("[data-testid=approval-outcome]")).to_have_text(
        "denied by alice: not on my budget"
    )

    [result] = Message.objects.filter(session=session, role="tool")
    assert result.is_error
    assert result.content == "Denied by the operator: not on my budget"
    assert result.attributes["approval"] == "denied"
    assert "42" not in "".join(
        Message.objects.filter(session=session).values_list("content", flat=True)
    )
    run = only_run(session)
    call_id = card.get_attribute("data-call-id")
    assert operator_actions(page, live_url, run) == [
        ["alice", "deny", f"id {call_id} reason not on my budget", "accepted"]
    ]
    assert OperatorAction.objects.get(run=run).payload["reason"] == "not on my budget"


# -- ask_user -----------------------------------------------------------------------------------


def test_the_agent_asks_the_user_and_the_typed_answer_reaches_the_model(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    session = ChatSession.objects.create(
        owner=user, profile=make_profile("ask", approval=False, ask_user=True)
    )
    monitor = new_context().new_page()
    login(monitor, staff_user.username, password)
    open_monitor(monitor, live_url)
    chat = new_context().new_page()
    login(chat, user.username, password)
    open_chat(chat, live_url, session)

    send(chat, "ask: Which colour should the report use?")
    # Either the question arrives or the run ends without asking: fail fast on the latter.
    chat.wait_for_selector(
        "#waiting [data-testid=question-card], [data-testid=run-status][data-status=completed]",
        timeout=RUN,
    )
    question = chat.locator("#waiting [data-testid=question-card]")
    expect(question).to_have_count(1)
    expect(question).to_contain_text("Which colour should the report use?")
    expect(run_status(chat)).to_have_attribute("data-status", "waiting")
    run = only_run(session)
    on_monitor = monitor.locator(f"#active-runs #run-{run.request_id} [data-testid=question-card]")
    expect(on_monitor).to_contain_text("Which colour should the report use?", timeout=SHORT)

    question.locator("input[name=answer]").fill("teal, please")
    question.locator("[data-testid=answer-submit]").click()
    expect(chat.locator("[data-testid=control-reply][data-action=answer]")).to_have_attribute(
        "data-reply", "accepted", timeout=SHORT
    )
    expect(run_status(chat)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(chat.locator("[data-testid=question-card]")).to_have_count(0)
    expect(on_monitor).to_have_count(0, timeout=SHORT)
    card = chat.locator("#transcript [data-testid=tool-card]")
    expect(card.locator(".tool-name")).to_have_text("ask_user")
    expect(card.locator("[data-testid=tool-result]")).to_have_text("teal, please")
    expect(answers(chat).last).to_have_text("The ask_user tool returned: teal, please")


# -- steering -----------------------------------------------------------------------------------


def test_a_second_message_mid_stream_steers_the_same_run_and_nothing_is_lost_or_repeated(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    profile = make_profile("steer", delay=0.05, approval=False)
    assert profile.double_texting == "steer"  # the default policy
    session = ChatSession.objects.create(owner=user, profile=profile)
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, LONG_PROMPT)
    page.wait_for_function(STREAMING_BEFORE_FINAL, polling="raf", timeout=SHORT)
    send(page, "also mention bananas")
    expect(page.locator("[data-testid=control-reply]")).to_have_attribute(
        "data-action", "steer", timeout=SHORT
    )
    expect(page.locator("[data-testid=control-reply]")).to_have_attribute("data-reply", "accepted")

    steering = page.locator("#transcript [data-testid=message][data-role=user]").nth(1)
    expect(steering).to_contain_text("also mention bananas", timeout=RUN)
    expect(steering).to_contain_text("steering")
    expect(run_status(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(answers(page)).to_have_count(2)
    expect(answers(page).last).to_contain_text('You said: "also mention bananas".')
    expect(page.locator("[data-testid=streaming]")).to_have_count(0)

    live = transcript_lines(page)
    assert [role for role, _ in live] == ["user", "assistant", "user", "assistant"]
    assert live[0][1] == LONG_PROMPT
    assert live[1][1].startswith(f'You said: "{LONG_PROMPT[:60]}')
    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    assert transcript_lines(page) == live

    run = only_run(session)  # one run took both messages
    assert run.status == "completed"
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    assert [(m.role, m.run_id) for m in stored] == [
        ("user", run.pk), ("assistant", run.pk), ("user", run.pk), ("assistant", run.pk)
    ]  # fmt: skip
    assert stored[2].content == "also mention bananas"
    assert stored[2].attributes.get("steering") is True


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_while_a_tool_waits_for_approval_stops_the_run_and_the_chat_stays_usable(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=make_profile("cancel"))
    login(page, user.username, password)
    open_chat(page, live_url, session)

    send(page, CALCULATOR_PROMPT)
    expect(page.locator("#waiting [data-testid=approval-card]")).to_be_visible(timeout=SHORT)
    page.evaluate(RECORD_CANCEL_STATES)
    page.locator("[data-testid=cancel-form] button[type=submit]").click()

    expect(run_status(page)).to_have_attribute("data-status", "cancelled", timeout=RUN)
    expect(run_status(page)).to_have_attribute("data-cancel-state", "stopped")
    expect(page.locator("[data-testid=cancel-state]")).to_have_text("stopped on request")
    expect(page.locator("[data-testid=control-reply][data-action=cancel]")).to_have_attribute(
        "data-reply", "accepted"
    )
    seen = page.evaluate("() => window.__cancelStates")
    order = ["requested", "acknowledged", "stopped"]
    assert seen[-1] == "stopped"
    assert seen == [state for state in order if state in seen], seen  # never backwards
    card = page.locator("#transcript [data-testid=tool-card]")
    expect(card).to_have_attribute("data-state", "error")
    expect(card.locator("[data-testid=tool-result]")).to_have_text(
        "Cancelled: the request was cancelled before this tool call finished."
    )
    expect(page.locator("[data-testid=approval-card]")).to_have_count(0)
    expect(page.locator("[data-testid=cancel-form]")).to_have_count(0)

    cancelled = only_run(session)
    assert (cancelled.status, cancelled.cancel_state) == ("cancelled", "stopped")
    [result] = Message.objects.filter(session=session, role="tool")
    assert result.attributes.get("cancelled") is True

    send(page, "hello again")
    expect(answers(page).last).to_have_text(
        'You said: "hello again". I am the offline demo model, so I can only echo you, do '
        "arithmetic with the calculator tool and tell the time with the clock tool.",
        timeout=RUN,
    )
    expect(run_status(page)).to_have_attribute("data-status", "completed", timeout=RUN)
    expect(run_status(page)).to_have_attribute("data-cancel-state", "")
    assert Run.objects.filter(session=session).count() == 2
    assert operator_actions(page, live_url, cancelled) == [
        ["alice", "cancel", "", "accepted Cancelling."]
    ]


# -- permissions --------------------------------------------------------------------------------


def test_another_user_gets_a_404_for_the_chat_and_only_staff_reach_the_monitor(
    new_context: Any,
    live_url: str,
    login: Any,
    user: Any,
    other_user: Any,
    staff_user: Any,
    password: str,
) -> None:
    session = ChatSession.objects.create(
        owner=user, profile=make_profile("private"), title="Alice's secret plans"
    )
    stranger = new_context().new_page()
    login(stranger, other_user.username, password)

    response = stranger.goto(f"{live_url}/sessions/{session.pk}/")
    assert response is not None and response.status == 404
    expect(stranger.locator("body")).to_contain_text("Not Found")
    expect(stranger.locator("body")).not_to_contain_text("Alice's secret plans")
    expect(stranger.locator("[data-testid=chat]")).to_have_count(0)

    response = stranger.goto(f"{live_url}/monitor/")
    assert response is not None and response.status == 403
    expect(stranger.locator("[data-testid=monitor]")).to_have_count(0)
    stranger.goto(f"{live_url}/")
    expect(stranger.locator(".site-nav a", has_text="Monitor")).to_have_count(0)

    # The sockets refuse too, before sending anything, with close codes the page's script never
    # retries.
    refusals = stranger.evaluate(
        """async (paths) => {
          const refusal = (path) => new Promise((resolve) => {
            const socket = new WebSocket(`ws://${location.host}${path}`);
            let frames = 0;
            socket.onmessage = () => { frames += 1; };
            socket.onclose = (event) => resolve([event.code, frames]);
          });
          return [await refusal(paths[0]), await refusal(paths[1])];
        }""",
        [f"/ws/sessions/{session.pk}/", "/ws/monitor/"],
    )
    [chat_code, chat_frames], [monitor_code, monitor_frames] = refusals
    assert chat_code in (4403, 4404) and chat_frames == 0
    assert (monitor_code, monitor_frames) == (4403, 0)

    staff = new_context().new_page()
    login(staff, staff_user.username, password)
    response = staff.goto(f"{live_url}/sessions/{session.pk}/")
    assert response is not None and response.status == 200
    expect(staff.locator("h1")).to_have_text("Alice's secret plans")
    expect(staff.locator(".chat-header")).to_contain_text("alice's session")
