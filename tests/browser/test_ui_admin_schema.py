"""The profile page's settings forms: Form and Raw JSON modes, the provider's inputs, saving."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile

pytestmark = pytest.mark.browser


def test_settings_form_switches_mode_follows_the_provider_and_saves(
    page: Any, fresh_live_url: str, login: Any, django_user_model: Any, password: str
) -> None:
    live_url = fresh_live_url  # the save writes an admin log entry: see fresh_live_url
    django_user_model.objects.create_superuser("root", "root@example.com", password)
    profile = AgentProfile.objects.create(
        name="Echo", slug="echo", provider="demo", provider_settings={"reply_words": 5}
    )
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text))
    page.on("pageerror", lambda error: problems.append(str(error)))
    login(page, "root", password, base_url=live_url)
    page.goto(f"{live_url}/admin/agents/agentprofile/{profile.pk}/change/")

    widget = page.locator(".zett-schema", has=page.locator('textarea[name="provider_settings"]'))
    delay = widget.locator('input[name="provider_settings__demo__delay"]')
    raw = widget.locator('textarea[name="provider_settings"]')
    # Form mode first: the demo provider's inputs, the stored value filled in, no raw JSON.
    expect(delay).to_be_visible()
    expect(delay).to_have_attribute("placeholder", "0.02")
    expect(widget.locator('input[name="provider_settings__demo__reply_words"]')).to_have_value("5")
    expect(raw).to_be_hidden()

    widget.get_by_test_id("schema-mode-raw").check()  # CSS alone swaps the modes
    expect(raw).to_be_visible()
    expect(delay).to_be_hidden()
    widget.get_by_test_id("schema-mode-form").check()
    expect(delay).to_be_visible()

    # Another provider shows its own inputs; back to demo shows the demo ones again.
    page.select_option('select[name="provider"]', "scripted")
    expect(
        widget.locator('textarea[name="provider_settings__scripted__responses"]')
    ).to_be_visible()
    expect(delay).to_be_hidden()
    page.select_option('select[name="provider"]', "demo")
    expect(delay).to_be_visible()

    # A row added to the extensions inline follows its own key select.
    page.click(".add-row a")
    row = page.locator("#extensions-0")
    row.locator('select[name="extensions-0-key"]').select_option("tool_approval")
    tools = row.locator('textarea[name="extensions-0-settings__tool_approval__tools"]')
    expect(tools).to_be_visible()
    expect(tools).to_have_attribute("placeholder", "*")
    tools.fill("clock")

    delay.fill("0.5")
    page.click('input[name="_continue"]')
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    profile.refresh_from_db()
    assert profile.provider_settings == {"delay": 0.5, "reply_words": 5}
    assert list(profile.extensions.values_list("key", "settings")) == [
        ("tool_approval", {"tools": ["clock"]})
    ]
    assert not [p for p in problems if "Content Security Policy" in p or "Error" in p], problems
