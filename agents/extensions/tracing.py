"""TracingExtension: OpenTelemetry spans of every run, after the GenAI semantic conventions.

One ``invoke_agent {agent}`` span per request, a child ``chat {model}`` span per model call
and an ``execute_tool {tool}`` span per tool call; approvals, questions, steering,
compaction and cancellation are span events with who acted. Built on the runtime's hooks
only (no Django), so runs hosted by the site and by ``manage.py agent`` trace alike.

The invoke_agent span is a root span whose trace id is the request id (its 32 hex digits)
whenever the tracer provider uses ``RequestTraceIds`` (see ``tracer_provider``, whose names
this module re-exports): a run page can then name its trace without storing it. Arguments
and results of tool calls are recorded only with ``capture_content``, since they may hold
personal data.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    Tracer,
    sampling,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from pydantic import BaseModel, ConfigDict, Field

from ..runtime.events import CompactionEvent, MessageAppendedEvent, RunCancelledEvent
from ..runtime.extension import AgentExtension
from ..runtime.messages import UserMessage
from .tracer_provider import (
    RequestTraceIds,
    build_tracer_provider,
    configure_from_environment,
    request_id_of_trace,
    trace_id_of,
)

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext
    from ..runtime.events import ExtensionEvent
    from ..runtime.extension import ModelCallNext, ToolCallNext
    from ..runtime.messages import AssistantMessage, ToolCall, ToolMessage
    from ..runtime.model import ModelEvent, ModelRequest, ModelResponse, ModelUsage
    from ..runtime.state import AgentState
    from ..runtime.tools import ToolResult

INSTRUMENTATION = "zett.agents"
_log = logging.getLogger(__name__)
_STATE_KEY = "tracing.spans"
_EMPTY = otel_context.Context()  # a run's trace starts fresh, not under whoever started it

# Span attributes: GenAI semantic conventions first, then ours (zett.*) where they have none.
OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
USER_ID = "user.id"
ERROR_TYPE = "error.type"
REQUEST_ID = "zett.request_id"
RUN_STATUS = "zett.run.status"
ITERATION = "zett.iteration"
TOOL_STATUS = "zett.tool.status"


class TracingSettings(BaseModel):
    """What the tracing extension records beyond names, ids, timings and token counts."""

    model_config = ConfigDict(extra="forbid")
    capture_content: bool = Field(
        default=False,
        description="Record tool call arguments and results on execute_tool spans "
        "(they may hold personal data).",
    )


# -- one request's spans ---------------------------------------------------------------------
#
# Spans are recorded in ReadableSpans of our own while the run goes on (fields set in place,
# no locks) and handed to the tracer's span processor when each ends: the SDK's live Span (locks,
# bounded attribute maps, per-call validation) costs some 20 µs a span, which is more than
# the whole runtime spends on a dozen events. What a processor sees is what the SDK would
# have given it at on_end; on_start is not called (batch, simple and exporting processors
# do nothing there). Child spans follow their run's sampling decision, as the SDK's default
# ParentBased sampler has them do.

_UNSET = Status(StatusCode.UNSET)
_ALWAYS_ON = (sampling.ALWAYS_ON, sampling.DEFAULT_ON)
_NO_EVENTS: tuple[Event, ...] = ()
_NO_LINKS: tuple[Link, ...] = ()
_SPAN_ID_LIMIT = 1 << 64
_new_tuple = tuple.__new__


def _child_context(parent: SpanContext, span_id: int) -> SpanContext:
    """``SpanContext(parent.trace_id, span_id, False, parent.trace_flags, parent.trace_state)``.

    What SpanContext's constructor builds (a tuple, its validity last), without the call:
    the parent's trace id, flags and state were checked when the root was built.
    """
    valid = parent[5] and 0 < span_id < _SPAN_ID_LIMIT
    return _new_tuple(SpanContext, (parent[0], span_id, False, parent[3], parent[4], valid))


class _Span(ReadableSpan):
    """A span under way, handed to the span processor as the finished span when it ends.

    The fields are those ReadableSpan's constructor sets (its properties read them); the
    end time is set when the span ends, and events are added as they happen.
    """

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        export: _Export,
    ) -> None:
        self._name = name
        self._kind = kind
        self._context = context  # also what makes an execute_tool span current
        self._parent = parent
        self._attributes = attributes
        self._events = _NO_EVENTS
        self._links = _NO_LINKS
        self._status = _UNSET
        self._resource = export.resource
        self._instrumentation_info = export.instrumentation_info
        self._instrumentation_scope = export.scope
        self._start_time = time.time_ns()
        self._end_time = None

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        self._events = (*self._events, Event(name, attributes, time.time_ns()))

    def record_exception(self, error: BaseException) -> None:
        kind = type(error)
        module = kind.__module__
        self.add_event(
            "exception",
            {
                "exception.type": f"{module}.{kind.__qualname__}"
                if module and module != "builtins"
                else kind.__qualname__,
                "exception.message": str(error),
                "exception.stacktrace": "".join(traceback.format_exception(error)),
                "exception.escaped": "False",
            },
        )

    def fail(self, error_type: str, description: str | None = None) -> None:
        self._attributes[ERROR_TYPE] = error_type
        self._status = Status(StatusCode.ERROR, description or error_type)


class _Export:
    """What every span of one tracer is handed over with, looked up once per tracer."""

    __slots__ = (
        "always_sampled",
        "instrumentation_info",
        "new_span_id",
        "new_trace_id",
        "on_end",
        "request_ids",
        "resource",
        "sampled_flags",
        "scope",
    )

    def __init__(self, tracer: Tracer) -> None:
        # The SDK's default samplers sample every root span alike: no need to ask per run.
        self.always_sampled = any(tracer.sampler is always for always in _ALWAYS_ON)
        # The provider's multi-processor: processors added later are still reached.
        self.on_end = tracer.span_processor.on_end
        self.new_span_id = tracer.id_generator.generate_span_id
        self.resource = tracer.resource
        self.instrumentation_info = tracer.instrumentation_info
        self.scope = tracer._instrumentation_scope  # noqa: SLF001 -- the SDK's own spans carry it
        ids = tracer.id_generator
        self.new_trace_id = ids.generate_trace_id
        self.request_ids = isinstance(ids, RequestTraceIds)  # a run's trace id is its request id
        flags = TraceFlags.SAMPLED
        if ids.is_trace_id_random():
            flags |= TraceFlags.RANDOM_TRACE_ID
        self.sampled_flags = TraceFlags(flags)  # what every root span of a sampled run carries


@dataclass(slots=True, eq=False)
class _RunSpans:
    export: _Export
    recording: bool  # the sampler's decision: hand ended spans to the processor or not
    root: _Span  # its context is the parent of the chat and execute_tool spans
    tools: dict[str, _Span] = field(default_factory=dict)  # open execute_tool spans by call id
    chat: _Span | None = None  # the chat span of the model call under way
    chat_started: float = 0.0  # time.monotonic() when it opened, for its time to first chunk

    def time_first_chunk(self, state: AgentState) -> None:
        """Give the open chat span its time to first chunk, once its stream sent one."""
        chat, first = self.chat, state.first_chunk_at
        if chat is not None and first is not None:
            chat._attributes[TIME_TO_FIRST_CHUNK] = first - self.chat_started

    def child(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> _Span:
        export, parent = self.export, self.root._context
        context = _child_context(parent, export.new_span_id())
        return _Span(name, kind, context, parent, attributes, export)

    def end(self, span: _Span) -> None:
        """Hand the ended span to the tracer's span processor, as the SDK's Span.end does."""
        span._end_time = time.time_ns()  # as the SDK's Span.end does
        if self.recording:
            self.export.on_end(span)

    def end_open(self, error_type: str, error: BaseException | None = None) -> None:
        """End the chat and execute_tool spans a failed or cancelled run leaves open."""
        chat, self.chat = self.chat, None
        for span in [*([chat] if chat is not None else []), *self.tools.values()]:
            if error is not None and span is chat:
                span.record_exception(error)
            span.fail(error_type)
            self.end(span)
        self.tools.clear()


class TracingExtension(AgentExtension):
    """Spans for every request of the agents it is registered with.

    Priority 0 by default, ahead of the usual 100: its middleware is outermost, so a
    chat span covers what other extensions do around the provider, and an
    execute_tool span covers the wait for an approval.

    Spans go to an OpenTelemetry SDK ``TracerProvider`` (its sampler, id generator,
    resource and span processors); with any other provider, or the SDK disabled, nothing
    is recorded.
    """

    priority: ClassVar[int] = 0
    catalog_key: ClassVar[str] = "tracing"

    def __init__(
        self,
        settings: TracingSettings | None = None,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        agent_name: str = "agent",
        provider: str = "",
        model: str = "",
    ) -> None:
        self.settings = settings if settings is not None else TracingSettings()
        self._tracer_provider = tracer_provider
        self._tracer: Tracer | None = None
        self._export: _Export | None = None  # with _tracer
        self._checked = False
        self._value_limit = SpanLimits().max_span_attribute_length
        self.describe(agent_name=agent_name, provider=provider, model=model)

    def describe(self, *, agent_name: str, provider: str = "", model: str = "") -> None:
        """Name the agent, provider and model the spans report (the catalog does this)."""
        self.agent_name = agent_name or "agent"
        self.provider = provider
        self.model = model
        self._root_name = f"invoke_agent {self.agent_name}"
        self._chat_name = f"chat {model or provider or 'model'}"

    @property
    def tracer(self) -> Tracer | None:
        """The SDK tracer spans go to; None while the global provider is still a proxy,
        or for good when it is no SDK provider."""
        if self._checked:
            return self._tracer
        provider = self._tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return None  # nobody has installed a provider yet: look again next run
        tracer = provider.get_tracer(INSTRUMENTATION)
        self._checked = True
        if isinstance(tracer, Tracer):
            self._tracer = tracer
            self._export = _Export(tracer)
        else:
            _log.warning("Tracing is off: %s is not an OpenTelemetry SDK tracer", tracer)
        return self._tracer

    # -- the request span -------------------------------------------------------------

    async def on_tool(self, context: AgentRunContext) -> None:
        """Open the invoke_agent span (the first hook of a request); not for compaction."""
        if context.input_message is None:
            return  # Agent.compact: no request to trace
        tracer = self.tracer
        if tracer is None:
            return
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: self.agent_name,
            CONVERSATION_ID: context.session_id,
            REQUEST_ID: context.request_id,
        }
        if self.provider:
            attributes[PROVIDER] = self.provider
        if self.model:
            attributes[REQUEST_MODEL] = self.model
        user = context.input_message.attributes.get("by")
        if user:
            attributes[USER_ID] = str(user)
        export: _Export = self._export  # type: ignore[assignment]  # set with the tracer
        trace_id = (export.request_ids and trace_id_of(context.request_id)) or export.new_trace_id()
        name = self._root_name
        if export.always_sampled:
            trace_flags, trace_state, recording = export.sampled_flags, None, True
        else:
            sampled = tracer.sampler.should_sample(
                _EMPTY, trace_id, name, SpanKind.INTERNAL, attributes
            )
            decision = sampled.decision
            flags = TraceFlags.SAMPLED if decision.is_sampled() else TraceFlags.DEFAULT
            if tracer.id_generator.is_trace_id_random():
                flags |= TraceFlags.RANDOM_TRACE_ID
            if sampled.attributes:
                attributes.update(sampled.attributes)
            trace_flags, trace_state = TraceFlags(flags), sampled.trace_state
            recording = decision.is_recording()
        root_context = SpanContext(trace_id, export.new_span_id(), False, trace_flags, trace_state)
        root = _Span(name, SpanKind.INTERNAL, root_context, None, attributes, export)
        spans = _RunSpans(export, recording, root)
        context.metadata[_STATE_KEY] = spans

    async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
        spans = context.metadata.pop(_STATE_KEY, None)
        if spans is not None:
            self._end_run(context, spans, "completed")

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        spans = context.metadata.pop(_STATE_KEY, None)
        if spans is None:
            return
        error_type = type(error).__name__
        spans.time_first_chunk(context.state)
        spans.end_open(error_type, error)
        spans.root.record_exception(error)
        spans.root.fail(error_type, str(error)[:500] or error_type)
        self._end_run(context, spans, "failed")

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        if isinstance(event, MessageAppendedEvent):
            message = event.message
            if not isinstance(message, UserMessage) or not message.attributes.get("steering"):
                return  # the common case, a message of the run itself: nothing to record
            spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
            if spans is not None:
                spans.root.add_event("zett.steering", _by(message.attributes))
            return
        spans = context.metadata.get(_STATE_KEY)
        if spans is None:
            return
        if isinstance(event, CompactionEvent):
            spans.root.add_event(
                "zett.compaction",
                {
                    "zett.compaction.compressed_from": event.compressed_from,
                    "zett.compaction.compressed_to": event.compressed_to,
                    "zett.compaction.kept_from": event.kept_from,
                    "zett.compaction.kept_to": event.kept_to,
                },
            )
        elif isinstance(event, RunCancelledEvent):
            del context.metadata[_STATE_KEY]
            spans.time_first_chunk(context.state)
            spans.end_open("cancelled")
            spans.root.add_event(
                "zett.cancelled", {"zett.reason": event.reason} if event.reason else {}
            )
            spans.root._attributes[ERROR_TYPE] = "cancelled"
            self._end_run(context, spans, "cancelled")

    def _end_run(self, context: AgentRunContext, spans: _RunSpans, status: str) -> None:
        attributes = spans.root._attributes
        attributes[RUN_STATUS] = status
        attributes[ITERATION] = context.state.iteration
        _usage_into(attributes, context.state.usage)
        spans.end(spans.root)

    # -- model calls --------------------------------------------------------------------

    def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: ModelCallNext
    ) -> AsyncIterator[ModelEvent]:
        """Open the chat span; after_model (or the run's end) closes it.

        The stream is handed back as it is: no event passes through code of ours (the
        runtime notes when the first chunk came, and after_model reads it).
        """
        spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
        if spans is None:
            return call_next(request)
        attributes: dict[str, Any] = {OPERATION: "chat", ITERATION: request.iteration}
        if self.provider:
            attributes[PROVIDER] = self.provider
        if self.model:
            attributes[REQUEST_MODEL] = self.model
        spans.chat = spans.child(self._chat_name, SpanKind.CLIENT, attributes)
        spans.chat_started = time.monotonic()
        return call_next(request)

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
        if spans is None or spans.chat is None:
            return
        spans.time_first_chunk(context.state)
        span, spans.chat = spans.chat, None
        attributes = span._attributes
        attributes[FINISH_REASONS] = _finish_reasons(response.finish_reason)
        if self.model:
            attributes[RESPONSE_MODEL] = self.model
        _usage_into(attributes, response.usage)
        spans.end(span)

    # -- tool calls ---------------------------------------------------------------------

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
        if spans is None:
            return
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: call.name,
            TOOL_CALL_ID: call.id,
            TOOL_TYPE: "function",
        }
        if self.settings.capture_content:
            attributes[TOOL_ARGUMENTS] = self._bounded(_json(call.arguments))
        spans.tools[call.id] = spans.child(
            f"execute_tool {call.name}", SpanKind.INTERNAL, attributes
        )

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: ToolCallNext
    ) -> ToolResult:
        """Run the handler with its execute_tool span current, so its own spans nest."""
        spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
        span = spans.tools.get(call.id) if spans is not None else None
        if span is None:
            return await call_next(call)
        current = NonRecordingSpan(span._context)
        token = otel_context.attach(trace.set_span_in_context(current))
        try:
            return await call_next(call)
        finally:
            otel_context.detach(token)

    async def after_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        result: ToolMessage,
        error: BaseException | None,
    ) -> None:
        spans: _RunSpans | None = context.metadata.get(_STATE_KEY)
        span = spans.tools.pop(call.id, None) if spans is not None else None
        if span is None:
            return
        attributes = result.attributes
        approval = attributes.get("approval")
        if approval:
            span.add_event("zett.approval", {"zett.decision": str(approval), **_by(attributes)})
        question = attributes.get("ask_user")
        if question:
            span.add_event("zett.question", {"zett.outcome": str(question), **_by(attributes)})
        if self.settings.capture_content:
            span._attributes[TOOL_RESULT] = self._bounded(result.content)
        if result.is_error:
            error_type = type(error).__name__ if error is not None else "tool_error"
            if error is not None:
                span.record_exception(error)
            span._attributes[TOOL_STATUS] = "failed"
            span.fail(error_type)
        else:
            span._attributes[TOOL_STATUS] = "completed"
        spans.end(span)  # type: ignore[union-attr]

    def _bounded(self, value: Any) -> Any:
        """Content cut to OTEL_(SPAN_)ATTRIBUTE_VALUE_LENGTH_LIMIT, as the SDK would."""
        limit = self._value_limit
        if limit is not None and isinstance(value, str) and len(value) > limit:
            return value[:limit]
        return value


# One shared tuple per finish reason: a fresh one per chat span would make its attribute
# dict, held in the processor's queue until export, one more object the collector walks.
_FINISH_REASONS: dict[str, tuple[str]] = {}


def _finish_reasons(reason: str) -> tuple[str]:
    reasons = _FINISH_REASONS.get(reason)
    if reasons is None:
        reasons = (reason,)
        if len(_FINISH_REASONS) < 64:  # providers have a handful; never grow without bound
            _FINISH_REASONS[reason] = reasons
    return reasons


def _by(attributes: Any) -> dict[str, str]:
    by = attributes.get("by")
    return {"zett.by": str(by)} if by else {}


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _usage_into(attributes: dict[str, Any], usage: ModelUsage) -> None:
    attributes[INPUT_TOKENS] = usage.input_tokens
    attributes[OUTPUT_TOKENS] = usage.output_tokens
    if usage.cache_read_tokens is not None:
        attributes[CACHE_READ_TOKENS] = usage.cache_read_tokens
    if usage.cache_write_tokens is not None:
        attributes[CACHE_WRITE_TOKENS] = usage.cache_write_tokens
    if usage.reasoning_tokens is not None:
        attributes[REASONING_TOKENS] = usage.reasoning_tokens


__all__ = [
    "RequestTraceIds",
    "TracingExtension",
    "TracingSettings",
    "build_tracer_provider",
    "configure_from_environment",
    "request_id_of_trace",
    "trace_id_of",
]
