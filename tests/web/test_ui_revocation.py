"""Open sockets end with their login: logout, a password change or deactivation close them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.models import AgentProfile, ChatSession, Run
from agents.web.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)

APP = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
TIMEOUT = 10
CLOSE_UNAUTHENTICATED = 4401


class Browser:
    """A logged-in Django test client (one login) and the sockets it opened."""

    def __init__(self, user: Any) -> None:
        self.client = Client()
        self.client.force_login(user)
        self.cookie = self.client.cookies[settings.SESSION_COOKIE_NAME].value

    async def socket(self, path: str) -> WebsocketCommunicator:
        headers = [
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={self.cookie}".encode()),
        ]
        communicator = WebsocketCommunicator(APP, path, headers=headers)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        assert connected
        await communicator.receive_from(timeout=TIMEOUT)  # the snapshot
        return communicator


@pytest.fixture
async def browsers(manager: Any) -> AsyncIterator[Callable[[Any], Awaitable[Browser]]]:
    made: list[Browser] = []
    sockets: list[WebsocketCommunicator] = []

    async def make(user: Any) -> Browser:
        browser = await sync_to_async(Browser)(user)
        original = browser.socket

        async def tracked(path: str) -> WebsocketCommunicator:
            communicator = await original(path)
            sockets.append(communicator)
            return communicator

        browser.socket = tracked  # type: ignore[method-assign]
        made.append(browser)
        return browser

    yield make
    for communicator in sockets:
        await communicator.disconnect()


async def closed_with(communicator: WebsocketCommunicator) -> int:
    output = await communicator.receive_output(timeout=TIMEOUT)
    assert output["type"] == "websocket.close", output
    return int(output["code"])


async def still_open(communicator: WebsocketCommunicator) -> bool:
    """A bad frame gets its error fragment back: the next thing received, so the socket lives."""
    await communicator.send_to(text_data="not json")
    return 'data-error="bad_json"' in await communicator.receive_from(timeout=TIMEOUT)


@sync_to_async
def chat_of(user: Any) -> str:
    profile = AgentProfile.objects.create(
        name="Revoke", slug="revoke", provider="demo", provider_settings={"delay": 0}
    )
    return str(ChatSession.objects.create(owner=user, profile=profile).pk)


async def test_logout_closes_that_logins_chat_socket_and_its_messages_start_nothing(
    browsers: Any, user: Any
) -> None:
    session_id = await chat_of(user)
    here, elsewhere = await browsers(user), await browsers(user)
    chat = await here.socket(f"/ws/sessions/{session_id}/")
    other = await elsewhere.socket(f"/ws/sessions/{session_id}/")

    response = await sync_to_async(here.client.post)("/logout/")
    assert response.status_code == 302
    assert await closed_with(chat) == CLOSE_UNAUTHENTICATED
    assert await still_open(other)  # another browser's login is not ended
    assert await Run.objects.filter(session_id=session_id).acount() == 0


async def test_a_password_change_or_deactivation_closes_every_socket_of_the_user(
    browsers: Any, user: Any, staff_user: Any
) -> None:
    session_id = await chat_of(user)
    chat = await (await browsers(user)).socket(f"/ws/sessions/{session_id}/")
    monitor_browser = await browsers(staff_user)
    monitor = await monitor_browser.socket("/ws/monitor/")

    user.set_password("a new password")
    await user.asave()
    assert await closed_with(chat) == CLOSE_UNAUTHENTICATED
    assert await still_open(monitor)  # someone else's socket stays

    staff_user.is_active = False
    await staff_user.asave(update_fields=["is_active"])
    assert await closed_with(monitor) == CLOSE_UNAUTHENTICATED


def test_the_revocation_receivers_are_connected_in_every_process_once_django_is_set_up() -> None:
    # manage.py changepassword and the admin run no URLconf first: the app connects them.
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import django; django.setup()\n"
        "from django.contrib.auth.signals import user_logged_out\n"
        "from django.db.models.signals import pre_save\n"
        "keys = [entry[0] for entry in pre_save.receivers + user_logged_out.receivers]\n"
        "print(sorted(k[0] for k in keys if isinstance(k[0], str) and k[0].startswith('zett-')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "zett_site.settings"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['zett-revoke-on-credentials', 'zett-revoke-on-logout']"
