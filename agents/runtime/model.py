"""The model protocol: one streaming method, and the request/response data it exchanges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from .messages import AnyMessage, AssistantMessage
from .tools import ServerToolDefinition, ToolDefinition


@dataclass(slots=True, frozen=True)
class ModelUsage:
    """Token counts reported by a provider, split the way providers price them.

    ``input_tokens`` counts every prompt token the model read, cached or not, and
    ``output_tokens`` every token it generated, reasoning included. The optional fields are
    parts of those two, never additions to them: adapters normalise providers that report
    cached input separately, so nothing is counted twice and ``total_tokens`` is simply
    input plus output. ``None`` means the provider did not report that part; 0 means it
    reported none. A sum of usages adds the parts that were reported.
    """

    input_tokens: int = 0  # all prompt tokens, including cache reads and cache writes
    output_tokens: int = 0  # all generated tokens, including reasoning
    cache_read_tokens: int | None = None  # part of input served from the prompt cache
    cache_write_tokens: int | None = None  # part of input written to the prompt cache
    reasoning_tokens: int | None = None  # part of output spent on hidden reasoning

    def __post_init__(self) -> None:
        counts = (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens or 0,
            self.cache_write_tokens or 0,
            self.reasoning_tokens or 0,
        )
        if any(count < 0 for count in counts):
            raise ValueError("token counts cannot be negative")
        if (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0) > self.input_tokens:
            raise ValueError("cached tokens are part of input_tokens and cannot exceed it")
        if (self.reasoning_tokens or 0) > self.output_tokens:
            raise ValueError("reasoning tokens are part of output_tokens and cannot exceed it")

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add_part(self.cache_read_tokens, other.cache_read_tokens),
            _add_part(self.cache_write_tokens, other.cache_write_tokens),
            _add_part(self.reasoning_tokens, other.reasoning_tokens),
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """The part of input neither read from nor written to the prompt cache."""
        return self.input_tokens - (self.cache_read_tokens or 0) - (self.cache_write_tokens or 0)


def _add_part(first: int | None, second: int | None) -> int | None:
    if first is None and second is None:
        return None
    return (first or 0) + (second or 0)


@dataclass(slots=True, frozen=True)
class ModelRequest:
    """What one primary model call receives; frozen, rebuilt by the runtime after edits."""

    messages: tuple[AnyMessage, ...]
    tools: tuple[ToolDefinition, ...] = ()
    server_tools: tuple[ServerToolDefinition, ...] = ()
    session_id: str = ""
    request_id: str = ""
    iteration: int = 1  # 1-based model call number within the request


@dataclass(slots=True, frozen=True)
class ModelResponse:
    """The complete answer of one model call."""

    message: AssistantMessage
    finish_reason: str = "stop"  # "stop", "tool_calls", "length", ...
    usage: ModelUsage = ModelUsage()


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A fragment of a streamed tool call; fields arrive piecewise, keyed by index."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""  # a fragment of the JSON arguments text


ModelEventKind = Literal["text", "reasoning", "tool_call", "completed"]


@dataclass(slots=True, frozen=True)
class ModelEvent:
    """One item of a model stream; build with the class methods."""

    kind: ModelEventKind
    delta: str = ""
    tool_call_delta: ToolCallDelta | None = None
    response: ModelResponse | None = None

    @classmethod
    def text(cls, delta: str) -> ModelEvent:
        return cls("text", delta=delta)

    @classmethod
    def reasoning(cls, delta: str) -> ModelEvent:
        return cls("reasoning", delta=delta)

    @classmethod
    def tool_call(cls, delta: ToolCallDelta) -> ModelEvent:
        if not isinstance(delta, ToolCallDelta):
            raise TypeError("ModelEvent.tool_call takes a ToolCallDelta")
        return cls("tool_call", delta=delta.arguments, tool_call_delta=delta)

    @classmethod
    def completed(cls, response: ModelResponse) -> ModelEvent:
        if not isinstance(response, ModelResponse):
            raise TypeError("ModelEvent.completed takes a ModelResponse")
        return cls("completed", response=response)


@runtime_checkable
class AgentModel(Protocol):
    """Anything that streams ModelEvents for a ModelRequest, ending with one completed event."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
