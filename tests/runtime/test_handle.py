"""Agent.start and RunHandle: events to the end (cancellation included), outcome, steering left."""

from __future__ import annotations

import asyncio

import pytest

from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentPhase,
    AgentProtocolError,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    RunCancelledEvent,
    RunHandle,
    UserMessage,
    tool,
)
from agents.runtime.extension import AgentExtension
from agents.runtime.state import AgentRunConfig as Config

from .conftest import Recorder, event_types, wait

ET = AgentEventType


@tool
async def double(n: int) -> int:
    """Double a number without ever suspending."""
    return n * 2


def tool_then_answer(answer: str = "Four.") -> ScriptedModel:
    return ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("double", {"n": 2}, id="d1"),)), answer]
    )


async def test_events_yield_the_whole_run_and_result_is_the_answer(
    config: AgentRunConfig,
) -> None:
    agent = Agent(tool_then_answer(), tools=[double])

    handle = agent.start("double two", config)
    events = [event async for event in handle.events()]

    assert event_types(events) == [
        "RUN_STARTED",
        "MODEL_STARTED",
        "TOOL_CALL_DELTA",
        "MODEL_COMPLETED",
        "TOOL_STARTED",
        "TOOL_COMPLETED",
        "MODEL_STARTED",
        "MODEL_COMPLETED",
        "RUN_COMPLETED",
    ]
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert handle.done and not handle.cancelled and handle.error is None
    assert handle.result().content == "Four."
    assert handle.answer is handle.result()
    assert not agent.is_active("session-1")


async def test_start_claims_the_session_before_returning(config: AgentRunConfig) -> None:
    agent = Agent(GatedModel(["late"]))

    handle = agent.start("first", config)
    with pytest.raises(AgentProtocolError):
        agent.start("second", config)

    assert handle.context is agent.active_context("session-1")
    assert handle.session_id == "session-1" and handle.request_id
    handle.cancel()
    await wait(handle.wait())
    assert not agent.is_active("session-1")


async def test_cancel_then_keep_reading_yields_the_cancellation_events(
    config: AgentRunConfig,
) -> None:
    model = GatedModel()
    model.steps = [
        AssistantMessage(
            "",
            tool_calls=(
                tool_call("double", {"n": 1}, id="c1"),
                tool_call("double", {"n": 2}, id="c2"),
            ),
        )
    ]
    model.gate.set()
    recorder = Recorder([])
    agent = Agent(model, tools=[double], extensions=[recorder])
    handle = agent.start("go", config)

    seen = []
    async for event in handle.events():
        seen.append(event)
        if event.type is ET.TOOL_COMPLETED:
            assert handle.cancel()
    assert seen[-2].type is ET.TOOL_COMPLETED

    closing = seen[-1]
    assert (closing.type, closing.phase) == (ET.TOOL_FAILED, AgentPhase.CANCELLED)
    assert closing.tool_call is not None and closing.tool_call.id == "c2"
    assert handle.cancelled and handle.error is None and handle.answer is None
    with pytest.raises(asyncio.CancelledError):
        handle.result()
    assert any(isinstance(e, RunCancelledEvent) for e in recorder.events)


async def test_closing_events_early_cancels_and_events_again_drains_the_rest(
    config: AgentRunConfig,
) -> None:
    agent = Agent(
        ScriptedModel(
            [AssistantMessage("", tool_calls=(tool_call("double", {"n": 1}, id="c1"),)), "x"]
        ),
        tools=[double],
    )
    handle = agent.start("go", config)

    events = handle.events()
    async for event in events:
        if event.type is ET.MODEL_COMPLETED:
            break
    await events.aclose()
    rest = [event async for event in handle.events()]

    assert [(e.type, e.phase) for e in rest] == [(ET.TOOL_FAILED, AgentPhase.CANCELLED)]
    assert handle.cancelled


