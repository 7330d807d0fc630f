"""Backpressure: the run never moves past an event its reader has not finished with."""

from __future__ import annotations

import asyncio

import pytest

from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentRunConfig,
    AssistantMessage,
    RunCancelledEvent,
    tool,
)

from .conftest import Recorder, wait

ET = AgentEventType
# What a cancellation may still do after the reader stopped: close open calls, tell extensions.
CANCELLATION_ENTRIES = {"on_event:tool", "on_event:RunCancelledEvent"}


def make_agent(recorder: Recorder, side_effects: list[int]) -> tuple[Agent, ScriptedModel]:
    @tool
    async def record(n: int) -> int:
        """Record n without ever suspending."""
        side_effects.append(n)
        return n

    model = ScriptedModel(
        [
            AssistantMessage("", tool_calls=(tool_call("record", {"n": 1}, id="r1"),)),
            "All recorded.",
        ]
    )
    return Agent(model, tools=[record], extensions=[recorder]), model


async def test_closing_right_after_model_started_stops_before_the_model_is_called(
    recorder: Recorder, log: list[str], config: AgentRunConfig
) -> None:
    side_effects: list[int] = []
    agent, model = make_agent(recorder, side_effects)

    stream = agent.stream("record one", config=config)
    async for event in stream:
        if event.type is ET.MODEL_STARTED:
            break
    await wait(stream.aclose())  # type: ignore[attr-defined]

    assert model.calls == 0
    assert side_effects == []
    assert "after_run" not in log and "on_success" not in log
    assert [type(e) for e in recorder.events if isinstance(e, RunCancelledEvent)] == [
        RunCancelledEvent
    ]
    assert not agent.is_active("session-1")


async def test_a_suspending_model_is_not_entered_after_the_reader_closed(
    config: AgentRunConfig,
) -> None:
    model = GatedModel(["never said"])
    agent = Agent(model)

    stream = agent.stream("hi", config=config)
    async for event in stream:
        if event.type is ET.MODEL_STARTED:
            break
    await wait(stream.aclose())  # type: ignore[attr-defined]

    assert not model.entered.is_set()


# The run streams 11 events; the last, RUN_COMPLETED, leaves nothing to stop.
@pytest.mark.parametrize("stop_at", range(10))
async def test_closing_at_any_event_runs_nothing_but_the_cancellation(
    stop_at: int, log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    side_effects: list[int] = []
    agent, _ = make_agent(recorder, side_effects)

    stream = agent.stream("record one", config=config)
    seen: list[ET] = []
    async for event in stream:
        seen.append(event.type)
        if len(seen) > stop_at:
            break
    assert ET.RUN_COMPLETED not in seen
    taken_at = len(log)
    effects_at = list(side_effects)
    await wait(stream.aclose())  # type: ignore[attr-defined]

    assert set(log[taken_at:]) <= CANCELLATION_ENTRIES
    assert log[-1] == "on_event:RunCancelledEvent"
    assert side_effects == effects_at


async def test_cancelling_the_reading_task_cancels_the_run_and_propagates(
    recorder: Recorder, log: list[str], config: AgentRunConfig
) -> None:
    model = GatedModel(["Never."])
    agent = Agent(model, extensions=[recorder])
    seen: list[ET] = []

    async def read() -> None:
        async for event in agent.stream("hi", config=config):
            seen.append(event.type)

    reader = asyncio.create_task(read())
    await wait(model.entered.wait())
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(reader)

    assert seen == [ET.RUN_STARTED, ET.MODEL_STARTED]
    assert log[-1] == "on_event:RunCancelledEvent"
    assert "after_model" not in log and "on_error" not in log
    assert not agent.is_active("session-1")


async def test_a_timeout_inside_a_tool_stays_the_tools_failure(config: AgentRunConfig) -> None:
    @tool
    async def impatient() -> str:
        """Give up at once on something that never happens."""
        async with asyncio.timeout(0):
            await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("impatient", id="t1"),)), "Gave up."]
    )
    agent = Agent(model, tools=[impatient])

    events = [event async for event in agent.stream("try", config=config)]

    failed = [e for e in events if e.type is ET.TOOL_FAILED]
    assert len(failed) == 1 and "TimeoutError" in failed[0].message.content  # type: ignore[union-attr]
    assert events[-1].type is ET.RUN_COMPLETED


async def test_an_awaited_future_that_fails_raises_inside_the_run(config: AgentRunConfig) -> None:
    @tool
    async def fragile() -> str:
        """Await a future that fails."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_exception, KeyError("gone"))
        return await future

    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("fragile", id="f1"),)), "Noted."]
    )
    events = [event async for event in Agent(model, tools=[fragile]).stream("go", config=config)]

    (failed,) = [e for e in events if e.type is ET.TOOL_FAILED]
    assert "KeyError" in failed.message.content  # type: ignore[union-attr]
    assert events[-1].type is ET.RUN_COMPLETED
