"""Cancellation: open tool calls are closed, extensions hear of it, the session stays usable."""

from __future__ import annotations

import asyncio

import pytest

from agents.extensions.memory import InMemoryMessageAccumulator
from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentRunConfig,
    AssistantMessage,
    RunCancelledEvent,
    ToolMessage,
    tool,
)

from .conftest import Recorder, add, wait

NEVER_AFTER_CANCEL = {"on_error", "after_run", "on_success", "after_turn"}


class Blocker:
    """An async tool that signals when it started and then waits until released."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

        @tool
        async def slow_lookup(key: str) -> str:
            """Look something up slowly."""
            self.started.set()
            await self.release.wait()
            return f"value of {key}"

        self.tool = slow_lookup


def three_call_turn(answer: str = "Done.") -> ScriptedModel:
    """One turn of three calls (the second blocks), then `answer` for the next model call."""
    calls = (
        tool_call("add", {"a": 1, "b": 1}, id="c1"),
        tool_call("slow_lookup", {"key": "k"}, id="c2"),
        tool_call("add", {"a": 2, "b": 2}, id="c3"),
    )
    return ScriptedModel([AssistantMessage("", tool_calls=calls), answer])


def tool_results(memory: InMemoryMessageAccumulator, session_id: str) -> list[ToolMessage]:
    return [m for m in memory.messages(session_id) if isinstance(m, ToolMessage)]


def assert_closed_after_cancel(
    memory: InMemoryMessageAccumulator, recorder: Recorder, log: list[str]
) -> None:
    results = tool_results(memory, "session-1")
    assert [(m.tool_call_id, m.is_error) for m in results] == [
        ("c1", False),
        ("c2", True),
        ("c3", True),
    ]
    assert all("cancel" in m.content.lower() for m in results[1:])
    cancelled = [e for e in recorder.events if isinstance(e, RunCancelledEvent)]
    assert len(cancelled) == 1 and cancelled[0].session_id == "session-1"
    assert NEVER_AFTER_CANCEL.isdisjoint(log)


async def test_cancel_mid_tool_closes_every_open_call_and_propagates(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    blocker = Blocker()
    memory = InMemoryMessageAccumulator()
    agent = Agent(three_call_turn(), tools=[add, blocker.tool], extensions=[memory, recorder])

    run = asyncio.create_task(agent.run("look it up", config=config))
    await wait(blocker.started.wait())
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(run)

    assert_closed_after_cancel(memory, recorder, log)
    assert not agent.is_active("session-1")
    assert not recorder.pending


async def test_closing_the_stream_early_cancels_the_run(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    blocker = Blocker()
    memory = InMemoryMessageAccumulator()
    agent = Agent(three_call_turn(), tools=[add, blocker.tool], extensions=[memory, recorder])

    stream = agent.stream("look it up", config=config)
    seen: list[AgentEventType] = []
    async for event in stream:
        seen.append(event.type)
        if event.type is AgentEventType.TOOL_STARTED and event.tool_call.id == "c2":  # type: ignore[union-attr]
            break
    await wait(stream.aclose())  # type: ignore[attr-defined]

    # The run waited at TOOL_STARTED for the reader, so the tool itself never began.
    assert not blocker.started.is_set()
    assert AgentEventType.RUN_COMPLETED not in seen
    assert_closed_after_cancel(memory, recorder, log)
    assert not agent.is_active("session-1")


async def test_session_is_usable_after_a_cancelled_request(config: AgentRunConfig) -> None:
    blocker = Blocker()
    # The cancelled run never makes its second model call, so the next one is the retry's.
    model = three_call_turn("Fresh answer.")
    memory = InMemoryMessageAccumulator()
    agent = Agent(model, tools=[add, blocker.tool], extensions=[memory])

    run = asyncio.create_task(agent.run("look it up", config=config))
    await wait(blocker.started.wait())
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(run)

    answer = await wait(agent.run("try again", config=config))

    assert answer.content == "Fresh answer."
    history = model.requests[-1].messages
    assert [m.role for m in history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
    ]
    assert history[-1].content == "try again"


async def test_cancel_while_the_model_streams_publishes_run_cancelled(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    model = GatedModel(["Never."])
    agent = Agent(model, extensions=[recorder])

    run = asyncio.create_task(agent.run("hi", config=config))
    await wait(model.entered.wait())
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(run)

    assert log[-1] == "on_event:RunCancelledEvent"
    assert NEVER_AFTER_CANCEL.isdisjoint(log)
    assert "after_model" not in log
