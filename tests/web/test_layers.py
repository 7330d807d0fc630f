"""The embedded channel layer keeps the in-memory layer's behaviour at a lower cost."""

from __future__ import annotations

import asyncio

import pytest

from zett_site.layers import EmbeddedChannelLayer


async def test_group_send_reaches_every_member_in_order() -> None:
    layer = EmbeddedChannelLayer(capacity=10)
    members = [await layer.new_channel() for _ in range(3)]
    for channel in members:
        await layer.group_add("session.x", channel)
    for number in range(3):
        await layer.group_send("session.x", {"type": "run.delta", "n": number})
    for channel in members:
        received = [(await layer.receive(channel))["n"] for _ in range(3)]
        assert received == [0, 1, 2]


async def test_a_full_member_misses_messages_without_blocking_the_others() -> None:
    layer = EmbeddedChannelLayer(capacity=1)
    full, free = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("g", full)
    await layer.group_add("g", free)
    await layer.group_send("g", {"type": "a"})
    assert (await layer.receive(free))["type"] == "a"
    await layer.group_send("g", {"type": "b"})  # `full` still holds "a"
    assert (await layer.receive(free))["type"] == "b"
    assert (await layer.receive(full))["type"] == "a"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(full), 0.05)


async def test_the_sender_cannot_change_what_members_received() -> None:
    layer = EmbeddedChannelLayer()
    channel = await layer.new_channel()
    await layer.group_add("g", channel)
    message = {"type": "run.state", "run": {"status": "running"}}
    await layer.group_send("g", message)
    message["run"]["status"] = "changed after sending"
    assert (await layer.receive(channel))["run"]["status"] == "running"


async def test_expired_messages_are_still_cleaned_up() -> None:
    layer = EmbeddedChannelLayer(expiry=0)
    layer.cleanup_interval = 0
    stale = await layer.new_channel()
    await layer.group_add("g", stale)
    await layer.group_send("g", {"type": "old"})
    await asyncio.sleep(0.01)
    await layer.group_send("g", {"type": "trigger a scan"})
    # The member with an expired message was dropped from the group, as in channels' layer.
    assert stale not in layer.groups.get("g", {})
