"""The offline models keep their pace against the clock, like a remote model's tokens."""

from __future__ import annotations

import time

from agents.providers.scripted import ScriptedModel
from agents.runtime import ModelRequest, UserMessage

WORDS = " ".join(f"w{i}" for i in range(20))  # twenty deltas
DELAY = 0.02


async def _arrivals(hold_after_first: float) -> list[float]:
    """When each text delta reached a reader that blocked the loop once, after the first."""
    model = ScriptedModel([WORDS], delay=DELAY)
    stream = model.stream(ModelRequest(messages=(UserMessage("go"),)))
    began = time.monotonic()
    arrivals: list[float] = []
    async for event in stream:
        if event.kind != "text":
            continue
        arrivals.append(time.monotonic() - began)
        if len(arrivals) == 1 and hold_after_first:
            time.sleep(hold_after_first)  # noqa: ASYNC251 (the host busy: the loop blocked)
    return arrivals


async def test_deltas_come_one_delay_apart_on_an_idle_loop() -> None:
    arrivals = await _arrivals(0)
    assert len(arrivals) == 20
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert min(gaps) >= DELAY * 0.8
    assert arrivals[-1] >= 20 * DELAY * 0.95


async def test_a_busy_host_reads_the_deltas_already_due_at_once_and_is_back_on_schedule() -> None:
    # Blocked for ten deltas' time after the first, the reader then gets the nine that came
    # due meanwhile without waiting, and the stream ends on the model's schedule, not later.
    arrivals = await _arrivals(10 * DELAY)
    caught_up = [b - a for a, b in zip(arrivals[1:10], arrivals[2:11], strict=False)]
    assert max(caught_up) < DELAY / 2
    assert arrivals[-1] < 20 * DELAY + 0.1  # sleeping after each delta: 30 delays and more
