"""Login throttling: wrong passwords lock out the account and the address, with a clear wait."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone

pytestmark = [
    pytest.mark.django_db,
    # A small limit keeps the test quick; the mechanism is the one configured in settings.
    pytest.mark.usefixtures("small_limit"),
]
LIMIT = 3


@pytest.fixture
def small_limit() -> Any:
    with override_settings(AXES_FAILURE_LIMIT=LIMIT):
        yield


def _post(client: Client, path: str, username: str, password: str, address: str) -> Any:
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def _locked(response: Any) -> bool:
    return response.status_code == 429 and b'data-testid="locked-out"' in response.content


def test_wrong_passwords_lock_the_account_and_even_the_right_one_waits(user, password):
    client = Client()
    for _ in range(LIMIT - 1):
        response = _post(client, "/login/", user.username, "wrong", "10.0.0.1")
        assert response.status_code == 200 and not _locked(response)
    response = _post(client, "/login/", user.username, "wrong", "10.0.0.1")
    assert _locked(response)
    assert "Try again in 15 minutes" in response.content.decode()
    assert response.headers["Retry-After"] == str(15 * 60)
    # The right password, even from another address, is refused while the account is locked.
    response = _post(Client(), "/login/", user.username, password, "10.0.0.2")
    assert _locked(response)


def test_wrong_passwords_for_many_accounts_lock_the_address(user, other_user, password):
    client = Client()
    for index in range(LIMIT):
        _post(client, "/login/", f"nobody-{index}", "guess", "10.0.0.7")
    assert _locked(_post(client, "/login/", user.username, password, "10.0.0.7"))
    # The same account from another address is not locked: the limit was the address's.
    response = _post(Client(), "/login/", user.username, password, "10.0.0.8")
    assert response.status_code == 302


def test_the_admin_login_is_throttled_too(staff_user, password):
    client = Client()
    for _ in range(LIMIT):
        _post(client, "/admin/login/", staff_user.username, "wrong", "10.0.0.9")
    assert _locked(_post(client, "/admin/login/", staff_user.username, password, "10.0.0.9"))


def test_the_lock_lives_in_the_database_and_ends_after_the_wait(user, password):
    from axes.models import AccessAttempt

    client = Client()
    for _ in range(LIMIT):
        _post(client, "/login/", user.username, "wrong", "10.0.0.3")
    assert _locked(_post(client, "/login/", user.username, password, "10.0.0.3"))
    # Any process reads the same rows; once they are older than the wait, logins work again.
    assert AccessAttempt.objects.filter(username=user.username).exists()
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    response = _post(client, "/login/", user.username, password, "10.0.0.3")
    assert response.status_code == 302


def test_a_success_clears_the_failures_before_it(user, password):
    client = Client()
    for _ in range(LIMIT - 1):
        _post(client, "/login/", user.username, "wrong", "10.0.0.4")
    assert _post(client, "/login/", user.username, password, "10.0.0.4").status_code == 302
    client.post("/logout/")
    for _ in range(LIMIT - 1):
        _post(client, "/login/", user.username, "wrong", "10.0.0.4")
    assert _post(client, "/login/", user.username, password, "10.0.0.4").status_code == 302
