"""SteeringExtension on a real Agent: mid-run steering end to end, refusals, tracking cleanup."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agents.extensions.steering import STEER_EVENT, SteeringExtension
from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    InMemoryMessageAccumulator,
    ModelRequest,
    ToolMessage,
    UserMessage,
)
from agents.runtime.request import SKIPPED_TOOL_CONTENT

from .conftest import SAFETY_NET, ProbeTool

ACCEPTED = ["SteeringExtension"]
_ET = AgentEventType


def steer(agent: Agent, config: AgentRunConfig | None, text: Any = "Stop, do X instead.", **extra):
    event = ExternalEvent(STEER_EVENT, {"text": text, **extra})
    return agent.emit_external_event(event, config=config)


def three_calls() -> AssistantMessage:
    return AssistantMessage(
        "Working.",
        tool_calls=[
            tool_call("work", {"target": target}, id=f"call-{number}")
            for number, target in enumerate(("one", "two", "three"), 1)
        ],
    )


def quote_last_user(request: ModelRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return f"Now doing: {last.content}"


@pytest.fixture
def work() -> ProbeTool:
    return ProbeTool("work", blocking=True)


async def test_steering_mid_run_skips_the_remaining_calls_and_reaches_the_next_model_call(
    start_run, session, work
):
    memory = InMemoryMessageAccumulator()
    steering = SteeringExtension()
    model = ScriptedModel([three_calls(), quote_last_user])
    agent = Agent(model, tools=[work.tool], extensions=[memory, steering])

    run = start_run(agent, config=session)
    await asyncio.wait_for(work.started.wait(), SAFETY_NET)
    assert steering.active_sessions() == {session.session_id}
    assert steer(agent, session, "Only do the first one.", by="olga") == ACCEPTED
    work.release.set()
    final = await run.result()

    assert work.targets == ["one"]
    assert final.content == "Now doing: Only do the first one."
    milestones = (_ET.TOOL_COMPLETED, _ET.TOOL_SKIPPED, _ET.STEERING_STARTED, _ET.MODEL_STARTED)
    first_result = run.events.index(run.of_type(_ET.TOOL_COMPLETED)[0])
    after_first_call = [
        (event.type, event.tool_call.id if event.tool_call else None)
        for event in run.events[first_result:]
        if event.type in milestones
    ]
    assert after_first_call == [
        (_ET.TOOL_COMPLETED, "call-1"),
        (_ET.TOOL_SKIPPED, "call-2"),
        (_ET.TOOL_SKIPPED, "call-3"),
        (_ET.STEERING_STARTED, None),
        (_ET.MODEL_STARTED, None),
    ]
    steered = run.of_type(_ET.STEERING_STARTED)[0].message
    assert isinstance(steered, UserMessage)
    assert steered.content == "Only do the first one."
    assert steered.attributes == {"steering": True, "by": "olga"}

    tail = model.requests[1].messages[-5:]
    assert [type(m).__name__ for m in tail] == [
        "AssistantMessage",
        "ToolMessage",
        "ToolMessage",
        "ToolMessage",
        "UserMessage",
    ]
    ran, *skipped = (m for m in tail if isinstance(m, ToolMessage))
    assert (ran.tool_call_id, ran.content, ran.skipped) == ("call-1", "work ran on one", False)
    assert [(m.tool_call_id, m.content, m.skipped) for m in skipped] == [
        ("call-2", SKIPPED_TOOL_CONTENT, True),
        ("call-3", SKIPPED_TOOL_CONTENT, True),
    ]
    assert tail[-1].id == steered.id
    assert any(m.id == steered.id for m in memory.messages(session.session_id))
    assert steering.active_sessions() == frozenset()


async def test_steering_from_another_thread_joins_the_run(start_run, session, work):
    model = ScriptedModel([three_calls(), quote_last_user])
    agent = Agent(model, tools=[work.tool], extensions=[SteeringExtension()])
    run = start_run(agent, config=session)
    await asyncio.wait_for(work.started.wait(), SAFETY_NET)

    outcome: list[list[str]] = []
    thread = threading.Thread(target=lambda: outcome.append(steer(agent, session, "Switch.")))
    thread.start()
    await asyncio.to_thread(thread.join, SAFETY_NET)
    work.release.set()

    assert outcome == [ACCEPTED]
    assert (await run.result()).content == "Now doing: Switch."
    assert work.targets == ["one"]


async def test_steering_during_the_final_answer_starts_another_turn(start_run, session):
    model = GatedModel(["Here is the plan.", quote_last_user])
    agent = Agent(model, extensions=[SteeringExtension()])
    run = start_run(agent, config=session)
    await asyncio.wait_for(model.entered.wait(), SAFETY_NET)

    assert steer(agent, session, "Make it shorter.") == ACCEPTED
    model.gate.set()
    final = await run.result()

    assert model.calls == 2
    assert final.content == "Now doing: Make it shorter."
    assert len(run.of_type(_ET.STEERING_STARTED)) == 1


async def test_steering_with_no_active_run_is_not_taken(session):
    model = ScriptedModel(["Done."])
    steering = SteeringExtension()
    agent = Agent(model, extensions=[steering])

    assert steer(agent, session) == []  # before any run
    await asyncio.wait_for(agent.run("Hi.", config=session), SAFETY_NET)
    assert steer(agent, session) == []  # after it finished
    assert steering.active_sessions() == frozenset()
    assert model.calls == 1


class SteerAfterFinalTurn(AgentExtension):
    """Tries to steer from after_run, when the final turn has ended but the run is active."""

    priority = 50  # before SteeringExtension forgets the request

    def __init__(self, agent_box: list[Agent]) -> None:
        self.agent_box = agent_box
        self.outcome: list[str] | None = None

    async def after_run(self, context: AgentRunContext, result: AssistantMessage) -> None:
        self.outcome = steer(self.agent_box[0], context.config, "Too late?")


async def test_steering_after_the_final_turn_is_refused(session):
    box: list[Agent] = []
    late = SteerAfterFinalTurn(box)
    model = ScriptedModel(["The answer."])
    agent = Agent(model, extensions=[late, SteeringExtension()])
    box.append(agent)

    final = await asyncio.wait_for(agent.run("Hi.", config=session), SAFETY_NET)

    assert late.outcome == []
    assert final.content == "The answer."
    assert model.calls == 1


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"text": ""}, id="empty"),
        pytest.param({"text": "  \n "}, id="blank"),
        pytest.param({"text": "x" * 10_001}, id="too-long"),
        pytest.param({"text": 5}, id="not-a-string"),
        pytest.param({}, id="no-text"),
        pytest.param({"text": "Go left.", "by": 3}, id="by-not-a-string"),
        pytest.param({"text": "Go left.", "priority": "high"}, id="unknown-key"),
    ],
)
async def test_malformed_steering_is_refused_and_queues_nothing(start_run, session, work, payload):
    model = ScriptedModel([three_calls(), "Done all three."])
    agent = Agent(model, tools=[work.tool], extensions=[SteeringExtension()])
    run = start_run(agent, config=session)
    await asyncio.wait_for(work.started.wait(), SAFETY_NET)

    refused = agent.emit_external_event(ExternalEvent(STEER_EVENT, payload), config=session)
    context = agent.active_context(session.session_id)
    assert context is not None
    assert not context.steering_pending
    work.release.set()

    assert refused == []
    assert (await run.result()).content == "Done all three."
    assert work.targets == ["one", "two", "three"]
    assert run.of_type(_ET.STEERING_STARTED) == []


async def test_steering_for_another_request_or_session_is_refused(start_run, session, work):
    model = ScriptedModel([three_calls(), "Done all three."])
    steering = SteeringExtension()
    agent = Agent(model, tools=[work.tool], extensions=[steering])
    run = start_run(agent, config=session)
    await asyncio.wait_for(work.started.wait(), SAFETY_NET)

    other_request = AgentRunConfig(session_id=session.session_id, request_id="request-a0")
    other_session = AgentRunConfig(session_id="session-b")
    # The extension itself refuses an event addressed to no request.
    unaddressed = steering.accept(None, ExternalEvent(STEER_EVENT, {"text": "Stop."}))
    refusals = [steer(agent, other_request), steer(agent, other_session), unaddressed]
    wrong_name = agent.emit_external_event(
        ExternalEvent("steering", {"text": "Go left."}), config=session
    )
    work.release.set()

    assert refusals == [[], [], False]
    assert wrong_name == []
    await run.result()
    assert work.targets == ["one", "two", "three"]


async def test_cancelled_and_failed_runs_stop_being_steerable(start_run, session, work):
    steering = SteeringExtension()
    agent = Agent(ScriptedModel([three_calls()]), tools=[work.tool], extensions=[steering])

    run = start_run(agent, config=session)
    await asyncio.wait_for(work.started.wait(), SAFETY_NET)
    assert steering.active_sessions() == {session.session_id}
    run.task.cancel()
    await asyncio.wait({run.task}, timeout=SAFETY_NET)
    assert run.task.cancelled()
    assert steering.active_sessions() == frozenset()
    assert steer(agent, session) == []

    # The same extension instance serving another Agent whose model fails mid-run.
    failing_agent = Agent(ScriptedModel([RuntimeError("provider down")]), extensions=[steering])
    with pytest.raises(RuntimeError, match="provider down"):
        await asyncio.wait_for(failing_agent.run("Again.", config=session), SAFETY_NET)
    assert steering.active_sessions() == frozenset()
    assert steer(failing_agent, session) == []
