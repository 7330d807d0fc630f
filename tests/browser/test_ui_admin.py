"""The admin's "Test this profile" button: answers in place and never blocks the page or site."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from agents.models import AgentProfile

pytestmark = pytest.mark.browser


def test_test_this_profile_answers_in_place_while_the_page_and_site_stay_usable(
    page: Any, live_url: str, login: Any, django_user_model: Any, password: str
) -> None:
    django_user_model.objects.create_superuser("root", "root@example.com", password)
    # About three seconds to answer: long enough to use the page and the site meanwhile.
    profile = AgentProfile.objects.create(
        name="Slowish", slug="slowish", provider="demo",
        provider_settings={"delay": 0.1, "reply_words": 30},
    )  # fmt: skip
    login(page, "root", password)
    page.goto(f"{live_url}/admin/agents/agentprofile/{profile.pk}/change/")

    page.get_by_test_id("profile-test").click()
    result = page.get_by_test_id("profile-test-result")
    expect(result).to_contain_text("Testing…")
    expect(page.get_by_test_id("profile-test")).to_be_disabled()
    # While the model answers, the form is usable and the server answers other requests.
    page.fill("#id_description", "edited while testing")
    status = page.evaluate("() => fetch('/admin/').then(r => r.status)")
    assert status == 200
    expect(result).to_contain_text("Testing…")  # the test was still running meanwhile

    expect(result).to_contain_text("Slowish: answered", timeout=15_000)
    expect(result).to_contain_text("offline demo model")
    expect(page.get_by_test_id("profile-test")).to_be_enabled()
    assert page.input_value("#id_description") == "edited while testing"
