"""Agent.compact: restore the session, run on_compact, no input and no model call."""

from __future__ import annotations

import asyncio

import pytest

from agents.extensions.memory import InMemoryMessageAccumulator
from agents.providers.scripted import GatedModel, ScriptedModel
from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExtension,
    AgentProtocolError,
    AgentRunConfig,
    AgentRunContext,
    CompactionEvent,
    MessageAppendedEvent,
    UserMessage,
)

from .conftest import Recorder, wait


class Summariser(AgentExtension):
    """Compacts everything but the last exchange into a summary, announcing it outward."""

    def __init__(self) -> None:
        self.restored: list[str] = []

    async def on_compact(self, context: AgentRunContext) -> None:
        dialogue = [m for m in context.state.messages if m.role != "system"]
        self.restored = [m.content for m in dialogue]  # type: ignore[union-attr]
        await context.emit(AgentEvent(AgentEventType.COMPACTION_STARTED))
        await context.publish(
            CompactionEvent(
                compressed_from=1,
                compressed_to=len(dialogue) - 2,
                kept_from=len(dialogue) - 1,
                kept_to=len(dialogue),
                summary="Q1 was answered with A1.",
            )
        )
        await context.emit(AgentEvent(AgentEventType.COMPACTION_COMPLETED, data={"kept": 2}))


async def test_compact_restores_then_runs_on_compact_without_input_or_model(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    memory = InMemoryMessageAccumulator()
    summariser = Summariser()
    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model, extensions=[memory, summariser, recorder])
    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)
    log.clear()
    recorder.events.clear()
    calls_before = model.calls

    events = await agent.compact(config=config)

    assert model.calls == calls_before == 2
    assert summariser.restored == ["Q1", "A1", "Q2", "A2"]
    assert [entry for entry in log if not entry.startswith("on_event")] == [
        "on_tool",
        "on_state",
        "on_compact",
    ]
    appended_roles = [
        e.message.role for e in recorder.events if isinstance(e, MessageAppendedEvent)
    ]
    assert set(appended_roles) <= {"system"}
    assert [(e.type, e.session_id) for e in events] == [
        (AgentEventType.COMPACTION_STARTED, "session-1"),
        (AgentEventType.COMPACTION_COMPLETED, "session-1"),
    ]
    assert dict(events[1].data) == {"kept": 2}
    assert [m.content for m in memory.messages("session-1")] == [
        "Summary of the earlier conversation:\nQ1 was answered with A1.",
        "Q2",
        "A2",
    ]


async def test_compact_on_a_busy_session_is_refused(config: AgentRunConfig) -> None:
    model = GatedModel(["Ok."])
    agent = Agent(model)
    run = asyncio.create_task(agent.run("hi", config=config))
    await wait(model.entered.wait())

    with pytest.raises(AgentProtocolError):
        await agent.compact(config=config)
    model.gate.set()

    assert (await wait(run)).content == "Ok."


async def test_compact_failure_goes_through_on_error(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    class Broken(AgentExtension):
        async def on_compact(self, context: AgentRunContext) -> None:
            raise ValueError("summary model unavailable")

    agent = Agent(ScriptedModel(), extensions=[Broken(), recorder])

    with pytest.raises(ValueError, match="summary model unavailable"):
        await agent.compact(config=config)

    assert log[-1] == "on_error"
    assert not agent.is_active("session-1") and not recorder.pending


class Pruner(AgentExtension):
    """Adds a note while restoring, and on_compact drops it again."""

    async def on_state(self, context: AgentRunContext) -> None:
        context.add_message(UserMessage("restored note"))

    async def on_compact(self, context: AgentRunContext) -> None:
        kept = [m for m in context.state.messages if m.content != "restored note"]
        context.replace_messages(kept, emit_new=False)


async def test_compact_announces_setup_messages_before_on_compact_runs(
    log: list[str], config: AgentRunConfig
) -> None:
    recorder = Recorder(log)
    agent = Agent(ScriptedModel([]), extensions=[Pruner(), recorder])

    await agent.compact(config=config)

    announced = [e.message.content for e in recorder.events if isinstance(e, MessageAppendedEvent)]
    assert announced == ["You are a helpful assistant.", "restored note"]
    assert log.index("on_event:user") < log.index("on_compact")


async def test_start_compaction_gives_a_handle_whose_events_are_the_compactions(
    config: AgentRunConfig,
) -> None:
    memory = InMemoryMessageAccumulator()
    agent = Agent(ScriptedModel(["A1", "A2"]), extensions=[memory, Summariser()])
    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)

    handle = agent.start_compaction(config)
    with pytest.raises(AgentProtocolError):
        agent.start("Q3", config=config)  # the pass holds the session like a run
    events = [event async for event in handle.events()]

    assert [e.type for e in events] == [
        AgentEventType.COMPACTION_STARTED,
        AgentEventType.COMPACTION_COMPLETED,
    ]
    assert handle.done and handle.error is None and handle.answer is None
    assert not agent.is_active("session-1")


class Stuck(AgentExtension):
    """on_compact waits until the pass is cancelled."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def on_compact(self, context: AgentRunContext) -> None:
        self.entered.set()
        await asyncio.Event().wait()


async def test_a_started_compaction_can_be_cancelled_and_frees_the_session(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    stuck = Stuck()
    agent = Agent(ScriptedModel(), extensions=[stuck, recorder])
    handle = agent.start_compaction(config)
    reader = asyncio.create_task(handle.wait())
    await wait(stuck.entered.wait())

    assert handle.cancel()
    await wait(reader)

    assert handle.cancelled and "on_error" not in log
    assert not agent.is_active("session-1")
