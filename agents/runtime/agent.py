"""Agent: runs one request at a time per session through the extension lifecycle."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .context import AgentRunContext
from .errors import AgentProtocolError
from .events import (
    AgentEvent,
    AgentEventType,
    AgentPhase,
    ExternalEvent,
    MessageTiming,
    RunCancelledEvent,
)
from .extension import HOOK_NAMES, AgentExtension, overrides, sort_by_priority
from .ids import new_uuid7
from .messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from .model import ModelRequest, ModelResponse
from .state import AgentRunConfig, AgentState
from .tools import AgentTool, ToolArgumentsError, ToolResult

if TYPE_CHECKING:
    from .model import AgentModel

log = logging.getLogger(__name__)

_ET = AgentEventType
_P = AgentPhase

CANCELLED_TOOL_CONTENT = "Cancelled: the request was cancelled before this tool call finished."
SKIPPED_TOOL_CONTENT = "Skipped: a new user message arrived before this tool call ran."


class MaxIterationsExceeded(AgentProtocolError):
    """The model kept calling tools past the Agent's max_iterations for one input."""


class _Turn:
    """Tool calls of the current turn that still have no ToolMessage."""

    __slots__ = ("open_calls",)

    def __init__(self) -> None:
        self.open_calls: dict[str, ToolCall] = {}


class _Channel:
    """A single-consumer event buffer: the run task puts, the stream drains in batches."""

    __slots__ = ("finished", "items", "waiter")

    def __init__(self) -> None:
        self.items: list[AgentEvent] = []
        self.waiter: asyncio.Future[None] | None = None
        self.finished = False

    def put(self, event: AgentEvent) -> None:
        self.items.append(event)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def finish(self, _task: object = None) -> None:
        self.finished = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_batch(self) -> list[AgentEvent] | None:
        while not self.items:
            if self.finished:
                return None
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        batch = self.items
        self.items = []
        return batch


def _discard(_event: AgentEvent) -> None:
    return None


