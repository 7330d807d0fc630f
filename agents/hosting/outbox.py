"""Outbox: one run's frames to its session group, in order, text deltas batched per window.

A delta merges into the last unsent delta of the same kind and model call, so a burst of
tokens becomes one frame per batch window. ``seal(seq)`` stops merging into frames a
snapshot already covers: otherwise a merged frame could carry text the snapshot shows.
The channel layer is at-most-once; a send that fails is logged once per outage and the
pages find the gap through the frames' offsets. A layer that knows every member of a group
(the embedded one: ``has_members``) lets a run nobody watches skip its frames altogether: a
socket joins its session's group before it takes the snapshot, so what it did not get is in
the snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from .. import observability
from .wire import Frame

log = logging.getLogger(__name__)


class Outbox:
    __slots__ = (
        "items",
        "sealed_seq",
        "_wake",
        "_closed",
        "_layer",
        "_group",
        "_window",
        "_label",
        "_watched",
    )

    def __init__(self, layer: Any, group: str, *, window: float, label: str) -> None:
        self.items: deque[dict[str, Any]] = deque()
        self.sealed_seq = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._layer = layer
        self._group = group
        self._window = window
        self._label = label
        self._watched = getattr(layer, "has_members", None)

    def push(self, frame: Frame) -> None:
        if self._watched is not None and not self._watched(self._group):
            return  # no socket watches this run: one that joins later starts from a snapshot
        if frame["type"] == "run.delta" and self.items:
            tail = self.items[-1]
            if (
                tail["type"] == "run.delta"
                and tail["kind"] == frame["kind"]
                and tail["iteration"] == frame["iteration"]
                and tail["seq"] > self.sealed_seq
            ):
                tail["text"] += frame["text"]
                tail["seq"] = frame["seq"]
                return
        self.items.append(dict(frame))
        self._wake.set()

    def seal(self, seq: int) -> None:
        self.sealed_seq = seq

    def close(self) -> None:
        """No more frames: the sender drains what is queued and ends."""
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        """Send the frames in order; a text delta waits one batch window at most.

        A delta is held only while the previous frame went out less than a window ago,
        so the first token after a pause leaves at once and a fast stream is sent as one
        frame per window.
        """
        loop = asyncio.get_running_loop()
        last_sent = -self._window
        failing = False
        while True:
            if not self.items:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            head = self.items[0]
            if head["type"] == "run.delta" and len(self.items) == 1 and not self._closed:
                hold = last_sent + self._window - loop.time()
                if hold > 0:
                    await asyncio.sleep(hold)
            last_sent = loop.time()
            while self.items:
                frame = self.items.popleft()
                try:
                    await self._layer.group_send(self._group, frame)
                    failing = False
                except Exception as exc:
                    observability.channel_send_failed("session")
                    if not failing:
                        log.warning("could not send frames of run %s: %s", self._label, exc)
                    failing = True
