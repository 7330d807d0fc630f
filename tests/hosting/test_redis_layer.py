"""RedisFanoutLayer on a real Redis: two layers stand for two processes."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from zett_site.redis_layer import LayerUnreachable, RedisFanoutLayer

pytestmark = pytest.mark.services


def _layer(url: str, prefix: str) -> RedisFanoutLayer:
    return RedisFanoutLayer(hosts=[{"address": url}], prefix=prefix, capacity=10_000)


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[RedisFanoutLayer, RedisFanoutLayer]]:
    prefix = f"zett-test-{os.getpid()}-{os.urandom(4).hex()}"
    a, b = _layer(redis_url, prefix), _layer(redis_url, prefix)
    yield a, b
    await a.flush()
    await b.flush()


async def _take(layer: RedisFanoutLayer, channel: str, n: int) -> list[Any]:
    return [(await asyncio.wait_for(layer.receive(channel), 5))["n"] for _ in range(n)]


async def test_a_group_send_reaches_every_member_in_both_processes_once_and_in_order(two):
    a, b = two
    here, there, there_too = await a.new_channel(), await b.new_channel(), await b.new_channel()
    for layer, channel in ((a, here), (b, there), (b, there_too)):
        await layer.group_add("session.1", channel)
    for n in range(300):
        await a.group_send("session.1", {"type": "run.delta", "n": n})
    expected = list(range(300))
    assert await _take(a, here, 300) == expected
    assert await _take(b, there, 300) == expected
    assert await _take(b, there_too, 300) == expected
    await a.group_send("session.1", {"type": "run.delta", "n": "last"})
    for layer, channel in ((a, here), (b, there), (b, there_too)):
        assert await _take(layer, channel, 1) == ["last"]  # nothing duplicated before it


async def test_concurrent_group_sends_share_round_trips_and_keep_each_senders_order(two):
    a, b = two
    watcher = await b.new_channel()
    await b.group_add("session.2", watcher)

    async def sender(name: str) -> None:
        for n in range(100):
            await a.group_send("session.2", {"type": "run.delta", "n": (name, n)})

    await asyncio.gather(*(sender(f"s{i}") for i in range(20)))
    got = await _take(b, watcher, 2000)
    for i in range(20):
        assert [n for name, n in got if name == f"s{i}"] == list(range(100))


async def test_a_discarded_member_and_another_groups_members_get_nothing(two):
    a, b = two
    left, other = await b.new_channel(), await b.new_channel()
    await b.group_add("session.3", left)
    await b.group_add("session.4", other)
    await b.group_discard("session.3", left)
    await a.group_send("session.3", {"type": "x", "n": 1})
    await a.group_send("session.4", {"type": "x", "n": 2})
    assert await _take(b, other, 1) == [2]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(b.receive(left), 0.3)


async def test_direct_sends_reach_the_other_process_and_a_named_channel_is_a_queue(two):
    a, b = two
    reply_to = await a.new_channel()
    await b.send(reply_to, {"type": "control.reply", "n": 7})
    assert await _take(a, reply_to, 1) == [7]
    # A named channel is a queue: a message waits for its receiver, and only one takes it.
    named = f"{a.prefix}.worker-test"
    await a.send(named, {"type": "run.start", "n": 8})
    await a.send(named, {"type": "run.start", "n": 9})
    first, second = b.receive(named), a.receive(named)
    got = {(await asyncio.wait_for(r, 5))["n"] for r in (first, second)}
    assert got == {8, 9}
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(b.receive(named), 0.5)


async def test_a_socket_closing_leaves_no_traceback_and_no_queue(two, caplog):
    a, _ = two
    channel = await a.new_channel()
    await a.group_add("session.5", channel)
    waiting = asyncio.create_task(a.receive(channel))
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.DEBUG):
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await a.group_discard("session.5", channel)
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert channel not in a._layer().queues


async def test_through_a_redis_restart_memberships_survive_and_receivers_are_told(
    private_redis,
):
    prefix = f"zett-test-{os.urandom(4).hex()}"
    a, b = _layer(private_redis.url, prefix), _layer(private_redis.url, prefix)
    try:
        watcher = await b.new_channel()
        await b.group_add("session.6", watcher)
        await a.group_send("session.6", {"type": "x", "n": 1})
        assert await _take(b, watcher, 1) == [1]

        private_redis.stop()
        with pytest.raises(LayerUnreachable):  # the socket learns that live updates paused
            await asyncio.wait_for(b.receive(watcher), 5)
        # A socket opened during the outage gets its channel (no 500); joining says away.
        late = await b.new_channel()
        with pytest.raises(ConnectionError):
            await b.group_add("session.7", late)
        with pytest.raises(ConnectionError):
            await a.group_send("session.6", {"type": "x", "n": 2})

        private_redis.start()
        # Both memberships are subscribed again without anyone re-joining.
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                await b.group_add("zett.probe-test", late)
                break
            except ConnectionError:
                assert asyncio.get_running_loop().time() < deadline, "never reconnected"
                await asyncio.sleep(0.1)
        await a.group_send("session.6", {"type": "x", "n": 3})
        await a.group_send("session.7", {"type": "x", "n": 4})
        assert await _take(b, watcher, 1) == [3]
        assert await _take(b, late, 1) == [4]
    finally:
        await a.flush()
        await b.flush()


async def test_sites_on_different_database_numbers_do_not_hear_each_other(redis_url: str):
    prefix = f"zett-test-{os.urandom(4).hex()}"
    base = redis_url.rsplit("/", 1)[0]
    one, other = _layer(f"{base}/5", prefix), _layer(f"{base}/6", prefix)
    try:
        here, there = await one.new_channel(), await other.new_channel()
        await one.group_add("monitor", here)
        await other.group_add("monitor", there)
        await other.group_send("monitor", {"type": "x", "n": 1})
        assert await _take(other, there, 1) == [1]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(one.receive(here), 0.3)
    finally:
        await one.flush()
        await other.flush()


async def test_a_sender_changing_its_message_afterwards_changes_nothing_delivered(two):
    a, _ = two
    channel = await a.new_channel()
    await a.group_add("session.8", channel)
    message = {"type": "run.delta", "n": 1, "run": {"status": "running"}}
    await a.group_send("session.8", message)
    message["run"]["status"] = "changed"
    assert (await asyncio.wait_for(a.receive(channel), 5))["run"] == {"status": "running"}
