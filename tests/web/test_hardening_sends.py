"""Frames for a client that has already gone are dropped without an error.

Daphne answers a client's Close at once, but tells the application only when the TCP
connection is gone; in between its `send` raises autobahn's Disconnected ("Attempt to send on
a closed protocol"). The server below behaves exactly like that, so the consumer runs as under
Daphne in that window.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from autobahn.exception import Disconnected

from agents.hosting import session_group
from agents.web.consumers import MonitorConsumer, SessionConsumer

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 10  # a safety net; every wait is for something a correct consumer does promptly


class ClosingServer:
    """The server side of one socket: open until `say_goodbye()`, then refusing sends."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.open = True
        self._changed = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, message: dict[str, Any]) -> None:
        self._changed.set()
        if not self.open:
            self.refused.append(message)
            raise Disconnected("Attempt to send on a closed protocol")
        self.sent.append(message)

    def say_goodbye(self) -> None:
        self.open = False

    async def wait(self, probe: Any) -> None:
        async with asyncio.timeout(TIMEOUT):
            while not probe():
                self._changed.clear()
                await self._changed.wait()


def _scope(user: Any, path: str, kwargs: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "websocket",
        "path": path,
        "headers": [],
        "subprotocols": [],
        "user": user,
        "url_route": {"args": (), "kwargs": kwargs},
    }


async def _open(consumer: Any, scope: dict[str, Any]) -> tuple[ClosingServer, asyncio.Task[Any]]:
    server = ClosingServer()
    task = asyncio.create_task(consumer.as_asgi()(scope, server.receive, server.send))
    await server.inbox.put({"type": "websocket.connect"})
    # Accepted, then the first frame (snapshot or tables) sent.
    await server.wait(lambda: sum(m["type"] == "websocket.send" for m in server.sent) >= 1)
    return server, task


async def _finishes_cleanly(server: ClosingServer, task: asyncio.Task[Any]) -> None:
    assert not task.done(), task.exception() if task.done() else None
    await server.inbox.put({"type": "websocket.disconnect", "code": 1000})
    async with asyncio.timeout(TIMEOUT):
        await task  # raises whatever escaped the consumer


async def test_chat_frames_after_the_clients_goodbye_are_dropped(
    user, make_profile, make_session, channel_layer, manager
):
    profile = await make_profile()
    session = await make_session(user, profile)
    scope = _scope(user, f"/ws/sessions/{session.pk}/", {"session_id": str(session.pk)})
    server, task = await _open(SessionConsumer, scope)
    server.say_goodbye()

    # A browser frame answered with an error, and a group frame rendered for the page.
    await server.inbox.put({"type": "websocket.receive", "text": "not json"})
    await server.wait(lambda: len(server.refused) >= 1)
    await channel_layer.group_send(
        session_group(str(session.pk)),
        {"type": "run.finished", "request_id": "r-1", "seq": 5, "run": None},
    )
    await server.wait(lambda: len(server.refused) >= 2)
    await _finishes_cleanly(server, task)


async def test_monitor_frames_after_the_clients_goodbye_are_dropped(
    staff_user, channel_layer, manager
):
    server, task = await _open(MonitorConsumer, _scope(staff_user, "/ws/monitor/", {}))
    server.say_goodbye()
    await server.inbox.put({"type": "websocket.receive", "text": "[[[]]]"})
    await server.wait(lambda: len(server.refused) >= 1)
    await _finishes_cleanly(server, task)
