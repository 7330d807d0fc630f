"""Events: outward AgentEvents for callers, ExtensionEvents delivered between extensions."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .messages import AnyMessage, ToolCall

if TYPE_CHECKING:
    from .context import AgentRunContext
    from .model import ModelUsage


class AgentPhase(str, enum.Enum):  # noqa: UP042 -- StrEnum would change str(member)
    """Where a request is in its lifecycle; every outward event carries one."""

    CREATED = "created"
    LOADING_CONTEXT = "loading_context"
    READY = "ready"
    GENERATING = "generating"
    RUNNING_TOOL = "running_tool"
    COMPACTING = "compacting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (AgentPhase.COMPLETED, AgentPhase.FAILED, AgentPhase.CANCELLED)


class AgentEventType(str, enum.Enum):  # noqa: UP042 -- StrEnum would change str(member)
    """Kinds of outward events a request streams to its caller."""

    RUN_STARTED = "run_started"
    MODEL_STARTED = "model_started"
    TEXT_DELTA = "text_delta"
    REASONING_DELTA = "reasoning_delta"
    TOOL_CALL_DELTA = "tool_call_delta"
    MODEL_COMPLETED = "model_completed"
    TOOL_STARTED = "tool_started"
    TOOL_COMPLETED = "tool_completed"
    TOOL_FAILED = "tool_failed"
    TOOL_SKIPPED = "tool_skipped"
    STEERING_STARTED = "steering_started"
    COMPACTION_STARTED = "compaction_started"
    COMPACTION_COMPLETED = "compaction_completed"
    RUN_COMPLETED = "run_completed"
    CUSTOM = "custom"


#: Outward event types an extension may send through ``AgentRunContext.emit``.
EXTENSION_EMITTABLE = frozenset(
    {AgentEventType.CUSTOM, AgentEventType.COMPACTION_STARTED, AgentEventType.COMPACTION_COMPLETED}
)


@dataclass(slots=True, frozen=True)
class AgentEvent:
    """One outward event. The runtime stamps session, request, seq and phase."""

    type: AgentEventType
    session_id: str = ""
    request_id: str = ""
    seq: int = 0  # per request, starting at 1; 0 until the runtime stamps it
    phase: AgentPhase = AgentPhase.CREATED
    delta: str = ""  # TEXT_DELTA / REASONING_DELTA / TOOL_CALL_DELTA arguments fragment
    message: AnyMessage | None = None  # the appended message (model, tool, steering, final)
    tool_call: ToolCall | None = None  # TOOL_* events; TOOL_CALL_DELTA carries a partial one
    tool_call_index: int | None = None  # TOOL_CALL_DELTA: position of the call in the answer
    usage: ModelUsage | None = None  # MODEL_COMPLETED: this call; RUN_COMPLETED: the request
    iteration: int = 0  # model call number within the request (1-based)
    name: str = ""  # CUSTOM: the event name, e.g. "approval.requested"
    data: Mapping[str, Any] = field(default_factory=dict)  # CUSTOM / compaction payload

    def __post_init__(self) -> None:
        if not isinstance(self.type, AgentEventType):
            object.__setattr__(self, "type", AgentEventType(self.type))


class ExtensionEvent:
    """Base for internal notifications delivered through ``AgentRunContext.publish``."""

    __slots__ = ()


class EventSubscriber(Protocol):
    """What ``AgentRunContext.publish`` needs of an extension: its name and ``on_event``."""

    @property
    def name(self) -> str: ...

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None: ...


@dataclass(slots=True, frozen=True)
class MessageTiming:
    """When the work that produced a message started and finished (POSIX seconds)."""

    started_at: float
    finished_at: float

    @property
    def duration(self) -> float:
        return max(0.0, self.finished_at - self.started_at)


@dataclass(slots=True, frozen=True)
class MessageAppendedEvent(ExtensionEvent):
    """A message was appended to the request's state; persistence subscribes to it."""

    message: AnyMessage
    timing: MessageTiming | None = None
    usage: ModelUsage | None = None
    index: int = -1  # position in state.messages when appended


@dataclass(slots=True, frozen=True)
class CompactionEvent(ExtensionEvent):
    """Remembered dialogue positions compressed_from..compressed_to were summarised.

    Positions are 1-based and inclusive over the remembered dialogue (system
    instructions excluded). ``messages``, when given, is the complete replacement
    dialogue; otherwise subscribers rebuild it as the summary followed by the kept
    range.
    """

    compressed_from: int
    compressed_to: int
    kept_from: int
    kept_to: int
    summary: str
    messages: tuple[AnyMessage, ...] | None = None

    def __post_init__(self) -> None:
        if self.compressed_from < 1 or self.compressed_to < self.compressed_from:
            raise ValueError("compressed range must satisfy 1 <= from <= to")
        if self.kept_to and self.kept_from <= self.compressed_to:
            raise ValueError("kept range must start after the compressed range")


@dataclass(slots=True, frozen=True)
class RunCancelledEvent(ExtensionEvent):
    """The request was cancelled; sent to every extension before CancelledError propagates."""

    session_id: str
    request_id: str
    reason: str = ""


@dataclass(slots=True, frozen=True)
class ExternalEvent:
    """Input from outside the run (an operator, a UI) offered to every extension's accept."""

    name: str  # protocol name, e.g. "approval", "ask_user.answer", "steer"
    payload: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("ExternalEvent.name must be a non-empty string")
        if not isinstance(self.payload, Mapping):
            raise TypeError("ExternalEvent.payload must be a mapping")
