"""The embedded channel layer: channels' in-memory layer without its per-message full scans.

channels' InMemoryChannelLayer walks every channel and every group member for expired
entries on each send-to-group and receive, so its cost grows with the square of open
sockets (a profile of 100 streaming chats spent half the server's time there). Expiry is
measured in tens of seconds, so scanning at most once per ``cleanup_interval`` changes
nothing observable. ``group_send`` also copies a message once per group rather than once
per member (plain data, dicts and lists of strings and numbers, copied without deepcopy's
bookkeeping) and queues it without spawning a task per member; receivers must treat
messages as read-only (ours do: they only render them). A channel's queue lives while its
consumer receives: channels' layer dropped it whenever it ran empty and built a new one
for the next message (in a burst of runs, ~4% of the server's time); an empty queue
nobody waits on is dropped at the next scan.
"""

from __future__ import annotations

import asyncio
import time
from copy import deepcopy
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer


class EmbeddedChannelLayer(InMemoryChannelLayer):
    """In-memory layer for one process, with amortised expiry scans."""

    cleanup_interval = 1.0  # seconds between full expiry scans

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_cleanup = 0.0
        self._receiving: dict[str, int] = {}  # receive() calls waiting, by channel

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._last_cleanup < self.cleanup_interval:
            return
        self._last_cleanup = now
        super()._clean_expired()
        for channel, queue in list(self.channels.items()):
            if queue.empty() and not self._receiving.get(channel):
                del self.channels[channel]

    def _put(self, channel: str, message: dict[str, Any], expires: float) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        try:
            queue.put_nowait((expires, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    async def receive(self, channel: str) -> dict[str, Any]:
        # As channels' receive, without building a throw-away Queue on every call.
        self.require_valid_channel_name(channel)
        self._clean_expired()
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        self._receiving[channel] = self._receiving.get(channel, 0) + 1
        try:
            _, message = await queue.get()
        finally:
            waiting = self._receiving.pop(channel, 1) - 1
            if waiting:
                self._receiving[channel] = waiting
        return message

    def has_members(self, group: str) -> bool:
        """Whether any channel of this process is in ``group`` (the layer knows them all)."""
        return bool(self.groups.get(group))

    async def flush(self) -> None:
        await super().flush()
        self._receiving = {}

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        members = self.groups.get(group)
        if not members:
            return
        shared = _copied(message)
        expires = time.time() + self.expiry
        for channel in list(members):
            try:
                self._put(channel, shared, expires)
            except ChannelFull:
                pass  # at most once, like every layer: a full member misses this message


_PLAIN = frozenset({str, int, float, bool, type(None), bytes})


def _copied(value: Any) -> Any:
    """``deepcopy`` for plain data, at a fifth of its cost; anything else goes to deepcopy."""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _PLAIN else _copied(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _PLAIN else _copied(item) for item in value]
    if kind in _PLAIN:
        return value
    return deepcopy(value)
