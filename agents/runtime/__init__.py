"""The agent runtime: pure Python and pydantic, no Django, no provider SDK.

Everything public is importable from here; tests pin the list.
"""

from .agent import Agent
from .context import AgentRunContext
from .errors import AgentProtocolError, MaxIterationsExceeded, ModelCallError
from .events import (
    AgentEvent,
    AgentEventType,
    AgentPhase,
    CompactionEvent,
    ExtensionEvent,
    ExternalEvent,
    MessageAppendedEvent,
    MessageTiming,
    RunCancelledEvent,
)
from .extension import AgentExtension
from .external import ExternalEventExtension, ExternalWaitClosed
from .handle import RunHandle
from .memory import InMemoryMessageAccumulator
from .messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from .model import (
    AgentModel,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    ToolCallDelta,
)
from .state import AgentRunConfig, AgentState
from .tools import (
    AgentTool,
    ServerToolDefinition,
    ToolArgumentsError,
    ToolDefinition,
    ToolResult,
    UnknownToolError,
    tool,
)

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentEventType",
    "AgentExtension",
    "AgentModel",
    "AgentPhase",
    "AgentProtocolError",
    "AgentRunConfig",
    "AgentRunContext",
    "AgentState",
    "AgentTool",
    "AnyMessage",
    "AssistantMessage",
    "CompactionEvent",
    "ExtensionEvent",
    "ExternalEvent",
    "ExternalEventExtension",
    "ExternalWaitClosed",
    "InMemoryMessageAccumulator",
    "MaxIterationsExceeded",
    "MessageAppendedEvent",
    "MessageTiming",
    "ModelCallError",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "ModelUsage",
    "RunCancelledEvent",
    "RunHandle",
    "ServerToolDefinition",
    "SystemMessage",
    "ToolCall",
    "ToolArgumentsError",
    "ToolCallDelta",
    "ToolDefinition",
    "ToolMessage",
    "ToolResult",
    "UnknownToolError",
    "UserMessage",
    "tool",
]
