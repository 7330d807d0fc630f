"""The model protocol: one streaming method, and the request/response data it exchanges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from .messages import AnyMessage, AssistantMessage
from .tools import ServerToolDefinition, ToolDefinition


@dataclass(slots=True, frozen=True)
class ModelUsage:
    """Token counts reported by a provider."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        if self.input_tokens < 0 or self.output_tokens < 0:
            raise ValueError("token counts cannot be negative")

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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
