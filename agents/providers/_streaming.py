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
    """Yield text deltas word by word, then each tool call's deltas, then completed."""
    for word in split_words(message.content):
        if delay:
            await asyncio.sleep(delay)
        yield ModelEvent.text(word)
    for index, call in enumerate(message.tool_calls):
        if delay:
            await asyncio.sleep(delay)
        yield ModelEvent.tool_call(
            ToolCallDelta(
                index=index, id=call.id, name=call.name, arguments=json.dumps(call.arguments)
            )
        )
    reason = finish_reason or ("tool_calls" if message.tool_calls else "stop")
    yield ModelEvent.completed(ModelResponse(message=message, finish_reason=reason, usage=usage))


def estimate_tokens(text: str) -> int:
    """A rough token count for offline models (about four characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0
