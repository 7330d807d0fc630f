"""The pages work under their strict Content-Security-Policy, and the policy blocks injections.

Every page records the CSP violations it reports; chat, monitor and approval must report none,
and script that slipped past escaping must be refused by the policy itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.browser

SHORT = 5_000
RUN = 15_000

# Runs before any page script; the listener is the page's own report of what CSP refused.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (event) => {
  window.__violations.push(event.effectiveDirective + ' ' + (event.blockedURI || 'inline'));
});
"""

STREAMING_BEFORE_FINAL = """() => {
  const text = document.querySelector('[data-testid=streaming-text]');
  const final = document.querySelector('[data-testid=message][data-role=assistant]');
  return !!text && text.textContent.trim().split(/\\s+/).length >= 2 && !final;
}"""

# What an XSS would do once past escaping: an inline script, an inline handler, and an htmx
# handler attribute (htmx would need eval for it, which its config and the policy forbid).
INJECT = """() => {
  const script = document.createElement('script');
  script.textContent = 'window.__pwned = "inline script"';
  document.body.append(script);
  document.body.insertAdjacentHTML('beforeend',
    '<img src="data:," onload="window.__pwned = \\'inline handler\\'">' +
    '<button id="hx-injected" hx-on:click="window.__pwned = \\'hx-on\\'">x</button>');
  htmx.process(document.getElementById('hx-injected'));
  document.getElementById('hx-injected').click();
}"""


def _page(new_context: Any, **options: Any) -> Any:
    page = new_context(**options).new_page()
    page.add_init_script(RECORD_VIOLATIONS)
    return page


def _violations(page: Any) -> list[str]:
    return page.evaluate("window.__violations")


def _profile(slug: str, *, delay: float, approval: bool = False) -> AgentProfile:
    profile = AgentProfile.objects.create(
        name=slug, slug=slug, provider="demo", provider_settings={"delay": delay}
    )
    rows: list[tuple[str, dict[str, Any]]] = [("demo_tools", {"tools": ["calculator"]})]
    if approval:
        rows.append(("tool_approval", {"tools": ["calculator"], "timeout_seconds": 60}))
    rows.append(("steering", {}))
    for position, (key, settings) in enumerate(rows):
        ExtensionSetting.objects.create(
            profile=profile, key=key, settings=settings, position=position
        )
    return profile


def _open(page: Any, url: str, ready: str) -> None:
    response = page.goto(url)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    page.wait_for_selector(ready, state="attached", timeout=SHORT)


def _send(page: Any, text: str) -> None:
    page.fill("[data-testid=message-form] textarea[name=text]", text)
    page.click("[data-testid=message-form] button[type=submit]")


def test_chat_streams_and_the_forms_reset_under_the_policy(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=_profile("csp-chat", delay=0.05))
    page = _page(new_context)
    login(page, user.username, password)
    _open(page, f"{live_url}/sessions/{session.pk}/", "#transcript[data-snapshot]")
    expect(page.locator("[data-testid=connection]")).to_have_text("live", timeout=SHORT)

    _send(page, "streaming under a strict policy, word after word after word")
    page.wait_for_function(STREAMING_BEFORE_FINAL, polling="raf", timeout=RUN)
    # The message form emptied itself: the listener that replaced the inline hx-on handler.
    assert page.locator("[data-testid=message-form] textarea").input_value() == ""
    steer = page.locator(".steer-form input[name=text]")
    steer.fill("shorter please")
    page.locator(".steer-form button[type=submit]").click()
    expect(page.locator("[data-testid=control-reply][data-action=steer]")).to_be_visible(
        timeout=SHORT
    )
    expect(page.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
    answer = page.locator("[data-testid=message][data-role=assistant] [data-testid=answer]")
    expect(answer.first).to_contain_text("You said:")
    assert _violations(page) == []


def test_monitor_updates_and_approve_work_under_the_policy(
    new_context: Any, live_url: str, login: Any, user: Any, staff_user: Any, password: str
) -> None:
    session = ChatSession.objects.create(
        owner=user, profile=_profile("csp-approve", delay=0.01, approval=True)
    )
    monitor = _page(new_context)
    login(monitor, staff_user.username, password)
    _open(monitor, f"{live_url}/monitor/", "#active-runs[data-snapshot]")
    chat = _page(new_context)
    login(chat, user.username, password)
    _open(chat, f"{live_url}/sessions/{session.pk}/", "#transcript[data-snapshot]")

    _send(chat, "what is 6*7?")
    expect(chat.locator("#waiting [data-testid=approval-card]")).to_be_visible(timeout=SHORT)
    run = Run.objects.get(session=session)
    card = monitor.locator(f"#active-runs #run-{run.request_id} [data-testid=approval-card]")
    expect(card).to_be_visible(timeout=SHORT)
    card.locator("[data-testid=approve]").click()
    expect(monitor.locator("[data-testid=control-reply][data-action=approve]")).to_have_attribute(
        "data-reply", "accepted", timeout=SHORT
    )
    expect(monitor.locator(f"#recent-runs #run-{run.request_id}")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
    expect(
        chat.locator("[data-testid=message][data-role=assistant] [data-testid=answer]").last
    ).to_have_text("The result is 42.", timeout=RUN)
    assert _violations(monitor) == []
    assert _violations(chat) == []


def test_injected_script_is_escaped_and_blocked_by_the_policy(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    session = ChatSession.objects.create(owner=user, profile=_profile("csp-inject", delay=0))
    page = _page(new_context)
    login(page, user.username, password)
    _open(page, f"{live_url}/sessions/{session.pk}/", "#transcript[data-snapshot]")

    # Escaping: markup in a message is shown as text, live and after a reload.
    payload = "<script>window.__pwned='message'</script><img src=x onerror=\"window.__pwned=1\">"
    _send(page, payload)
    expect(page.locator("[data-testid=run-status]")).to_have_attribute(
        "data-status", "completed", timeout=RUN
    )
    user_bubble = page.locator("[data-testid=message][data-role=user]").first
    expect(user_bubble).to_contain_text("<script>")
    page.reload()
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    assert page.evaluate("window.__pwned") is None

    # The policy: script that got past escaping anyway is refused, and says so.
    page.evaluate(INJECT)
    page.wait_for_function("() => window.__violations.length >= 2", timeout=SHORT)
    assert page.evaluate("window.__pwned") is None
    directives = {entry.split(" ")[0] for entry in _violations(page)}
    assert directives == {"script-src-elem", "script-src-attr"}, directives


def test_without_the_policy_the_same_injection_would_run(
    new_context: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    """The guard above is the header: a browser that ignores it runs the injected script."""
    session = ChatSession.objects.create(owner=user, profile=_profile("csp-bypass", delay=0))
    page = _page(new_context, bypass_csp=True)
    login(page, user.username, password)
    page.goto(f"{live_url}/sessions/{session.pk}/")
    page.wait_for_selector("#transcript[data-snapshot]", state="attached", timeout=SHORT)
    page.evaluate(INJECT)
    page.wait_for_function("() => window.__pwned !== undefined", timeout=SHORT)
