"""Gauges and counters fed by the sockets and the channel layer: open WebSockets, failed sends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.hosting.outbox import Outbox
from agents.observability.metrics import REGISTRY
from agents.web.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)

APP = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
TIMEOUT = 10


def _open(kind: str) -> float:
    return REGISTRY.get_sample_value("zett_websockets_open", {"consumer": kind}) or 0.0


def _cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def _monitor(user: Any = None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        cookie = await sync_to_async(_cookie)(user)
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(APP, "/ws/monitor/", headers=headers)


async def test_open_websockets_count_accepted_sockets_until_they_disconnect(
    manager: Any, staff_user: Any
) -> None:
    before = _open("monitor")
    refused = await _monitor()  # anonymous: accepted only to be closed with a code
    await refused.connect(timeout=TIMEOUT)
    await refused.disconnect()
    assert _open("monitor") == before

    socket = await _monitor(staff_user)
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    assert _open("monitor") == before + 1
    await socket.disconnect()
    assert _open("monitor") == before


class _AwayLayer:
    """A channel layer whose server is gone: every send fails."""

    def __init__(self) -> None:
        self.attempts = 0

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.attempts += 1
        raise ConnectionError("the layer is away")


async def test_every_failed_frame_send_is_counted() -> None:
    def failures() -> float:
        return (
            REGISTRY.get_sample_value("zett_channel_send_failures_total", {"kind": "session"}) or 0
        )

    before = failures()
    layer = _AwayLayer()
    outbox = Outbox(layer, "session.x", window=0.0, label="r-1")
    sender = asyncio.create_task(outbox.run())
    for seq in (1, 2, 3):
        outbox.push({"type": "run.state", "seq": seq})  # type: ignore[typeddict-item]
    outbox.close()
    await asyncio.wait_for(sender, TIMEOUT)

    assert layer.attempts == 3
    assert failures() - before == 3
