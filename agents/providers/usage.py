"""Token usage as each wire reports it, normalised to ModelUsage so nothing counts twice.

The two APIs split the same numbers differently:

- Chat Completions: ``prompt_tokens`` already includes the cached prompt tokens, which
  ``prompt_tokens_details.cached_tokens`` breaks out; ``completion_tokens`` already
  includes ``completion_tokens_details.reasoning_tokens``. Cache writes are not reported
  (nor billed). DeepSeek reports cache hits as ``prompt_cache_hit_tokens`` instead.
- Messages (Anthropic): ``input_tokens`` counts only the prompt tokens after the last cache
  breakpoint; ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` come on top.
  Thinking tokens are inside ``output_tokens`` and not broken out. ``message_start`` carries
  the input counts, ``message_delta`` the final, cumulative counts (and, on newer API
  versions, the input counts again).

ModelUsage's ``input_tokens`` is every prompt token and its cache fields are parts of it,
so the Anthropic numbers are added up and the Chat Completions numbers are taken as they
are. A part a buggy server reports larger than its whole is capped at the whole rather than
failing an answer that arrived. No SDK is imported: the functions read attributes (SDK
objects) or keys (decoded JSON) alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtime.model import ModelUsage


def openai_usage(usage: Any) -> ModelUsage:
    """The ModelUsage of a Chat Completions ``usage`` object (the stream's last chunk)."""
    prompt = _count(usage, "prompt_tokens") or 0
    completion = _count(usage, "completion_tokens") or 0
    cached = _count(_get(usage, "prompt_tokens_details"), "cached_tokens")
    if cached is None:
        cached = _count(usage, "prompt_cache_hit_tokens")
    reasoning = _count(_get(usage, "completion_tokens_details"), "reasoning_tokens")
    return ModelUsage(
        input_tokens=prompt,
        output_tokens=completion,
        cache_read_tokens=_capped(cached, prompt),
        reasoning_tokens=_capped(reasoning, completion),
    )


_ANTHROPIC_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


@dataclass(slots=True)
class AnthropicUsageTally:
    """The usage of one Messages stream, updated from ``message_start`` and ``message_delta``."""

    latest: dict[str, int] = field(default_factory=dict)  # wire field -> its last reported value

    def update(self, usage: Any) -> None:
        """Take every count this event reports; the counts are cumulative, so later wins."""
        if usage is None:
            return
        for name in _ANTHROPIC_FIELDS:
            count = _count(usage, name)
            if count is not None:
                self.latest[name] = count

    def usage(self) -> ModelUsage:
        """The normalised usage: input includes the cached prompt tokens."""
        uncached = self.latest.get("input_tokens", 0)
        written = self.latest.get("cache_creation_input_tokens")
        read = self.latest.get("cache_read_input_tokens")
        return ModelUsage(
            input_tokens=uncached + (written or 0) + (read or 0),
            output_tokens=self.latest.get("output_tokens", 0),
            cache_read_tokens=read,
            cache_write_tokens=written,
        )


def _get(source: Any, name: str) -> Any:
    if source is None:
        return None
    if isinstance(source, dict):
        return source.get(name)
    return getattr(source, name, None)


def _count(source: Any, name: str) -> int | None:
    value = _get(source, name)
    # bool is an int; a count that is not a whole non-negative number is noise, not usage.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _capped(part: int | None, whole: int) -> int | None:
    return None if part is None else min(part, whole)
