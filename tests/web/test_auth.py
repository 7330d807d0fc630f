"""Authentication: who reaches which page, and how login and logout behave."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_anonymous_home_redirects_to_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_login_page_renders_a_form(client: Client) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content


def test_login_with_the_right_password_redirects_home_and_shows_the_username(
    client: Client, user: Any, password: str
) -> None:
    response = client.post("/login/", {"username": user.username, "password": password})
    assert response.status_code == 302
    assert response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200
    assert f'data-testid="username">{user.username}<'.encode() in home.content


def test_login_with_a_wrong_password_stays_anonymous(client: Client, user: Any) -> None:
    response = client.post("/login/", {"username": user.username, "password": "nope"})
    assert response.status_code == 200
    assert b'role="alert"' in response.content
    assert client.get("/").status_code == 302


def test_login_honours_a_safe_next_url(client: Client, user: Any, password: str) -> None:
    response = client.post(
        "/login/?next=/admin/", {"username": user.username, "password": password, "next": "/x/"}
    )
    assert response["Location"] == "/x/"


def test_login_ignores_an_offsite_next_url(client: Client, user: Any, password: str) -> None:
    response = client.post(
        "/login/",
        {"username": user.username, "password": password, "next": "https://evil.example/"},
    )
    assert response["Location"] == "/"


def test_admin_turns_away_a_non_staff_user(client: Client, user: Any) -> None:
    client.force_login(user)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_admin_opens_for_staff(client: Client, staff_user: Any) -> None:
    client.force_login(staff_user)
    assert client.get("/admin/").status_code == 200


def test_staff_links_show_only_for_staff(client: Client, user: Any, staff_user: Any) -> None:
    client.force_login(user)
    assert b'href="/admin/"' not in client.get("/").content
    client.force_login(staff_user)
    assert b'href="/admin/"' in client.get("/").content


def test_logout_by_get_is_refused_and_keeps_the_session(client: Client, user: Any) -> None:
    client.force_login(user)
    assert client.get("/logout/").status_code == 405
    assert client.get("/").status_code == 200


def test_logout_by_post_ends_the_session(client: Client, user: Any) -> None:
    client.force_login(user)
    response = client.post("/logout/")
    assert response.status_code == 302
    assert client.get("/").status_code == 302


def test_logout_without_csrf_token_is_rejected(user: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post("/logout/").status_code == 403
    assert client.get("/").status_code == 200


def test_pages_set_the_csrf_token_for_htmx_on_body(client: Client, user: Any) -> None:
    client.force_login(user)
    content = client.get("/").content.decode()
    assert '<body hx-headers=\'{"X-CSRFToken": "' in content
    assert "htmx-2.min.js" in content
    assert "ext/hx-ws-2.min.js" in content


def test_ensure_demo_user_creates_a_superuser_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    monkeypatch.setenv("DEMO_USERNAME", "showcase")
    monkeypatch.setenv("DEMO_PASSWORD", "s3cret-demo")
    first, second = StringIO(), StringIO()
    call_command("ensure_demo_user", stdout=first)
    call_command("ensure_demo_user", stdout=second)
    demo = get_user_model().objects.get(username="showcase")
    assert demo.is_superuser and demo.is_staff
    assert demo.check_password("s3cret-demo")
    assert "Created demo superuser 'showcase'" in first.getvalue()
    assert "already exists" in second.getvalue()
    assert "http://127.0.0.1:8000/login/" in second.getvalue()
