"""Request: one request's lifecycle, step by step, as ARCHITECTURE's "One request, in order"."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from .context import AgentRunContext
from .errors import AgentProtocolError, MaxIterationsExceeded
from .events import (
    AgentEventType,
    AgentPhase,
    MessageTiming,
    RunCancelledEvent,
)
from .extension import AgentExtension
from .messages import AssistantMessage, ToolCall, ToolMessage, UserMessage
from .model import AgentModel, ModelRequest, ModelResponse
from .stamping import OutwardSink, Stamper
from .tools import ToolArgumentsError, ToolResult, UnknownToolError

log = logging.getLogger(__name__)

CANCELLED_TOOL_CONTENT = "Cancelled: the request was cancelled before this tool call finished."
SKIPPED_TOOL_CONTENT = "Skipped: a new user message arrived before this tool call ran."

HookTable = Mapping[str, tuple[AgentExtension, ...]]


class Request:
    """One claimed request: its context, its open tool calls and its steps.

    The Agent builds it (claiming the session) and hands it a sink; ``execute`` or
    ``compact`` runs it once, and every path ends in ``close``, which gives the
    session back.
    """

    __slots__ = (
        "_on_close",
        "closed",
        "context",
        "hooks",
        "max_iterations",
        "model",
        "open_calls",
        "out",
        "unprocessed_steering",
    )

    def __init__(
        self,
        context: AgentRunContext,
        *,
        hooks: HookTable,
        model: AgentModel,
        max_iterations: int,
        sink: OutwardSink,
        on_close: Callable[[Request], None],
    ) -> None:
        self.context = context
        self.hooks = hooks
        self.model = model
        self.max_iterations = max_iterations
        self._on_close = on_close
        stamper = Stamper(context, sink)
        self.out = stamper.out  # await self.out(TYPE, **fields): stamp and hand over
        context._plumbing.sink = stamper.from_extension
        self.open_calls: dict[str, ToolCall] = {}  # this turn's calls still without a result
        self.unprocessed_steering: tuple[UserMessage, ...] = ()  # offered, never taken
        self.closed = False

    # -- the whole request --------------------------------------------------------------

    async def execute(self) -> AssistantMessage:
        context = self.context
        state = context.state
        hooks = self.hooks
        message = context.input_message
        async with self._ending():
            state.phase = AgentPhase.LOADING_CONTEXT
            await self.out(AgentEventType.RUN_STARTED, message=message)
            await self._setup(include_on_message=True)
            await context.flush_message_events()
            final_input = context.input_message
            if not isinstance(final_input, UserMessage):
                raise AgentProtocolError(
                    "on_message must leave a UserMessage in context.input_message"
                )
            now = time.time()
            await context.append_message(final_input, MessageTiming(now, now))
            for extension in hooks["before_run"]:
                await extension.before_run(context)
            state.phase = AgentPhase.READY
            result = await self._turns()
            for extension in hooks["after_run"]:
                await extension.after_run(context, result)
            for extension in hooks["on_success"]:
                await extension.on_success(context, result)
            # Messages added by the last after_turn, after_run or on_success still reach
            # persistence before the request reports completion.
            await context.flush_message_events()
            state.phase = AgentPhase.COMPLETED
            await self.out(
                AgentEventType.RUN_COMPLETED,
                message=result,
                usage=state.usage,
                iteration=state.iteration,
            )
            return result

    async def compact(self) -> None:
        context = self.context
        state = context.state
        async with self._ending():
            state.phase = AgentPhase.LOADING_CONTEXT
            await self._setup(include_on_message=False)
            # As a request flushes before appending its input: extensions hear of the
            # restored context before anything on_compact does to it.
            await context.flush_message_events()
            state.phase = AgentPhase.COMPACTING
            for extension in self.hooks["on_compact"]:
                await extension.on_compact(context)
            await context.flush_message_events()
            state.phase = AgentPhase.READY

    @contextlib.asynccontextmanager
    async def _ending(self) -> AsyncIterator[None]:
        """How every request ends, whatever it did: cancelled, failed, and always closed."""
        try:
            yield
        except asyncio.CancelledError:
            await self._cancelled()
            raise
        except Exception as error:
            await self._failed(error)
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Refuse further steering, keep what was never taken, and give the session back."""
        if self.closed:
            return
        self.closed = True
        self.unprocessed_steering = tuple(self.context.close_steering())
        self._on_close(self)

    async def _setup(self, *, include_on_message: bool) -> None:
        context = self.context
        hooks = self.hooks
        for extension in hooks["on_tool"]:
            await extension.on_tool(context)
        for extension in hooks["on_state"]:
            await extension.on_state(context)
        if include_on_message:
            for extension in hooks["on_message"]:
                await extension.on_message(context)

    async def _failed(self, error: Exception) -> None:
        self.context.state.phase = AgentPhase.FAILED
        for extension in self.hooks["on_error"]:
            try:
                await extension.on_error(self.context, error)
            except Exception:
                log.exception("extension %s failed in on_error", extension.name)

    async def _cancelled(self) -> None:
        context = self.context
        context.state.phase = AgentPhase.CANCELLED
        await self._close_open_calls()
        try:
            await context.publish(RunCancelledEvent(context.session_id, context.request_id))
        except Exception:
            log.exception("an extension failed while handling RunCancelledEvent")

    async def _close_open_calls(self) -> None:
        """Give every tool call still without a result a cancelled ToolMessage."""
        for call in list(self.open_calls.values()):
            closing = ToolMessage(
                call.id,
                call.name,
                CANCELLED_TOOL_CONTENT,
                is_error=True,
                attributes={"cancelled": True},
            )
            try:
                now = time.time()
                await self.context.append_message(closing, MessageTiming(now, now))
            except Exception:
                log.exception("could not record the cancelled result of tool call %s", call.id)
            self.open_calls.pop(call.id, None)
            await self.out(AgentEventType.TOOL_FAILED, tool_call=call, message=closing)

    # -- turns --------------------------------------------------------------------------

    def _build_request(self) -> ModelRequest:
        context = self.context
        return ModelRequest(
            messages=tuple(context.state.messages),
            tools=tuple(registered.definition for registered in context.tools.values()),
            server_tools=tuple(context.server_tools.values()),
            session_id=context.session_id,
            request_id=context.request_id,
            iteration=context.state.iteration + 1,
        )

    async def _turns(self) -> AssistantMessage:
        context = self.context
        state = context.state
        hooks = self.hooks
        while True:
            for extension in hooks["before_turn"]:
                await extension.before_turn(context)
            await context.flush_message_events()
            if state.iteration >= self.max_iterations:
                raise MaxIterationsExceeded(
                    f"the model made {state.iteration} calls without a final answer "
                    f"(max_iterations={self.max_iterations})"
                )
            request = self._build_request()
            if hooks["before_model"]:
                for extension in hooks["before_model"]:
                    await extension.before_model(context, request)
                    request = self._build_request()
                await context.flush_message_events()
            state.iteration += 1
            state.phase = AgentPhase.GENERATING
            await self.out(AgentEventType.MODEL_STARTED, iteration=state.iteration)
            started = time.time()
            response = await self._call_model(request)
            answer = response.message
            state.usage = state.usage + response.usage
            self.open_calls = {call.id: call for call in answer.tool_calls}
            await context.append_message(
                answer, MessageTiming(started, time.time()), response.usage
            )
            await self.out(
                AgentEventType.MODEL_COMPLETED,
                message=answer,
                usage=response.usage,
                iteration=state.iteration,
                data={"finish_reason": response.finish_reason},
            )
            state.phase = AgentPhase.READY
            for extension in hooks["after_model"]:
                await extension.after_model(context, response)
            if answer.tool_calls:
                await self._run_tools(answer.tool_calls)
            steered = await self._take_steering(final=not answer.tool_calls)
            for extension in hooks["after_turn"]:
                await extension.after_turn(context, answer)
            if not answer.tool_calls and not steered:
                return answer

    async def _call_model(self, request: ModelRequest) -> ModelResponse:
        call: Callable[[ModelRequest], Any] = self.model.stream
        for extension in reversed(self.hooks["on_model_request"]):
            call = _model_layer(extension, self.context, call)
        state = self.context.state
        iteration = state.iteration
        response: ModelResponse | None = None
        first_chunk_at: float | None = None
        state.first_chunk_at = None
        stream = call(request)
        out = self.out
        try:
            async for event in stream:
                if response is not None:
                    raise AgentProtocolError(
                        "the model stream continued after its completed response"
                    )
                kind = event.kind
                if first_chunk_at is None and kind != "completed":
                    first_chunk_at = state.first_chunk_at = time.monotonic()
                if kind == "text":
                    await out(AgentEventType.TEXT_DELTA, delta=event.delta, iteration=iteration)
                elif kind == "completed":
                    response = event.response
                elif kind == "reasoning":
                    await out(
                        AgentEventType.REASONING_DELTA, delta=event.delta, iteration=iteration
                    )
                elif kind == "tool_call":
                    part = event.tool_call_delta
                    await out(
                        AgentEventType.TOOL_CALL_DELTA,
                        delta=event.delta,
                        tool_call_index=part.index if part else None,
                        iteration=iteration,
                        data={"id": part.id, "name": part.name} if part else {},
                    )
                else:
                    raise AgentProtocolError(f"unknown model event kind {kind!r}")
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if response is None:
            raise AgentProtocolError("the model stream ended without a completed response")
        if not isinstance(response.message, AssistantMessage):
            raise AgentProtocolError("a model response must carry an AssistantMessage")
        return response

    async def _run_tools(self, calls: Sequence[ToolCall]) -> None:
        for position, call in enumerate(calls):
            if self.context.steering_pending:
                await self._skip_calls(calls[position:])
                return
            await self._run_tool(call)

    async def _skip_calls(self, calls: Sequence[ToolCall]) -> None:
        for call in calls:
            skipped = ToolMessage(call.id, call.name, SKIPPED_TOOL_CONTENT, skipped=True)
            now = time.time()
            await self.context.append_message(skipped, MessageTiming(now, now))
            self.open_calls.pop(call.id, None)
            await self.out(AgentEventType.TOOL_SKIPPED, tool_call=call, message=skipped)

    async def _take_steering(self, *, final: bool) -> bool:
        """Append steering messages that arrived during the turn; closes intake when final."""
        taken = self.context.take_steering(close_if_empty=final)
        for message in taken:
            now = time.time()
            await self.context.append_message(message, MessageTiming(now, now))
            await self.out(AgentEventType.STEERING_STARTED, message=message)
        return bool(taken)

    async def _run_tool(self, call: ToolCall) -> None:
        context = self.context
        state = context.state
        state.phase = AgentPhase.RUNNING_TOOL
        await self.out(AgentEventType.TOOL_STARTED, tool_call=call)
        started = time.time()
        for extension in self.hooks["before_tool"]:
            await extension.before_tool(context, call)
        error: Exception | None = None
        try:
            if call.name not in context.tools:
                # Only registered handlers are wrapped: no on_tool_call layer runs.
                raise UnknownToolError(call.name, sorted(context.tools))
            result = await self._tool_chain()(call)
            if not isinstance(result, ToolResult):
                result = ToolResult.from_value(result)
        except (ToolArgumentsError, UnknownToolError) as exc:
            error = exc
            result = ToolResult(content=f"Error: {exc}", is_error=True)
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
        for extension in self.hooks["after_tool"]:
            await extension.after_tool(context, call, message, error)
        await context.append_message(message, MessageTiming(started, time.time()))
        self.open_calls.pop(call.id, None)
        # Emitted in the phase the tool ran in; the run is READY only afterwards.
        await self.out(
            AgentEventType.TOOL_FAILED if message.is_error else AgentEventType.TOOL_COMPLETED,
            tool_call=call,
            message=message,
        )
        state.phase = AgentPhase.READY

    def _tool_chain(self) -> Callable[[ToolCall], Any]:
        context = self.context

        async def invoke(call: ToolCall) -> ToolResult:
            # A layer may hand on a call with another name; it must still be registered.
            registered = context.tools.get(call.name)
            if registered is None:
                raise UnknownToolError(call.name, sorted(context.tools))
            return await registered(call.arguments)

        chain: Callable[[ToolCall], Any] = invoke
        for extension in reversed(self.hooks["on_tool_call"]):
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
