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


async def test_a_channel_keeps_its_queue_while_its_consumer_receives() -> None:
    layer = EmbeddedChannelLayer()
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "first"})
    queue = layer.channels[channel]
    assert (await layer.receive(channel))["type"] == "first"
    await layer.send(channel, {"type": "second"})
    assert layer.channels[channel] is queue  # not dropped when it ran empty and rebuilt
    assert (await layer.receive(channel))["type"] == "second"


async def test_an_empty_queue_is_dropped_at_a_scan_unless_a_consumer_waits_on_it() -> None:
    layer = EmbeddedChannelLayer()
    layer.cleanup_interval = 0
    idle, waiting = await layer.new_channel(), await layer.new_channel()
    for channel in (idle, waiting):
        await layer.send(channel, {"type": "x"})
        await layer.receive(channel)
    receiver = asyncio.ensure_future(layer.receive(waiting))
    await asyncio.sleep(0)  # it now waits on the empty queue
    await layer.group_send("nobody", {"type": "trigger a scan"})

    assert idle not in layer.channels  # nothing kept for a channel nobody reads
    assert waiting in layer.channels
    await layer.send(waiting, {"type": "for the waiting consumer"})
    assert (await asyncio.wait_for(receiver, 1))["type"] == "for the waiting consumer"


async def test_group_send_copies_nested_plain_data_and_keeps_other_values_intact() -> None:
    layer = EmbeddedChannelLayer()
    channel = await layer.new_channel()
    await layer.group_add("g", channel)
    rows = [{"id": 1, "args": {"x": [1, 2]}}]
    message = {"type": "run.state", "waits": rows, "flags": (True, None), "n": 1.5, "b": b"\x00"}
    await layer.group_send("g", message)
    rows[0]["args"]["x"].append(3)
    received = await layer.receive(channel)
    assert received == {
        "type": "run.state",
        "waits": [{"id": 1, "args": {"x": [1, 2]}}],
        "flags": (True, None),
        "n": 1.5,
        "b": b"\x00",
    }
