"""Per-request configuration and mutable state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .events import AgentPhase
from .messages import AnyMessage
from .model import ModelUsage


def _blank_to_none(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"AgentRunConfig.{name} must be a str or None")
    value = value.strip()
    return value or None


@dataclass(slots=True, frozen=True)
class AgentRunConfig:
    """Who a request belongs to. Blank ids become None; the runtime fills missing ones."""

    session_id: str | None = None
    request_id: str | None = None
    parent_session_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("session_id", "request_id", "parent_session_id"):
            object.__setattr__(self, name, _blank_to_none(getattr(self, name), name))


@dataclass(slots=True)
class AgentState:
    """What one request works on: its messages, phase, iteration count and usage."""

    messages: list[AnyMessage] = field(default_factory=list)  # model context, in order
    phase: AgentPhase = AgentPhase.CREATED
    iteration: int = 0  # model calls made so far for this input
    usage: ModelUsage = field(default_factory=ModelUsage)  # summed over model calls
    metadata: dict[str, Any] = field(default_factory=dict)
    # time.monotonic() when the model call under way (or the last one) streamed its first
    # delta; None until it does. Lets after_model time the first chunk without wrapping
    # the stream, which would cost a call per delta.
    first_chunk_at: float | None = None