async def _close_stream(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


class Agent:
    """A model, a system prompt, static tools and extensions, serving many sessions.

    One session has at most one active request; any number of sessions run at
    once on one Agent (and may share extension instances).
    """

    def __init__(
        self,
        model: AgentModel,
        *,
        system_prompt: str = "You are a helpful assistant.",
        tools: Sequence[AgentTool] = (),
        extensions: Sequence[AgentExtension] | None = None,
        max_iterations: int = 36,
    ) -> None:
        if model is None or not callable(getattr(model, "stream", None)):
            raise TypeError("model must have an async stream(request) method")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError("max_iterations must be a positive integer")
        if extensions is None:
            from ..extensions.memory import InMemoryMessageAccumulator

            extensions = [InMemoryMessageAccumulator()]
        registered = list(extensions)
        names: set[str] = set()
        for extension in registered:
            if not isinstance(extension, AgentExtension):
                raise TypeError(f"{extension!r} is not an AgentExtension")
            if extension.name in names:
                raise ValueError(
                    f"two extensions are named {extension.name!r}; names must be unique"
                )
            names.add(extension.name)
        tool_names: set[str] = set()
        for static_tool in tools:
            if static_tool.name in tool_names:
                raise ValueError(f"two tools are named {static_tool.name!r}")
            tool_names.add(static_tool.name)
        self.model = model
        self.system_prompt = system_prompt
        self.tools: tuple[AgentTool, ...] = tuple(tools)
        self.max_iterations = max_iterations
        self.extensions: tuple[AgentExtension, ...] = tuple(sort_by_priority(registered))
        self._hooks: dict[str, tuple[AgentExtension, ...]] = {
            hook: tuple(ext for ext in self.extensions if overrides(ext, hook))
            for hook in HOOK_NAMES
        }
        self._active: dict[str, AgentRunContext] = {}

    # -- public API ---------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """True while any request of this Agent is active."""
        return bool(self._active)

    def is_active(self, session_id: str) -> bool:
        return session_id in self._active

    def active_context(self, session_id: str) -> AgentRunContext | None:
        """The context of the session's active request, if any (for hosts and tests)."""
        return self._active.get(session_id)

    async def run(
        self, message: str | UserMessage, *, config: AgentRunConfig | None = None
    ) -> AssistantMessage:
        """Run one request to its final answer, discarding outward events."""
        return await self._execute(message, config, _discard)

    async def stream(
        self, message: str | UserMessage, *, config: AgentRunConfig | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Run one request and yield its outward events; closing the iterator cancels it."""
        channel = _Channel()
        task = asyncio.get_running_loop().create_task(self._execute(message, config, channel.put))
        task.add_done_callback(channel.finish)
        try:
            while True:
                batch = await channel.next_batch()
                if batch is None:
                    break
                for event in batch:
                    yield event
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved: the caller already saw it or closed early

    async def compact(self, *, config: AgentRunConfig) -> list[AgentEvent]:
        """Restore the session (on_tool, on_state) and run on_compact; no input, no model.

        Returns the events extensions emitted during the pass.
        """
        emitted: list[AgentEvent] = []
        context, _, _ = self._open(config, emitted.append)
        state = context.state
        try:
            state.phase = _P.LOADING_CONTEXT
            await self._setup(context, include_on_message=False)
            state.phase = _P.COMPACTING
            for extension in self._hooks["on_compact"]:
                await extension.on_compact(context)
            await context.flush_message_events()
            state.phase = _P.READY
            return emitted
        except asyncio.CancelledError:
            state.phase = _P.CANCELLED
            await self._publish_cancelled(context)
            raise
        except Exception as error:
            state.phase = _P.FAILED
            await self._run_on_error(context, error)
            raise
        finally:
            self._close(context)

    def emit_external_event(
        self, event: ExternalEvent, *, config: AgentRunConfig | None = None
    ) -> list[str]:
        """Offer an external event to every extension's accept; return who took it.

        Callable from any thread. An accept that raises is logged and counts as
        not accepted, so one broken extension cannot stop the others.
        """
        if not isinstance(event, ExternalEvent):
            raise TypeError("emit_external_event takes an ExternalEvent")
        accepted: list[str] = []
        for extension in self._hooks["accept"]:
            try:
                if extension.accept(config, event):
                    accepted.append(extension.name)
            except Exception:
                log.exception("extension %s failed in accept(%s)", extension.name, event.name)
        return accepted

    # -- request lifecycle --------------------------------------------------------------

    def _open(
        self, config: AgentRunConfig | None, sink: Callable[[AgentEvent], None]
    ) -> tuple[AgentRunContext, Callable[..., None], list[int]]:
        if config is None:
            config = AgentRunConfig()
        elif not isinstance(config, AgentRunConfig):
            raise TypeError("config must be an AgentRunConfig")
        if config.session_id is None or config.request_id is None:
            config = replace(
                config,
                session_id=config.session_id or new_uuid7(),
                request_id=config.request_id or new_uuid7(),
            )
        session_id: str = config.session_id  # type: ignore[assignment]
        request_id: str = config.request_id  # type: ignore[assignment]
        if session_id in self._active:
            raise AgentProtocolError(f"session {session_id} already has an active request")
        state = AgentState()
        seq = [0]

        def out(event_type: AgentEventType, **fields: Any) -> None:
            seq[0] += 1
            sink(AgentEvent(event_type, session_id, request_id, seq[0], state.phase, **fields))

        def from_extension(event: AgentEvent) -> None:
            seq[0] += 1
            sink(
                replace(
                    event,
                    session_id=session_id,
                    request_id=request_id,
                    seq=seq[0],
                    phase=state.phase,
                    iteration=event.iteration or state.iteration,
                )
            )

        context = AgentRunContext(
            config,
            state,
            {},
            self.extensions,
            self.model,
            _subscribers=self._hooks["on_event"],
            _sink=from_extension,
        )
        self._active[session_id] = context
        for extension in self.extensions:
            extension.__dict__["_pending_requests"] = (
                extension.__dict__.get("_pending_requests", 0) + 1
            )
        for static_tool in self.tools:
            context.register_tool(static_tool)
        if self.system_prompt:
            context.add_message(SystemMessage(self.system_prompt, persist=False))
        return context, out, seq

    def _close(self, context: AgentRunContext) -> None:
        leftover = context.close_steering()
        if leftover:
            # The host reads these so an operator's message is never silently dropped.
            context.state.metadata["unprocessed_steering"] = leftover
        self._active.pop(context.session_id, None)
        for extension in self.extensions:
            extension.__dict__["_pending_requests"] = (
                extension.__dict__.get("_pending_requests", 1) - 1
            )

    async def _setup(self, context: AgentRunContext, *, include_on_message: bool) -> None:
        for extension in self._hooks["on_tool"]:
            await extension.on_tool(context)
        for extension in self._hooks["on_state"]:
            await extension.on_state(context)
        if include_on_message:
            for extension in self._hooks["on_message"]:
                await extension.on_message(context)

    async def _execute(
        self,
        message: str | UserMessage,
        config: AgentRunConfig | None,
        sink: Callable[[AgentEvent], None],
    ) -> AssistantMessage:
        if isinstance(message, str):
            message = UserMessage(message)
        elif not isinstance(message, UserMessage):
            raise TypeError("run/stream take a str or a UserMessage")
        context, out, _ = self._open(config, sink)
        context.input_message = message
        state = context.state
        turn = _Turn()
        try:
            state.phase = _P.LOADING_CONTEXT
            out(_ET.RUN_STARTED, message=message)
            await self._setup(context, include_on_message=True)
            await context.flush_message_events()
            final_input = context.input_message
            if not isinstance(final_input, UserMessage):
                raise AgentProtocolError(
                    "on_message must leave a UserMessage in context.input_message"
                )
            now = time.time()
            await context.append_message(final_input, MessageTiming(now, now))
            for extension in self._hooks["before_run"]:
                await extension.before_run(context)
            state.phase = _P.READY
            result = await self._turns(context, out, turn)
            for extension in self._hooks["after_run"]:
                await extension.after_run(context, result)
            for extension in self._hooks["on_success"]:
                await extension.on_success(context, result)
            # Messages added by the last after_turn, after_run or on_success still reach
            # persistence before the request reports completion.
            await context.flush_message_events()
            state.phase = _P.COMPLETED
            out(_ET.RUN_COMPLETED, message=result, usage=state.usage, iteration=state.iteration)
            return result
        except asyncio.CancelledError:
            state.phase = _P.CANCELLED
            await self._close_open_calls(context, turn, out)
            await self._publish_cancelled(context)
            raise
        except Exception as error:
            state.phase = _P.FAILED
            await self._run_on_error(context, error)
            raise
        finally:
            self._close(context)

    async def _run_on_error(self, context: AgentRunContext, error: BaseException) -> None:
        for extension in self._hooks["on_error"]:
            try:
                await extension.on_error(context, error)
            except Exception:
                log.exception("extension %s failed in on_error", extension.name)

    async def _publish_cancelled(self, context: AgentRunContext) -> None:
        try:
            await context.publish(RunCancelledEvent(context.session_id, context.request_id))
        except Exception:
            log.exception("an extension failed while handling RunCancelledEvent")

    async def _close_open_calls(
        self, context: AgentRunContext, turn: _Turn, out: Callable[..., None]
    ) -> None:
        """Give every tool call still without a result a cancelled ToolMessage."""
        for call in list(turn.open_calls.values()):
            closing = ToolMessage(
                call.id,
                call.name,
                CANCELLED_TOOL_CONTENT,
                is_error=True,
                attributes={"cancelled": True},
            )
            try:
                now = time.time()
                await context.append_message(closing, MessageTiming(now, now))
            except Exception:
                log.exception("could not record the cancelled result of tool call %s", call.id)
            turn.open_calls.pop(call.id, None)
            out(_ET.TOOL_FAILED, tool_call=call, message=closing)

    # -- turns --------------------------------------------------------------------------

    def _build_request(self, context: AgentRunContext) -> ModelRequest:
        return ModelRequest(
            messages=tuple(context.state.messages),
            tools=tuple(registered.definition for registered in context.tools.values()),
            server_tools=tuple(context.server_tools.values()),
            session_id=context.session_id,
            request_id=context.request_id,
            iteration=context.state.iteration + 1,
        )

    async def _turns(
        self, context: AgentRunContext, out: Callable[..., None], turn: _Turn
    ) -> AssistantMessage:
        state = context.state
        hooks = self._hooks
        while True:
            for extension in hooks["before_turn"]:
                await extension.before_turn(context)
            await context.flush_message_events()
            if state.iteration >= self.max_iterations:
                raise MaxIterationsExceeded(
                    f"the model made {state.iteration} calls without a final answer "
                    f"(max_iterations={self.max_iterations})"
                )
            request = self._build_request(context)
            if hooks["before_model"]:
                for extension in hooks["before_model"]:
                    await extension.before_model(context, request)
                    request = self._build_request(context)
                await context.flush_message_events()
            state.iteration += 1
            state.phase = _P.GENERATING
            out(_ET.MODEL_STARTED, iteration=state.iteration)
            started = time.time()
            response = await self._call_model(context, request, out)
            answer = response.message
            state.usage = state.usage + response.usage
            turn.open_calls = {call.id: call for call in answer.tool_calls}
            await context.append_message(
                answer, MessageTiming(started, time.time()), response.usage
            )
            out(
                _ET.MODEL_COMPLETED,
                message=answer,
                usage=response.usage,
                iteration=state.iteration,
                data={"finish_reason": response.finish_reason},
            )
            state.phase = _P.READY
            for extension in hooks["after_model"]:
                await extension.after_model(context, response)
            if answer.tool_calls:
                await self._run_tools(context, answer, out, turn)
            steered = await self._take_steering(context, out, final=not answer.tool_calls)
            for extension in hooks["after_turn"]:
                await extension.after_turn(context, answer)
            if not answer.tool_calls and not steered:
                return answer

    async def _call_model(
        self, context: AgentRunContext, request: ModelRequest, out: Callable[..., None]
    ) -> ModelResponse:
        call: Callable[[ModelRequest], Any] = self.model.stream
        for extension in reversed(self._hooks["on_model_request"]):
            call = _model_layer(extension, context, call)
        iteration = context.state.iteration
        response: ModelResponse | None = None
        stream = call(request)
        try:
            async for event in stream:
                if response is not None:
                    raise AgentProtocolError(
                        "the model stream continued after its completed response"
                    )
                kind = event.kind
                if kind == "text":
                    out(_ET.TEXT_DELTA, delta=event.delta, iteration=iteration)
                elif kind == "completed":
                    response = event.response
                elif kind == "reasoning":
                    out(_ET.REASONING_DELTA, delta=event.delta, iteration=iteration)
                elif kind == "tool_call":
                    part = event.tool_call_delta
                    out(
                        _ET.TOOL_CALL_DELTA,
                        delta=event.delta,
                        tool_call_index=part.index if part else None,
                        iteration=iteration,
                        data={"id": part.id, "name": part.name} if part else {},
                    )
                else:
                    raise AgentProtocolError(f"unknown model event kind {kind!r}")
        finally:
            await _close_stream(stream)
        if response is None:
            raise AgentProtocolError("the model stream ended without a completed response")
        if not isinstance(response.message, AssistantMessage):
            raise AgentProtocolError("a model response must carry an AssistantMessage")
        return response

    async def _run_tools(
        self,
        context: AgentRunContext,
        answer: AssistantMessage,
        out: Callable[..., None],
        turn: _Turn,
    ) -> None:
        calls = answer.tool_calls
        for position, call in enumerate(calls):
            if context._steering:
                await self._skip_calls(context, calls[position:], out, turn)
                return
            await self._run_tool(context, call, out, turn)

    async def _skip_calls(
        self,
        context: AgentRunContext,
        calls: Sequence[ToolCall],
        out: Callable[..., None],
        turn: _Turn,
    ) -> None:
        for call in calls:
            skipped = ToolMessage(call.id, call.name, SKIPPED_TOOL_CONTENT, skipped=True)
            now = time.time()
            await context.append_message(skipped, MessageTiming(now, now))
            turn.open_calls.pop(call.id, None)
            out(_ET.TOOL_SKIPPED, tool_call=call, message=skipped)

    async def _take_steering(
        self, context: AgentRunContext, out: Callable[..., None], *, final: bool
    ) -> bool:
        """Append steering messages that arrived during the turn; closes intake when final."""
        taken = context._take_steering(close_if_empty=final)
        for message in taken:
            now = time.time()
            await context.append_message(message, MessageTiming(now, now))
            out(_ET.STEERING_STARTED, message=message)
        return bool(taken)

    async def _run_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        out: Callable[..., None],
        turn: _Turn,
    ) -> None:
        state = context.state
        state.phase = _P.RUNNING_TOOL
        out(_ET.TOOL_STARTED, tool_call=call)
        started = time.time()
        for extension in self._hooks["before_tool"]:
            await extension.before_tool(context, call)
        error: Exception | None = None
        try:
            result = await self._tool_chain(context)(call)
            if not isinstance(result, ToolResult):
                result = ToolResult.from_value(result)
        except Exception as exc:
            error = exc
            result = ToolResult(content=f"Error: {type(exc).__name__}: {exc}", is_error=True)
        message = ToolMessage(
            call.id,
            call.name,
            result.content,
            is_error=result.is_error,
            attributes=dict(result.attributes),
        )
        for extension in self._hooks["after_tool"]:
            await extension.after_tool(context, call, message, error)
        await context.append_message(message, MessageTiming(started, time.time()))
        turn.open_calls.pop(call.id, None)
        # Emitted in the phase the tool ran in; the run is READY only afterwards.
        out(
            _ET.TOOL_FAILED if message.is_error else _ET.TOOL_COMPLETED,
            tool_call=call,
            message=message,
        )
        state.phase = _P.READY

    def _tool_chain(self, context: AgentRunContext) -> Callable[[ToolCall], Any]:
        async def invoke(call: ToolCall) -> ToolResult:
            registered = context.tools.get(call.name)
            if registered is None:
                available = ", ".join(sorted(context.tools)) or "none"
                return ToolResult(
                    content=f"Error: unknown tool {call.name!r} (available: {available})",
                    is_error=True,
                )
            try:
                return await registered(call.arguments)
            except ToolArgumentsError as exc:
                return ToolResult(content=f"Error: {exc}", is_error=True)

        chain: Callable[[ToolCall], Any] = invoke
        for extension in reversed(self._hooks["on_tool_call"]):
            chain = _tool_layer(extension, context, chain)
        return chain


def _model_layer(
    extension: AgentExtension, context: AgentRunContext, call_next: Callable[[ModelRequest], Any]
) -> Callable[[ModelRequest], Any]:
    def layer(request: ModelRequest) -> Any:
        return extension.on_model_request(context, request, call_next)

    return layer


def _tool_layer(
    extension: AgentExtension, context: AgentRunContext, call_next: Callable[[ToolCall], Any]
) -> Callable[[ToolCall], Any]:
    async def layer(call: ToolCall) -> Any:
        return await extension.on_tool_call(context, call, call_next)

    return layer
