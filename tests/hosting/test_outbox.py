"""Outbox: one run's frames, in order, with text deltas merged until a snapshot seals them."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.hosting.outbox import Outbox


def _delta(seq: int, text: str, *, offset: int, kind: str = "text", iteration: int = 1) -> Any:
    return {
        "type": "run.delta",
        "request_id": "r",
        "seq": seq,
        "first_seq": seq,
        "kind": kind,
        "text": text,
        "iteration": iteration,
        "offset": offset,
    }


def _state(seq: int) -> Any:
    return {"type": "run.state", "request_id": "r", "seq": seq, "run": {}}


def _outbox(layer: Any = None, group: str = "session.outbox") -> Outbox:
    return Outbox(layer, group, window=0.0, label="r")


def test_deltas_of_one_kind_and_model_call_merge_into_the_unsent_frame() -> None:
    outbox = _outbox()
    outbox.push(_delta(1, "Hel", offset=0))
    outbox.push(_delta(2, "lo", offset=3))
    outbox.push(_delta(3, "!", offset=5))
    assert [(f["text"], f["offset"], f["first_seq"], f["seq"]) for f in outbox.items] == [
        ("Hello!", 0, 1, 3)
    ]


def test_a_delta_of_another_kind_call_or_after_another_frame_starts_a_new_frame() -> None:
    outbox = _outbox()
    outbox.push(_delta(1, "a", offset=0))
    outbox.push(_delta(2, "r", offset=0, kind="reasoning"))
    outbox.push(_delta(3, "b", offset=1))
    outbox.push(_delta(4, "c", offset=0, iteration=2))
    outbox.push(_state(5))
    outbox.push(_delta(6, "d", offset=1, iteration=2))
    assert [(f["type"], f.get("text"), f["seq"]) for f in outbox.items] == [
        ("run.delta", "a", 1),
        ("run.delta", "r", 2),
        ("run.delta", "b", 3),
        ("run.delta", "c", 4),
        ("run.state", None, 5),
        ("run.delta", "d", 6),
    ]


def test_a_sealed_frame_takes_no_more_text() -> None:
    # A snapshot taken at seq 2 shows "Hello"; a page drops frames with seq <= 2 as covered.
    # Text merged into the covered frame would be dropped with it and never shown.
    outbox = _outbox()
    outbox.push(_delta(1, "Hel", offset=0))
    outbox.push(_delta(2, "lo", offset=3))
    outbox.seal(2)
    outbox.push(_delta(3, " wor", offset=5))
    outbox.push(_delta(4, "ld", offset=9))
    assert [(f["text"], f["offset"], f["seq"]) for f in outbox.items] == [
        ("Hello", 0, 2),
        (" world", 5, 4),  # frames after the seal still merge with each other
    ]


def test_the_pushed_frame_is_copied_so_merging_never_edits_the_caller_s_dict() -> None:
    outbox = _outbox()
    first = _delta(1, "a", offset=0)
    outbox.push(first)
    outbox.push(_delta(2, "b", offset=1))
    assert first["text"] == "a" and first["seq"] == 1


async def test_frames_go_out_in_order_and_close_drains_what_is_queued(channel_layer: Any) -> None:
    group = "session.outbox-order"
    channel = await channel_layer.new_channel("test-outbox.")
    await channel_layer.group_add(group, channel)
    outbox = _outbox(channel_layer, group)
    for seq in range(1, 6):
        outbox.push(_state(seq))
    outbox.push(_delta(6, "x", offset=0))
    outbox.close()
    await asyncio.wait_for(outbox.run(), 10)  # returns only once everything queued is sent
    received = [await channel_layer.receive(channel) for _ in range(6)]
    assert [frame["seq"] for frame in received] == [1, 2, 3, 4, 5, 6]
    assert received[-1]["text"] == "x"


async def test_the_sender_waits_for_frames_and_ends_after_close(channel_layer: Any) -> None:
    group = "session.outbox-wait"
    channel = await channel_layer.new_channel("test-outbox.")
    await channel_layer.group_add(group, channel)
    outbox = _outbox(channel_layer, group)
    sender = asyncio.create_task(outbox.run())
    outbox.push(_state(1))
    assert (await asyncio.wait_for(channel_layer.receive(channel), 10))["seq"] == 1
    assert not sender.done()
    outbox.push(_state(2))
    outbox.close()
    await asyncio.wait_for(sender, 10)
    assert (await asyncio.wait_for(channel_layer.receive(channel), 10))["seq"] == 2


class _Down:
    """A channel layer that is away: every send fails."""

    def __init__(self) -> None:
        self.attempts = 0

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.attempts += 1
        raise ConnectionError("layer is down")


async def test_a_layer_outage_loses_frames_but_never_stops_the_sender() -> None:
    layer = _Down()
    outbox = _outbox(layer)
    outbox.push(_state(1))
    outbox.push(_state(2))
    outbox.close()
    await asyncio.wait_for(outbox.run(), 10)
    assert layer.attempts == 2 and not outbox.items


async def test_a_run_nobody_watches_queues_nothing_and_a_socket_that_joins_gets_what_follows(
    channel_layer: Any,
) -> None:
    assert hasattr(channel_layer, "has_members"), "the embedded layer knows its groups"
    group = "session.unwatched"
    outbox = _outbox(channel_layer, group)
    sender = asyncio.create_task(outbox.run())
    outbox.push(_delta(1, "nobody ", offset=0))
    outbox.push(_state(2))
    assert not outbox.items  # nothing held, nothing sent: a socket joining later snapshots

    channel = await channel_layer.new_channel("test-outbox.")
    await channel_layer.group_add(group, channel)
    outbox.push(_delta(3, "sees ", offset=7))
    outbox.push(_state(4))
    received = [await asyncio.wait_for(channel_layer.receive(channel), 10) for _ in range(2)]
    assert [(f["type"], f["seq"]) for f in received] == [("run.delta", 3), ("run.state", 4)]
    outbox.close()
    await asyncio.wait_for(sender, 10)