async def test_a_second_concurrent_reader_is_refused(config: AgentRunConfig) -> None:
    model = GatedModel(["hi there"])
    agent = Agent(model)
    handle = agent.start("hi", config)
    events = handle.events()
    assert (await anext(events)).type is ET.RUN_STARTED
    assert (await anext(events)).type is ET.MODEL_STARTED
    waiting = asyncio.ensure_future(anext(events))  # lets the run into the gated model

    await wait(model.entered.wait())
    with pytest.raises(AgentProtocolError):
        await anext(handle.events())

    model.gate.set()
    assert (await wait(waiting)).type is ET.TEXT_DELTA
    await events.aclose()
    await wait(handle.wait())
    assert handle.cancelled


async def test_breaking_out_only_pauses_and_the_next_reader_continues(
    config: AgentRunConfig,
) -> None:
    agent = Agent(tool_then_answer(), tools=[double])
    handle = agent.start("double two", config)

    first = []
    async for event in handle.events():
        first.append(event.seq)
        if event.type is ET.TOOL_STARTED:
            break
    rest = [event.seq async for event in handle.events()]

    assert first + rest == list(range(1, len(first) + len(rest) + 1))
    assert handle.result().content == "Four."


async def test_wait_without_a_reader_runs_to_the_end(config: AgentRunConfig) -> None:
    agent = Agent(tool_then_answer(), tools=[double])

    handle = agent.start("double two", config)
    await wait(handle.wait())

    assert handle.result().content == "Four."


async def test_a_failed_run_reports_its_error_and_events_still_end(
    config: AgentRunConfig,
) -> None:
    agent = Agent(ScriptedModel([ValueError("provider broke")]))

    handle = agent.start("hi", config)
    events = [event async for event in handle.events()]

    assert event_types(events) == ["RUN_STARTED", "MODEL_STARTED"]
    assert isinstance(handle.error, ValueError)
    with pytest.raises(ValueError, match="provider broke"):
        handle.result()


async def test_leaving_the_context_manager_early_cancels_and_releases_the_session(
    config: AgentRunConfig,
) -> None:
    agent = Agent(tool_then_answer(), tools=[double])

    async with agent.start("double two", config) as handle:
        async for event in handle.events():
            if event.type is ET.MODEL_STARTED:
                break

    assert handle.cancelled
    assert not agent.is_active("session-1")


async def test_steering_the_run_never_took_is_handed_back(config: AgentRunConfig) -> None:
    agent = Agent(tool_then_answer(), tools=[double])
    handle = agent.start("double two", config)
    late = UserMessage("also triple it")

    async for event in handle.events():
        if event.type is ET.TOOL_STARTED:
            assert handle.context.offer_steering(late)
            handle.cancel()

    assert handle.unprocessed_steering == (late,)
    assert "unprocessed_steering" not in handle.context.state.metadata


class Inbox(AgentExtension):
    """Accepts "ping" events and records the config they arrived with."""

    def __init__(self) -> None:
        self.configs: list[Config | None] = []

    def accept(self, config: Config | None, event: ExternalEvent) -> bool:
        self.configs.append(config)
        return event.name == "ping"


async def test_an_external_event_reaches_accept_with_this_runs_config(
    config: AgentRunConfig,
) -> None:
    inbox = Inbox()
    agent = Agent(ScriptedModel(["pong"]), extensions=[inbox])
    handle = agent.start("hi", config)

    assert handle.emit_external_event(ExternalEvent("ping")) == ["Inbox"]
    assert inbox.configs == [handle.config]
    assert handle.config.session_id == "session-1" and handle.config.request_id
    await wait(handle.wait())


async def test_cancelled_before_its_first_step_still_gives_the_session_back(
    config: AgentRunConfig,
) -> None:
    agent = Agent(ScriptedModel(["never"]))

    handle = agent.start("hi", config)
    handle.cancel()
    await wait(handle.wait())

    assert handle.cancelled
    assert not agent.is_active("session-1")
    assert isinstance(handle, RunHandle)


async def test_the_context_is_the_one_hooks_see(config: AgentRunConfig) -> None:
    seen: list[AgentRunContext] = []

    class Spy(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            seen.append(context)

    agent = Agent(ScriptedModel(["ok"]), extensions=[Spy()])
    handle = agent.start("hi", config)
    await wait(handle.wait())

    assert seen == [handle.context]
