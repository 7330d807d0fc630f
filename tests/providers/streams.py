"""Consuming a model in tests: every event of one call, its texts, its one response."""

from __future__ import annotations

import asyncio
from typing import Any


async def collect(model: Any, request: Any) -> list[Any]:
    """Every ModelEvent of one call (a safety-net timeout keeps a broken test from hanging)."""

    async def run() -> list[Any]:
        return [event async for event in model.stream(request)]

    return await asyncio.wait_for(run(), 10)


def texts(events: list[Any]) -> list[str]:
    return [event.delta for event in events if event.kind == "text"]


def completed(events: list[Any]) -> Any:
    """The single completed response, which must be the last event."""
    finals = [event for event in events if event.kind == "completed"]
    assert len(finals) == 1
    assert events[-1] is finals[0]
    return finals[0].response
