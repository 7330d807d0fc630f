"""The streaming baseline: a bare Channels consumer that streams the demo model to its socket.

bench/streaming.py serves ``bench.bare_asgi:application`` with a second Daphne process. On a
client's ``{"type": "message", "text": ..., "delay": ..., "reply_words": ...}`` the consumer
runs the same DemoModel stream in-process, with the same latency-probe stamping, and sends
every delta as its own frame in the dashboard's delta fragment shape. No database, no channel
layer, no RunManager, no batching: what is left is Daphne, Channels and the model's pacing,
the floor the dashboard is compared against.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=["channels"],
        CHANNEL_LAYERS={},
        SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY", "bench-bare"),
        USE_TZ=True,
    )
    django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from agents.providers.demo import DemoModel  # noqa: E402
from agents.runtime import ModelRequest, UserMessage  # noqa: E402
from bench.latency_probe import stamp_stream  # noqa: E402


class BareStreamConsumer(AsyncWebsocketConsumer):
    """One socket; each message streams one demo answer, one frame per delta."""

    async def connect(self) -> None:
        self.streams: set[asyncio.Task[None]] = set()
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        data = json.loads(text_data or "{}")
        if data.get("type") != "message":
            return
        task = asyncio.create_task(self._stream(data))
        self.streams.add(task)
        task.add_done_callback(self.streams.discard)

    async def _stream(self, data: dict[str, Any]) -> None:
        model = DemoModel(
            delay=float(data.get("delay", 0.02)), reply_words=int(data.get("reply_words", 0))
        )
        request = ModelRequest(messages=(UserMessage(str(data.get("text", ""))),))
        key = data.get("key", "bare")
        answer = ""
        async for event in stamp_stream(model.stream(request)):
            if event.kind == "text":
                await self.send(
                    text_data=f'<span hx-swap-oob="beforeend:#answer-{key}">'
                    f"{escape(event.delta)}</span>"
                )
            elif event.kind == "completed" and event.response is not None:
                answer = event.response.message.content
        await self.send(
            text_data=f'<div class="bubble assistant markdown" data-testid="answer">'
            f'{escape(answer)}</div><div id="run-status" data-status="completed"></div>'
        )

    async def disconnect(self, code: int) -> None:
        for task in list(self.streams):
            task.cancel()
        if self.streams:
            await asyncio.gather(*self.streams, return_exceptions=True)


application = ProtocolTypeRouter(
    {"websocket": URLRouter([path("ws/bare/", BareStreamConsumer.as_asgi())])}
)
