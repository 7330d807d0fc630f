"""Helpers shared by the offline models: stream an AssistantMessage as deltas."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from ..runtime.messages import AssistantMessage
from ..runtime.model import ModelEvent, ModelResponse, ModelUsage, ToolCallDelta

_WORDS = re.compile(r"\S+\s*|\s+")


def split_words(text: str) -> list[str]:
    """Split text into word-sized deltas that concatenate back to the text exactly."""
    return _WORDS.findall(text) or ([text] if text else [])


async def stream_message(
    message: AssistantMessage,
    *,
    usage: ModelUsage,
    delay: float = 0.0,
    finish_reason: str | None = None,
) -> AsyncIterator[ModelEvent]:
    """Yield text deltas word by word, then each tool call's deltas, then completed.

    With a ``delay``, the n-th delta is due n delays after the stream began, on the loop's
    clock, as a remote model's tokens are: they arrive at the model's pace while the host is
    busy, and a host that falls behind reads the ones already due at once. (A sleep of
    ``delay`` after each delta added every wake-up's lag, so a loaded server slowed the
    model it was measured against.)
    """
    pace = _Pace(delay)
    for word in split_words(message.content):
        await pace.next()
        yield ModelEvent.text(word)
    for index, call in enumerate(message.tool_calls):
        await pace.next()
        yield ModelEvent.tool_call(
            ToolCallDelta(
                index=index, id=call.id, name=call.name, arguments=json.dumps(call.arguments)
            )
        )
    reason = finish_reason or ("tool_calls" if message.tool_calls else "stop")
    yield ModelEvent.completed(ModelResponse(message=message, finish_reason=reason, usage=usage))


class _Pace:
    """Waits until the next delta is due: ``delay`` after the one before, on schedule."""

    __slots__ = ("_delay", "_due", "_loop")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._loop = asyncio.get_running_loop() if delay else None
        self._due = self._loop.time() if self._loop is not None else 0.0

    async def next(self) -> None:
        if self._loop is None:
            return
        self._due += self._delay
        # Behind schedule, still yield once to the loop, as a socket read would.
        await asyncio.sleep(max(0.0, self._due - self._loop.time()))


def estimate_tokens(text: str) -> int:
    """A rough token count for offline models (about four characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0
