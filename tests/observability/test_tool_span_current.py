"""The execute_tool span is the current span while its tool runs: a tool's own spans nest in it."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.extensions.approval import APPROVAL_EVENT, APPROVAL_REQUESTED, ToolApprovalExtension
from agents.extensions.tracing import TracingExtension, TracingSettings, build_tracer_provider
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    UserMessage,
    tool,
)

EXPORTER = InMemorySpanExporter()
PROVIDER = build_tracer_provider(SimpleSpanProcessor(EXPORTER))
TOOL_TRACER = PROVIDER.get_tracer("a-tool-library")
seen: list[trace.SpanContext] = []  # the current span's context as each tool saw it


@tool
def lookup_in_a_thread(city: str) -> str:
    """A sync tool: the runtime runs it in a thread."""
    seen.append(trace.get_current_span().get_span_context())
    with TOOL_TRACER.start_as_current_span("http GET weather"):
        return f"sunny in {city}"


@tool
async def lookup_on_the_loop(city: str) -> str:
    """An async tool: it runs on the run's event loop."""
    seen.append(trace.get_current_span().get_span_context())
    with TOOL_TRACER.start_as_current_span("http GET weather"):
        return f"rainy in {city}"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    EXPORTER.clear()
    seen.clear()


def _agent(name: str, *, approval: bool = False) -> Agent:
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call(name, {"city": "Oslo"}, id="c1"),)), "Done"]
    )
    extensions: list = [
        TracingExtension(
            TracingSettings(), tracer_provider=PROVIDER, agent_name="Weather", model="m"
        )
    ]
    if approval:
        extensions.append(ToolApprovalExtension(tools=[name]))
    tools = [lookup_in_a_thread, lookup_on_the_loop]
    return Agent(model, tools=tools, extensions=extensions)


async def _run(agent: Agent) -> dict[str, ReadableSpan]:
    config = AgentRunConfig(session_id="s-1", request_id=str(uuid.uuid4()))
    async for event in agent.stream(UserMessage("Weather?"), config=config):
        if event.type is AgentEventType.CUSTOM and event.name == APPROVAL_REQUESTED:
            agent.emit_external_event(
                ExternalEvent(APPROVAL_EVENT, {"id": event.data["id"], "decision": "approve"}),
                config=config,
            )
    spans = {span.name: span for span in EXPORTER.get_finished_spans()}
    assert set(spans) == {"invoke_agent Weather", "chat m", spans_tool(spans), "http GET weather"}
    return spans


def spans_tool(spans: dict[str, ReadableSpan]) -> str:
    (name,) = [name for name in spans if name.startswith("execute_tool ")]
    return name


@pytest.mark.parametrize("name", ["lookup_in_a_thread", "lookup_on_the_loop"])
async def test_a_tools_own_span_is_a_child_of_its_execute_tool_span(name: str) -> None:
    spans = await _run(_agent(name))

    tool_span = spans[f"execute_tool {name}"]
    inner = spans["http GET weather"]
    assert seen == [tool_span.context]  # the tool saw its execute_tool span as current
    assert inner.parent is not None
    assert inner.parent.span_id == tool_span.context.span_id
    assert inner.context.trace_id == spans["invoke_agent Weather"].context.trace_id


async def test_after_an_approval_the_tool_still_runs_inside_its_span() -> None:
    spans = await _run(_agent("lookup_in_a_thread", approval=True))

    tool_span = spans["execute_tool lookup_in_a_thread"]
    assert seen == [tool_span.context]
    assert spans["http GET weather"].parent.span_id == tool_span.context.span_id  # type: ignore[union-attr]


async def test_outside_a_tool_call_no_execute_tool_span_is_current() -> None:
    await _run(_agent("lookup_on_the_loop"))

    assert not trace.get_current_span().get_span_context().is_valid
