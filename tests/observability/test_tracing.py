"""TracingExtension on a real Agent: the spans an OpenTelemetry backend receives for a run."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from agents.extensions.approval import APPROVAL_EVENT, APPROVAL_REQUESTED, ToolApprovalExtension
from agents.extensions.steering import STEER_EVENT, SteeringExtension
from agents.extensions.tracing import (
    RequestTraceIds,
    TracingExtension,
    TracingSettings,
    build_tracer_provider,
)
from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ModelUsage,
    UserMessage,
    tool,
)

USAGE = ModelUsage(input_tokens=30, output_tokens=7, cache_read_tokens=10)


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _tracing(exporter: InMemorySpanExporter, **settings: Any) -> TracingExtension:
    provider = build_tracer_provider(SimpleSpanProcessor(exporter))
    return TracingExtension(
        TracingSettings(**settings),
        tracer_provider=provider,
        agent_name="Weather",
        provider="scripted",
        model="scripted-1",
    )


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


async def _run_approving(agent: Agent, config: AgentRunConfig, text: str, by: str) -> None:
    async for event in agent.stream(UserMessage(text, attributes={"by": by}), config=config):
        if event.type is AgentEventType.CUSTOM and event.name == APPROVAL_REQUESTED:
            accepted = agent.emit_external_event(
                ExternalEvent(
                    APPROVAL_EVENT, {"id": event.data["id"], "decision": "approve", "by": "olga"}
                ),
                config=config,
            )
            assert accepted == ["ToolApprovalExtension"]


async def test_a_run_with_an_approved_tool_call_exports_its_spans_with_parents_and_attributes(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel(
        [
            AssistantMessage("", tool_calls=(tool_call("lookup", {"city": "Oslo"}, id="c1"),)),
            "Fine",
        ],
        usage=USAGE,
    )
    agent = Agent(
        model,
        tools=[lookup],
        extensions=[_tracing(exporter), ToolApprovalExtension(tools=["lookup"])],
    )
    config = AgentRunConfig(session_id="s-1", request_id=str(uuid.UUID(int=0xABC123)))

    await _run_approving(agent, config, "Weather in Oslo?", by="alice")

    spans = _by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat scripted-1", "execute_tool lookup", "invoke_agent Weather"]
    (root,) = spans["invoke_agent Weather"]
    first_chat, second_chat = sorted(spans["chat scripted-1"], key=lambda s: s.start_time or 0)
    (tool_span,) = spans["execute_tool lookup"]

    assert root.parent is None and root.kind is SpanKind.INTERNAL
    # The trace id is the request id, so the run page can name the trace.
    assert root.context.trace_id == 0xABC123
    for child in (first_chat, second_chat, tool_span):
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id
        # Exactly what the SDK's SpanContext makes (the extension builds the tuple itself).
        ctx = child.context
        assert ctx == SpanContext(ctx.trace_id, ctx.span_id, False, root.context.trace_flags)
        assert ctx.is_valid and not ctx.is_remote and ctx.trace_state == root.context.trace_state
        assert ctx.trace_flags.sampled and ctx.span_id != root.context.span_id
    assert dict(root.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "Weather",
        "gen_ai.conversation.id": "s-1",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted-1",
        "zett.request_id": config.request_id,
        "user.id": "alice",
        "zett.run.status": "completed",
        "zett.iteration": 2,
        "gen_ai.usage.input_tokens": 60,
        "gen_ai.usage.output_tokens": 14,
        "gen_ai.usage.cache_read.input_tokens": 20,
    }
    assert root.status.status_code is StatusCode.UNSET

    chat = dict(first_chat.attributes or {})
    assert first_chat.kind is SpanKind.CLIENT
    assert chat.pop("gen_ai.response.time_to_first_chunk") >= 0
    assert chat == {
        "gen_ai.operation.name": "chat",
        "zett.iteration": 1,
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted-1",
        "gen_ai.response.model": "scripted-1",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 10,
    }
    assert dict(second_chat.attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)

    # Arguments and results stay out unless a setting opts in.
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "zett.tool.status": "completed",
    }
    assert [(e.name, dict(e.attributes or {})) for e in tool_span.events] == [
        ("zett.approval", {"zett.decision": "approved", "zett.by": "olga"})
    ]
    # The tool ran inside its span, after the first model call and before the second.
    assert first_chat.end_time <= tool_span.start_time  # type: ignore[operator]
    assert tool_span.end_time <= second_chat.start_time  # type: ignore[operator]


async def test_tool_content_is_recorded_only_when_a_setting_opts_in(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("lookup", {"city": "Oslo"}, id="c1"),)), "Ok"]
    )
    agent = Agent(model, tools=[lookup], extensions=[_tracing(exporter, capture_content=True)])

    await agent.run("Weather?")

    (tool_span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    attributes = dict(tool_span.attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"city": "Oslo"}'
    assert attributes["gen_ai.tool.call.result"] == "sunny in Oslo"


async def test_a_failed_model_call_marks_its_chat_span_and_the_run_span_as_errors(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel(
        [
            AssistantMessage("", tool_calls=(tool_call("missing", {}, id="c9"),)),
            ConnectionError("provider went away"),
        ]
    )
    agent = Agent(model, tools=[lookup], extensions=[_tracing(exporter)])

    with pytest.raises(ConnectionError):
        await agent.run("Hello", config=AgentRunConfig(session_id="s-2"))

    spans = _by_name(exporter.get_finished_spans())
    (root,) = spans["invoke_agent Weather"]
    ok_chat, failed_chat = sorted(spans["chat scripted-1"], key=lambda s: s.start_time or 0)
    (tool_span,) = spans["execute_tool missing"]

    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes is not None
    assert (root.attributes["zett.run.status"], root.attributes["error.type"]) == (
        "failed",
        "ConnectionError",
    )
    assert [e.name for e in root.events] == ["exception"]
    assert ok_chat.status.status_code is StatusCode.UNSET
    assert failed_chat.status.status_code is StatusCode.ERROR
    assert failed_chat.attributes is not None
    assert failed_chat.attributes["error.type"] == "ConnectionError"
    assert failed_chat.parent is not None and failed_chat.parent.span_id == root.context.span_id
    # An unknown tool is a failed call the model reads, not a failed run.
    assert tool_span.status.status_code is StatusCode.ERROR
    assert tool_span.attributes is not None
    assert (tool_span.attributes["zett.tool.status"], tool_span.attributes["error.type"]) == (
        "failed",
        "UnknownToolError",
    )


async def test_cancelling_a_run_ends_its_spans_with_a_cancelled_event(
    exporter: InMemorySpanExporter,
) -> None:
    model = GatedModel(["never"])
    agent = Agent(model, extensions=[_tracing(exporter)])
    handle = agent.start("Hello", config=AgentRunConfig(session_id="s-3"))
    ended = asyncio.create_task(handle.wait())  # reads the events, so the run advances
    await model.entered.wait()

    handle.cancel()
    await ended

    spans = _by_name(exporter.get_finished_spans())
    (root,) = spans["invoke_agent Weather"]
    (chat,) = spans["chat scripted-1"]
    assert root.attributes is not None and root.attributes["zett.run.status"] == "cancelled"
    assert [e.name for e in root.events] == ["zett.cancelled"]
    assert chat.attributes is not None and chat.attributes["error.type"] == "cancelled"


async def test_steering_is_a_span_event_naming_who_steered(
    exporter: InMemorySpanExporter,
) -> None:
    model = GatedModel(["First", "Second"])
    agent = Agent(model, extensions=[_tracing(exporter), SteeringExtension()])
    config = AgentRunConfig(session_id="s-4")
    handle = agent.start("Hello", config=config)
    ended = asyncio.create_task(handle.wait())  # reads the events, so the run advances
    await model.entered.wait()
    steering = ExternalEvent(STEER_EVENT, {"text": "No, in French", "by": "olga"})
    assert handle.emit_external_event(steering) == ["SteeringExtension"]
    model.gate.set()
    await ended

    (root,) = _by_name(exporter.get_finished_spans())["invoke_agent Weather"]
    assert [(e.name, dict(e.attributes or {})) for e in root.events] == [
        ("zett.steering", {"zett.by": "olga"})
    ]


class DroppingSampler(Sampler):
    """Samples nothing, and remembers which span names it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def should_sample(
        self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any
    ) -> SamplingResult:
        self.asked.append(name)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return "DroppingSampler"


async def test_a_provider_s_own_sampler_decides_for_each_run(
    exporter: InMemorySpanExporter,
) -> None:
    sampler = DroppingSampler()
    provider = TracerProvider(sampler=sampler, id_generator=RequestTraceIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = TracingExtension(tracer_provider=provider, agent_name="Weather")
    agent = Agent(ScriptedModel(["One.", "Two."]), extensions=[tracing])

    await agent.run("Hello", config=AgentRunConfig(session_id="s-sampled"))
    await agent.run("Again", config=AgentRunConfig(session_id="s-sampled"))

    assert sampler.asked == ["invoke_agent Weather", "invoke_agent Weather"]
    assert exporter.get_finished_spans() == ()
