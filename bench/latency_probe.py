"""LatencyProbeExtension: stamps every streamed text delta with its index and yield time.

Used by bench/streaming.py only. Enabled in a server with
``ZETT_EXTENSIONS=bench.latency_probe.LatencyProbeExtension`` and an ExtensionSetting row
with the key ``latency_probe`` on the profile under test. Each text delta the model yields
becomes ``⟦<index>:<time.time()>⟧ <delta>``; the final answer's content is rewritten to the
concatenation of the stamped deltas, so the persisted message carries the same markers. The
markers are digits, a colon, a dot and two non-ASCII brackets: nothing HTML escaping or
markdown changes, and nothing the demo model's echo can produce.

The client (same machine, same clock) subtracts the stamp from its receipt time, and checks
that indices 0..n-1 arrive in order, each exactly once. No Django imports: bench/bare_asgi.py
uses ``stamp_stream`` without a site around it.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from agents.runtime import AgentExtension, ModelEvent, ModelRequest

OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧
MARKER = re.compile(OPEN + r"(\d+):(\d+\.\d+)" + CLOSE)


def stamp(index: int, delta: str) -> str:
    """One delta with its marker in front; the time is taken here, at the model's yield."""
    return f"{OPEN}{index}:{time.time():.6f}{CLOSE} {delta}"


async def stamp_stream(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
    """The model stream with every text delta stamped, and the answer rewritten to match."""
    index = 0
    stamped: list[str] = []
    async with aclosing(events) as inner:
        async for event in inner:
            if event.kind == "text" and event.delta:
                text = stamp(index, event.delta)
                index += 1
                stamped.append(text)
                yield ModelEvent.text(text)
            elif event.kind == "completed" and event.response is not None:
                message = event.response.message
                message.content = "".join(stamped)  # what the client must find in the answer
                yield ModelEvent.completed(dataclasses.replace(event.response, message=message))
            else:
                yield event


class LatencyProbeExtension(AgentExtension):
    """Benchmark probe: stamps each streamed text delta with its index and yield time."""

    catalog_key = "latency_probe"
    catalog_label = "Latency probe (benchmarks only)"
    # Innermost in the model onion, so the stamp is taken right at the provider's yield.
    priority = 10_000

    def on_model_request(
        self, context: Any, request: ModelRequest, call_next: Any
    ) -> AsyncIterator[ModelEvent]:
        return stamp_stream(call_next(request))


__all__ = ["CLOSE", "LatencyProbeExtension", "MARKER", "OPEN", "stamp", "stamp_stream"]
