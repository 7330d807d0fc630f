"""Steering at runtime level: a message offered mid-run skips the remaining calls of the turn."""

from __future__ import annotations

import asyncio

from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ToolMessage,
    UserMessage,
    tool,
)

from .conftest import add, wait


async def test_steering_during_a_tool_skips_the_rest_of_the_turn_and_continues(
    config: AgentRunConfig,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow(step: int) -> str:
        started.set()
        await release.wait()
        return f"step {step} done"

    last_in_after_turn: list[str] = []

    class Watch(AgentExtension):
        async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
            last_in_after_turn.append(context.state.messages[-1].content)

    calls = (
        tool_call("slow", {"step": 1}, id="c1"),
        tool_call("add", {"a": 1, "b": 1}, id="c2"),
        tool_call("add", {"a": 2, "b": 2}, id="c3"),
    )
    model = ScriptedModel([AssistantMessage("", tool_calls=calls), "Changing course."])
    agent = Agent(model, tools=[slow, add], extensions=[Watch()])
    steering = UserMessage("Stop, do something else.")

    async def consume() -> list[AgentEvent]:
        return [event async for event in agent.stream("work", config=config)]

    streaming = asyncio.create_task(consume())
    await wait(started.wait())
    context = agent.active_context("session-1")
    assert context is not None
    offered = context.offer_steering(steering)
    release.set()
    events = await wait(streaming)

    assert offered is True
    types = [e.type for e in events if e.type is not AgentEventType.TEXT_DELTA]
    assert [t.name for t in types] == [
        "RUN_STARTED",
        "MODEL_STARTED",
        "TOOL_CALL_DELTA",
        "TOOL_CALL_DELTA",
        "TOOL_CALL_DELTA",
        "MODEL_COMPLETED",
        "TOOL_STARTED",
        "TOOL_COMPLETED",
        "TOOL_SKIPPED",
        "TOOL_SKIPPED",
        "STEERING_STARTED",
        "MODEL_STARTED",
        "MODEL_COMPLETED",
        "RUN_COMPLETED",
    ]
    skipped = [e for e in events if e.type is AgentEventType.TOOL_SKIPPED]
    assert [e.tool_call.id for e in skipped if e.tool_call] == ["c2", "c3"]
    assert all(isinstance(e.message, ToolMessage) and e.message.skipped for e in skipped)
    steered = [e for e in events if e.type is AgentEventType.STEERING_STARTED]
    assert steered[0].message is steering
    second_request = model.requests[1].messages
    assert [m.role for m in second_request[-5:]] == ["assistant", "tool", "tool", "tool", "user"]
    assert second_request[-1] is steering
    assert last_in_after_turn[0] == steering.content
    assert context.offer_steering(UserMessage("too late")) is False


async def test_steering_during_the_final_answer_starts_another_turn(
    config: AgentRunConfig,
) -> None:
    model = GatedModel(["First answer.", "Answer to the steering."])
    agent = Agent(model, extensions=[])

    run = asyncio.create_task(agent.run("hi", config=config))
    await wait(model.entered.wait())
    context = agent.active_context("session-1")
    assert context is not None
    assert context.offer_steering(UserMessage("One more thing.")) is True
    model.gate.set()
    answer = await wait(run)

    assert answer.content == "Answer to the steering."
    assert model.calls == 2
    assert model.requests[1].messages[-1].content == "One more thing."


async def test_offer_after_the_run_finished_is_refused(config: AgentRunConfig) -> None:
    contexts: list[AgentRunContext] = []

    class Keep(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            contexts.append(context)

    model = ScriptedModel(["Done."])
    await Agent(model, extensions=[Keep()]).run("hi", config=config)

    assert contexts[0].offer_steering(UserMessage("late")) is False
    assert model.calls == 1
