"""RedisFanoutLayer: a channel layer over Redis pub/sub that fans out inside each process.

Each process subscribes once to a Redis channel of its own (direct sends to its sockets) and
once per group that some socket of it is in. A group send is one PUBLISH, which Redis hands
only to the processes with members; each process decodes the message once and queues it for
all its members (who share it read-only, as with the embedded layer). A group send also
reaches the sender's own members at once (a decoded copy), without the Redis round trip.
Publishes are pipelined: whatever the event loop queued meanwhile leaves in one round trip.

At most once, like channels' other layers: a message sent while a process is disconnected is
gone (the pages' snapshot-then-live covers that). Memberships live in the process, so a Redis
restart loses none. While the subscriber connection is down, every waiting ``receive`` raises
once (the socket tells its page that live updates are reconnecting), ``group_add`` records the
membership and raises, and the subscriber reconnects with backoff, subscribing everything
again before it reports ready; ``LayerWatch`` then has the sockets refresh their pages.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
import uuid
from typing import Any

import msgpack
from channels.layers import BaseChannelLayer
from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

log = logging.getLogger(__name__)

_LOST = object()  # queued to every receiver when the subscriber connection drops


class LayerUnreachable(ConnectionError):
    """Redis cannot be reached right now (the subscriber is reconnecting)."""


class RedisFanoutLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(
        self,
        hosts: list[dict[str, Any]] | None = None,
        prefix: str = "zett",
        expiry: int = 60,
        group_expiry: int = 86400,
        capacity: int = 1000,
        channel_capacity: dict[str, int] | None = None,
        ready_timeout: float = 1.0,
        confirm_timeout: float = 5.0,
    ) -> None:
        super().__init__(expiry=expiry, capacity=capacity, channel_capacity=channel_capacity)
        host = dict((hosts or [{"address": "redis://127.0.0.1:6379/0"}])[0])
        self.address = host.pop("address")
        self.options = host
        # Pub/sub ignores database numbers: the number goes into the channel names, so sites
        # sharing one server on different numbers stay apart, as with the core layer.
        database = urllib.parse.urlsplit(self.address).path.strip("/") or "0"
        self.prefix = f"{prefix}.{database}"
        self.group_expiry = group_expiry
        # How long a join waits for a subscriber that is reconnecting (an outage: answer
        # soon), and for Redis to confirm a new subscription on a live connection (a busy
        # process reads the confirmation late; giving up would mark the page reconnecting).
        self.ready_timeout = ready_timeout
        self.confirm_timeout = confirm_timeout
        self._loops: dict[asyncio.AbstractEventLoop, _LoopLayer] = {}

    def _layer(self) -> _LoopLayer:
        loop = asyncio.get_running_loop()
        layer = self._loops.get(loop)
        if layer is None:
            for old in [old for old in self._loops if old.is_closed()]:
                del self._loops[old]
            layer = self._loops[loop] = _LoopLayer(self)
        return layer

    def connection(self, index: int) -> aioredis.Redis:
        """A client of the server (LayerWatch reads its ``run_id`` to notice restarts)."""
        return self._layer().client

    async def new_channel(self, prefix: str = "specific.") -> str:
        return self._layer().new_channel(prefix)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert self.require_valid_channel_name(channel)
        await self._layer().send(channel, message)

    async def receive(self, channel: str) -> dict[str, Any]:
        assert self.require_valid_channel_name(channel)
        return await self._layer().receive(channel)

    async def group_add(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group)
        assert self.require_valid_channel_name(channel)
        await self._layer().group_add(group, channel)

    async def group_discard(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group)
        assert self.require_valid_channel_name(channel)
        await self._layer().group_discard(group, channel)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group)
        await self._layer().group_send(group, message)

    async def flush(self) -> None:
        layer = self._loops.pop(asyncio.get_running_loop(), None)
        if layer is not None:
            await layer.close()

    async def close_pools(self) -> None:
        await self.flush()


class _LoopLayer:
    """The layer's state on one event loop: local queues, memberships, the two connections."""

    def __init__(self, owner: RedisFanoutLayer) -> None:
        self.owner = owner
        self.loop = asyncio.get_running_loop()
        # Direct sends to this process's channels ("<process>!<id>") arrive on this one.
        self.process = f"{owner.prefix}.p.{uuid.uuid4().hex[:16]}"
        self.queues: dict[str, asyncio.Queue[Any]] = {}
        # Redis channel -> local channel names it feeds (a group's members, or a named
        # channel someone here receives from).
        self.subs: dict[str, set[str]] = {self.process: set()}
        options = {"socket_connect_timeout": 2, "socket_timeout": 5, **owner.options}
        self.client = aioredis.Redis.from_url(owner.address, **options)
        # The subscriber must notice a dropped connection, not retry behind our back.
        sub_options = {k: v for k, v in options.items() if k != "retry_on_error"}
        sub_options.update(socket_timeout=None, retry=Retry(NoBackoff(), 0))
        self.sub_client = aioredis.Redis.from_url(owner.address, **sub_options)
        self.pubsub: Any = None
        self.ready = asyncio.Event()
        self._confirming: dict[str, asyncio.Future[None]] = {}
        self._pending: list[tuple[str, bytes, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._subscriber = self.loop.create_task(self._subscribe_forever(), name="zett-layer-sub")

    # -- channels ---------------------------------------------------------------------------

    def _queue(self, channel: str) -> asyncio.Queue[Any]:
        queue = self.queues.get(channel)
        if queue is None:
            queue = self.queues[channel] = asyncio.Queue(self.owner.get_capacity(channel))
        return queue

    def new_channel(self, prefix: str) -> str:
        channel = f"{self.process}!{prefix}{uuid.uuid4().hex[:24]}"
        self._queue(channel)
        return channel

    def _is_named(self, channel: str) -> bool:
        return "!" not in channel

    def _named_key(self, channel: str) -> str:
        return f"{self.owner.prefix}.c.{channel}"

    def _group_key(self, group: str) -> str:
        return f"{self.owner.prefix}.g.{group}"

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        data = msgpack.packb([channel, message], use_bin_type=True)
        if channel.startswith(self.process + "!"):
            self._put(channel, msgpack.unpackb(data, raw=False)[1])
            return
        if self._is_named(channel):
            await self._enqueue(self._named_key(channel), data)
        else:
            await self._publish(channel.split("!", 1)[0], data)

    async def receive(self, channel: str) -> dict[str, Any]:
        if self._is_named(channel):
            return await self._dequeue(self._named_key(channel))
        queue = self._queue(channel)
        try:
            message = await queue.get()
        except asyncio.CancelledError:
            # Channels cancels a consumer's receive when the consumer ends: forget its queue
            # (a later receive on the same name starts a new one).
            if self.queues.get(channel) is queue:
                del self.queues[channel]
            raise
        if message is _LOST:
            raise LayerUnreachable("the connection to Redis was lost")
        return message  # type: ignore[no-any-return]

    def _put(self, channel: str, message: Any) -> None:
        queue = self.queues.get(channel)
        if queue is None:
            return  # nobody receives here any more
        try:
            queue.put_nowait(message)
        except asyncio.QueueFull:
            log.debug("channel %s is full; a message was dropped", channel)

    # -- named channels (work queues such as zett-runs): a Redis list each -------------------
    # A message waits there for a receiver (up to ``expiry``), and exactly one receiver takes
    # it, as with channels-redis; a process's own channels need no such queue.

    async def _enqueue(self, key: str, data: bytes) -> None:
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.rpush(key, data)
                pipe.expire(key, self.owner.expiry)
                await pipe.execute()
        except Exception as exc:
            raise LayerUnreachable(str(exc)) from exc

    async def _dequeue(self, key: str) -> dict[str, Any]:
        while True:
            # Shorter than the client's socket timeout, so an idle wait never times out.
            popped = await self.client.blpop([key], timeout=2)
            if popped is not None:
                _, body = msgpack.unpackb(popped[1], raw=False)
                return body  # type: ignore[no-any-return]

    # -- groups -----------------------------------------------------------------------------

    async def group_add(self, group: str, channel: str) -> None:
        key = self._group_key(group)
        members = self.subs.setdefault(key, set())
        first = not members
        members.add(channel)
        if first:
            await self._subscribe(key)
        elif not self.ready.is_set():
            await self._wait_ready()

    async def group_discard(self, group: str, channel: str) -> None:
        key = self._group_key(group)
        members = self.subs.get(key)
        if members is None or channel not in members:
            return
        members.discard(channel)
        if members:
            return
        del self.subs[key]
        if self.ready.is_set() and self.pubsub is not None:
            try:
                await self.pubsub.unsubscribe(key)
            except Exception as exc:  # the subscription ends with the connection anyway
                log.debug("could not unsubscribe %s: %s", key, exc)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        key = self._group_key(group)
        data = msgpack.packb([self.process, message], use_bin_type=True)
        members = self.subs.get(key)
        if members:
            # A copy, as a remote member gets: the sender may reuse its dict.
            local = msgpack.unpackb(data, raw=False)[1]
            for channel in members:
                self._put(channel, local)
        await self._publish(key, data)

    # -- publishing: one pipeline per loop pass ---------------------------------------------

    async def _publish(self, key: str, data: bytes) -> None:
        future: asyncio.Future[None] = self.loop.create_future()
        self._pending.append((key, data, future))
        if self._flusher is None:
            self._flusher = self.loop.create_task(self._flush(), name="zett-layer-publish")
        await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                error: Exception | None = None
                try:
                    pipe = self.client.pipeline(transaction=False)
                    for key, data, _ in batch:
                        pipe.publish(key, data)
                    await pipe.execute()
                except Exception as exc:
                    error = exc
                for _, _, future in batch:
                    if future.done():
                        continue
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(LayerUnreachable(str(error)))
        finally:
            self._flusher = None

    # -- subscribing ------------------------------------------------------------------------

    async def _wait_ready(self) -> None:
        try:
            await asyncio.wait_for(self.ready.wait(), self.owner.ready_timeout)
        except TimeoutError:
            raise LayerUnreachable("Redis is unreachable; the membership returns with it") from None

    async def _subscribe(self, key: str) -> None:
        """Subscribe while connected, and wait until Redis confirmed it; else raise."""
        if not self.ready.is_set():
            await self._wait_ready()  # the reconnect subscribes everything in subs
            return
        confirmed = self._confirming.get(key)
        if confirmed is None:
            confirmed = self._confirming[key] = self.loop.create_future()
            try:
                await self.pubsub.subscribe(key)
            except Exception as exc:
                self._confirming.pop(key, None)
                raise LayerUnreachable(str(exc)) from exc
        try:
            await asyncio.wait_for(asyncio.shield(confirmed), self.owner.confirm_timeout)
        except TimeoutError:
            raise LayerUnreachable(f"Redis did not confirm the subscription to {key}") from None

    async def _subscribe_forever(self) -> None:
        delay = 0.1
        while True:
            pubsub = self.sub_client.pubsub()
            try:
                keys = list(self.subs)
                await pubsub.subscribe(*keys)
                waiting = set(keys)
                while waiting:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None and message["type"] == "subscribe":
                        waiting.discard(_text(message["channel"]))
                    elif message is not None:
                        self._dispatch(message)
                self.pubsub = pubsub
                # Memberships added while we subscribed are in subs but maybe not subscribed.
                missing = [key for key in self.subs if key not in keys]
                if missing:
                    await pubsub.subscribe(*missing)
                self.ready.set()
                delay = 0.1
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None:
                        self._dispatch(message)
            except asyncio.CancelledError:
                await _close(pubsub)
                raise
            except Exception as exc:
                was_ready = self.ready.is_set()
                self.ready.clear()
                self.pubsub = None
                await _close(pubsub)
                for future in self._confirming.values():
                    if not future.done():
                        future.set_exception(LayerUnreachable(str(exc)))
                        future.exception()  # retrieved: nobody may be waiting any more
                self._confirming.clear()
                if was_ready:
                    log.warning("the channel layer lost Redis: %s", exc)
                    for queue in self.queues.values():
                        try:
                            queue.put_nowait(_LOST)
                        except asyncio.QueueFull:
                            pass
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        key = _text(message["channel"])
        if kind == "subscribe":
            future = self._confirming.pop(key, None)
            if future is not None and not future.done():
                future.set_result(None)
            return
        if kind != "message":
            return
        try:
            target, body = msgpack.unpackb(message["data"], raw=False)
        except Exception:
            log.warning("dropped an undecodable message on %s", key)
            return
        if key == self.process:
            self._put(target, body)
        elif target == self.process:
            return  # our own group send: its local members have it already
        else:
            for channel in self.subs.get(key, ()):
                self._put(channel, body)

    async def close(self) -> None:
        self._subscriber.cancel()
        await asyncio.gather(self._subscriber, return_exceptions=True)
        await self.client.aclose()
        await self.sub_client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _close(pubsub: Any) -> None:
    try:
        await pubsub.aclose()
    except Exception as exc:  # a connection already gone
        log.debug("closing the subscriber: %s", exc)
