"""Runtime test fixtures: a hook-recording extension, event collection and small tools."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExtensionEvent,
    MessageAppendedEvent,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
    tool,
)

# Every hook the recorder logs, in the order the base class declares them.
RECORDED_HOOKS = (
    "on_tool",
    "on_state",
    "on_message",
    "before_run",
    "before_turn",
    "before_model",
    "on_model_request",
    "after_model",
    "before_tool",
    "on_tool_call",
    "after_tool",
    "after_turn",
    "after_run",
    "on_success",
    "on_error",
    "on_compact",
    "on_event",
)


def describe_event(event: ExtensionEvent) -> str:
    """A short label for an internal event: `on_event:user`, `on_event:RunCancelledEvent`."""
    if isinstance(event, MessageAppendedEvent):
        return f"on_event:{event.message.role}"  # type: ignore[union-attr]
    return f"on_event:{type(event).__name__}"


class Recorder(AgentExtension):
    """Overrides every hook and appends what ran to a log shared with the test.

    With ``prefix=True`` entries are ``"<name>.<hook>"``, for tests with several recorders.
    """

    def __init__(self, log: list[str], *, name: str | None = None, prefix: bool = False) -> None:
        self.log = log
        self.prefix = prefix
        self.events: list[ExtensionEvent] = []
        if name is not None:
            self.name = name

    def _record(self, entry: str) -> None:
        self.log.append(f"{self.name}.{entry}" if self.prefix else entry)

    async def on_tool(self, context: AgentRunContext) -> None:
        self._record("on_tool")

    async def on_state(self, context: AgentRunContext) -> None:
        self._record("on_state")

    async def on_message(self, context: AgentRunContext) -> None:
        self._record("on_message")

    async def before_run(self, context: AgentRunContext) -> None:
        self._record("before_run")

    async def before_turn(self, context: AgentRunContext) -> None:
        self._record("before_turn")

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        self._record("before_model")

    async def on_model_request(  # type: ignore[override]
        self, context: AgentRunContext, request: ModelRequest, call_next: Any
    ) -> AsyncIterator[ModelEvent]:
        self._record("on_model_request")
        async for event in call_next(request):
            yield event

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        self._record("after_model")

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        self._record("before_tool")

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: Any
    ) -> ToolResult:
        self._record("on_tool_call")
        return await call_next(call)

    async def after_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        result: ToolMessage,
        error: BaseException | None,
    ) -> None:
        self._record("after_tool")

    async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
        self._record("after_turn")

    async def after_run(self, context: AgentRunContext, result: AssistantMessage) -> None:
        self._record("after_run")

    async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
        self._record("on_success")

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        self._record("on_error")

    async def on_compact(self, context: AgentRunContext) -> None:
        self._record("on_compact")

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        self.events.append(event)
        self._record(describe_event(event))


class CallbackExtension(AgentExtension):
    """An extension whose chosen hooks are plain async callables given by the test.

    Only the hooks passed in are installed on the instance, so the runtime treats the
    others as not overridden, exactly like a hand-written subclass.
    """

    def __init__(self, name: str = "CallbackExtension", **hooks: Callable[..., Any]) -> None:
        self.name = name
        for hook, function in hooks.items():
            if hook not in RECORDED_HOOKS:
                raise TypeError(f"unknown hook {hook}")
            # Set on the instance: called with the hook's arguments, without self.
            setattr(self, hook, function)


async def collect(
    agent: Agent, message: str | UserMessage, config: AgentRunConfig | None = None
) -> list[AgentEvent]:
    """Stream one request to the end and return its outward events."""
    return [event async for event in agent.stream(message, config=config)]


def event_types(events: list[AgentEvent]) -> list[str]:
    """Event type names without text deltas, whose count depends on the wording."""
    return [event.type.name for event in events if event.type is not AgentEventType.TEXT_DELTA]


async def wait(awaitable: Awaitable[Any], timeout: float = 5) -> Any:
    """Await with a safety-net timeout so a broken runtime fails instead of hanging."""
    return await asyncio.wait_for(awaitable, timeout)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@pytest.fixture
def log() -> list[str]:
    """The shared hook log recorders append to."""
    return []


@pytest.fixture
def recorder(log: list[str]) -> Recorder:
    """One recording extension writing plain hook names to `log`."""
    return Recorder(log)


@pytest.fixture
def config() -> AgentRunConfig:
    """A config with a fixed session id, so tests can inspect that session afterwards."""
    return AgentRunConfig(session_id="session-1")
