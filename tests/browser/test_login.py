"""The login page, driven by a real browser against a real Daphne."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.browser


def test_user_logs_in_through_the_login_page_and_sees_their_name(
    page: Any, live_url: str, user: Any, password: str
) -> None:
    page.goto(f"{live_url}/")
    assert page.url.startswith(f"{live_url}/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_url}/")
    assert page.locator("[data-testid=username]").inner_text() == user.username


def test_wrong_password_stays_on_the_login_page(page: Any, live_url: str, user: Any) -> None:
    page.goto(f"{live_url}/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    page.wait_for_selector("[role=alert]")
    assert page.url.startswith(f"{live_url}/login/")
    assert page.locator("[data-testid=username]").count() == 0


def test_htmx_loads_from_the_server_static_files(
    page: Any, live_url: str, login: Any, user: Any, password: str
) -> None:
    login(page, user.username, password)
    assert page.evaluate("() => typeof window.htmx") == "object"
    assert page.evaluate("() => htmx.version").startswith("2.")
