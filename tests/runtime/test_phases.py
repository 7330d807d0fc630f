"""Every outward event carries the phase it was emitted in; late messages still get published."""

from __future__ import annotations

from typing import Any

from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentPhase,
    AgentRunConfig,
    AssistantMessage,
    MessageAppendedEvent,
    UserMessage,
)

from .conftest import CallbackExtension, add, collect


async def test_tool_events_carry_the_running_tool_phase(config: AgentRunConfig) -> None:
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 2}),)), "3"]
    )
    events = await collect(Agent(model, tools=[add], extensions=[]), "add", config)
    phases = {e.type: e.phase for e in events if e.type.name in ("TOOL_STARTED", "TOOL_COMPLETED")}
    assert phases == {
        AgentEventType.TOOL_STARTED: AgentPhase.RUNNING_TOOL,
        AgentEventType.TOOL_COMPLETED: AgentPhase.RUNNING_TOOL,
    }
    assert events[-1].phase is AgentPhase.COMPLETED


async def test_messages_added_after_the_last_turn_reach_subscribers(
    config: AgentRunConfig,
) -> None:
    published: list[str] = []

    async def note(context: Any, result: Any) -> None:
        context.add_message(UserMessage("added in after_run"))

    async def later(context: Any, result: Any) -> None:
        context.add_message(UserMessage("added in on_success"))

    async def subscriber(context: Any, event: Any) -> None:
        if isinstance(event, MessageAppendedEvent):
            published.append(event.message.content)

    agent = Agent(
        ScriptedModel(["done"]),
        extensions=[
            CallbackExtension("late", after_run=note, on_success=later),
            CallbackExtension("store", on_event=subscriber),
        ],
    )
    events = await collect(agent, "hi", config)
    assert published[-2:] == ["added in after_run", "added in on_success"]
    assert events[-1].type is AgentEventType.RUN_COMPLETED


async def test_a_compaction_inside_a_request_is_stamped_compacting_then_returns_to_ready(
    config: AgentRunConfig,
) -> None:
    async def compact_first(context: Any, request: Any) -> None:
        await context.emit(AgentEvent(AgentEventType.COMPACTION_STARTED))
        await context.emit(AgentEvent(AgentEventType.CUSTOM, name="compaction.progress"))
        await context.emit(AgentEvent(AgentEventType.COMPACTION_COMPLETED))
        phases_after.append(context.state.phase)

    phases_after: list[AgentPhase] = []
    compactor = CallbackExtension(before_model=compact_first)
    events = await collect(Agent(ScriptedModel(["ok"]), extensions=[compactor]), "hi", config)

    stamped = [(e.type.name, e.phase) for e in events if e.type.name.startswith(("COMP", "CUS"))]
    assert stamped == [
        ("COMPACTION_STARTED", AgentPhase.COMPACTING),
        ("CUSTOM", AgentPhase.COMPACTING),
        ("COMPACTION_COMPLETED", AgentPhase.COMPACTING),
    ]
    assert phases_after == [AgentPhase.READY]
