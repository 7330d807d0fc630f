"""The extension base class: every lifecycle hook, grouped by stage, async no-ops by default."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .context import AgentRunContext
    from .events import ExtensionEvent, ExternalEvent
    from .messages import AssistantMessage, ToolCall, ToolMessage
    from .model import ModelEvent, ModelRequest, ModelResponse
    from .state import AgentRunConfig
    from .tools import ToolResult

ModelCallNext = Callable[["ModelRequest"], AsyncIterator["ModelEvent"]]
ToolCallNext = Callable[["ToolCall"], Awaitable["ToolResult"]]


class AgentExtension:
    """Base for lifecycle plugins.

    Hooks run in ascending ``priority`` (default 100); equal priorities keep
    registration order. Only hooks a subclass overrides are ever called, so an
    extension pays for what it uses. A hook that raises fails the request (the
    runtime then calls ``on_error``) unless its docstring says otherwise.
    Cancellation (``asyncio.CancelledError``) may arrive at any await inside a
    hook; hooks must not swallow it.
    """

    priority: ClassVar[int] = 100

    # -- identity -----------------------------------------------------------------

    @property
    def name(self) -> str:
        """Unique registration identity; defaults to the concrete class name.

        Override with a class attribute, or assign ``instance.name = ...`` to
        register independently configured instances of one class in one Agent.
        """
        return getattr(self, "_extension_name", None) or type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError("extension name must be a non-empty string")
        self._extension_name = value

    @property
    def pending(self) -> bool:
        """True while any request (of any Agent) that uses this instance is active."""
        return id(self) in _ACTIVE_REQUESTS

    # -- setup: tools, state, input (each group is a barrier) ----------------------

    async def on_tool(self, context: AgentRunContext) -> None:
        """Register request-scoped tools, before any ``on_state``.

        When: first setup group; every extension finishes it before ``on_state``.
        May change: ``context.tools`` / ``context.server_tools`` (via register_*).
        On error: the request fails before any message is appended.
        """

    async def on_state(self, context: AgentRunContext) -> None:
        """Restore context (history, instructions) once all tools are registered.

        When: second setup group, after every ``on_tool``.
        May change: messages via ``add_message`` / ``replace_messages``.
        On error: the request fails; nothing has been appended.
        """

    async def on_message(self, context: AgentRunContext) -> None:
        """Transform ``context.input_message`` before it is appended.

        When: third setup group, after every ``on_state``.
        May change: ``context.input_message`` (replace it; never append it here).
        On error: the request fails; the input is not appended.
        """

    # -- request ------------------------------------------------------------------

    async def before_run(self, context: AgentRunContext) -> None:
        """Run after the (transformed) input UserMessage is appended and published.

        May change: messages and tools for the first turn.
        On error: the request fails through ``on_error``.
        """

    async def before_turn(self, context: AgentRunContext) -> None:
        """Run before each turn's model call (after ``after_turn`` of the previous one).

        May change: messages and tools; edits reach the provider.
        On error: the request fails through ``on_error``.
        """

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        """Inspect the frozen request before the primary model call.

        May change: messages through the context, tools through the registries;
        the runtime rebuilds the request before the next hook and the call.
        On error: the request fails; the model is not called.
        """

    def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: ModelCallNext
    ) -> AsyncIterator[ModelEvent]:
        """Wrap one provider call and its streamed response (first extension outermost).

        May change: pass ``request`` or a ``dataclasses.replace`` of it to
        ``call_next``; filter or add events. The default passes everything through
        and closes the inner stream, so cancellation reaches the provider.
        On error: the request fails; on cancellation the inner stream is closed.
        """
        return _pass_through(request, call_next)

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        """Run after the complete assistant message is appended.

        May change: messages and tools for what follows (not the appended answer).
        On error: the request fails before any of its tool calls run.
        """

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        """Run before one requested tool is invoked.

        On error: the request fails (use ``on_tool_call`` to turn a call into a
        failed result instead).
        """

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: ToolCallNext
    ) -> ToolResult:
        """Wrap one local tool handler (first extension outermost).

        May change: adjust ``call`` (pass a new ToolCall), return without calling
        the next layer, or transform the result.
        On error: the exception becomes a failed tool result the model reads.
        """
        return await call_next(call)

    async def after_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        result: ToolMessage,
        error: BaseException | None,
    ) -> None:
        """Inspect or edit the ToolMessage before it is appended.

        ``error`` is the execution exception of a failed call, else None.
        May change: ``result`` in place; the change reaches context, storage and
        the next model request.
        On error: the result is not appended and the request fails.
        """

    async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run once the turn's assistant message and every tool result are settled.

        ``result`` is the assistant message that opened the turn (the final
        answer on the last turn). Steering accepted during the turn is already
        appended. Not called for a turn that failed or was cancelled.
        """

    async def after_run(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run after the final answer is appended, before ``on_success``.

        On error: the request fails through ``on_error``; no RUN_COMPLETED.
        """

    async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Run once after every ``after_run`` succeeded, before RUN_COMPLETED.

        On error: goes through ``on_error`` and prevents RUN_COMPLETED.
        Never called for failed or cancelled requests.
        """

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        """Run when the request failed, before the error propagates to the caller.

        Not called on cancellation (see RunCancelledEvent). An exception raised
        here is logged and does not replace the original error.
        """

    # -- out of band ----------------------------------------------------------------

    async def on_compact(self, context: AgentRunContext) -> None:
        """Summarise restored context when a caller runs ``Agent.compact``.

        When: after on_tool and on_state; no input is appended, no model call.
        On error: the compaction fails through ``on_error``.
        """

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        """Receive an internal event published through ``context.publish``.

        On error: the exception propagates to the publisher and stops delivery.
        """

    def accept(self, config: AgentRunConfig | None, event: ExternalEvent) -> bool:
        """Handle one external event; return True when this extension took it.

        Synchronous and callable from any thread: wake the waiting run on its
        own loop (``loop.call_soon_threadsafe``). The default ignores the event.
        """
        return False


async def _pass_through(request: Any, call_next: ModelCallNext) -> AsyncIterator[Any]:
    inner = call_next(request)
    try:
        async for event in inner:
            yield event
    finally:
        # The model protocol promises only an AsyncIterator; close it when it can be closed.
        aclose = getattr(inner, "aclose", None)
        if aclose is not None:
            await aclose()


HOOK_NAMES: tuple[str, ...] = (
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
    "accept",
)


def overrides(extension: AgentExtension, hook: str) -> bool:
    """True when the extension's class (or instance) replaces the base no-op."""
    if hook in extension.__dict__:
        return True
    return getattr(type(extension), hook) is not getattr(AgentExtension, hook)


def sort_by_priority(extensions: list[AgentExtension]) -> list[AgentExtension]:
    """Stable sort on priority: equal priorities keep registration order."""
    return sorted(extensions, key=lambda ext: getattr(ext, "priority", 100))


# Active requests per extension instance (by id: the Agent holds a reference while the
# count is above zero, so an id cannot be reused meanwhile). Owned by the runtime, not
# stored on the instances, so an extension's own attributes stay its own.
_ACTIVE_REQUESTS: dict[int, int] = {}
_ACTIVE_LOCK = threading.Lock()  # Agents on several loops may share an instance


def track_requests(extensions: Sequence[AgentExtension], change: int) -> None:
    """Count one request starting (+1) or ending (-1) for each extension."""
    with _ACTIVE_LOCK:
        for extension in extensions:
            key = id(extension)
            count = _ACTIVE_REQUESTS.get(key, 0) + change
            if count > 0:
                _ACTIVE_REQUESTS[key] = count
            else:
                _ACTIVE_REQUESTS.pop(key, None)
