"""The order of one request: hook calls, outward events, barriers, priorities, names, pending."""

from __future__ import annotations

import asyncio

import pytest

from agents.providers.scripted import GatedModel, ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
)

from .conftest import Recorder, add, collect, wait

SETUP = ["on_tool", "on_state", "on_message", "on_event:system", "on_event:user", "before_run"]
MODEL_TURN = [
    "before_turn",
    "before_model",
    "on_model_request",
    "on_event:assistant",
    "after_model",
]
TOOL_CALL = ["before_tool", "on_tool_call", "after_tool", "on_event:tool"]
SUCCESS = ["after_run", "on_success"]


async def test_plain_answer_runs_hooks_and_events_in_order(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    agent = Agent(ScriptedModel(["Hello."]), extensions=[recorder])

    events = await collect(agent, "hi", config)

    assert log == [*SETUP, *MODEL_TURN, "after_turn", *SUCCESS]
    assert [event.type.name for event in events] == [
        "RUN_STARTED",
        "MODEL_STARTED",
        "TEXT_DELTA",
        "MODEL_COMPLETED",
        "RUN_COMPLETED",
    ]
    assert events[-1].message is not None and events[-1].message.content == "Hello."


async def test_tool_calling_turn_then_answer_runs_hooks_and_events_in_order(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 2, "b": 3}, id="c1"),)), "Five."]
    )
    agent = Agent(model, tools=[add], extensions=[recorder])

    events = await collect(agent, "2+3?", config)

    assert log == [
        *SETUP,
        *MODEL_TURN,
        *TOOL_CALL,
        "after_turn",
        *MODEL_TURN,
        "after_turn",
        *SUCCESS,
    ]
    assert [event.type.name for event in events] == [
        "RUN_STARTED",
        "MODEL_STARTED",
        "TOOL_CALL_DELTA",
        "MODEL_COMPLETED",
        "TOOL_STARTED",
        "TOOL_COMPLETED",
        "MODEL_STARTED",
        "TEXT_DELTA",
        "MODEL_COMPLETED",
        "RUN_COMPLETED",
    ]
    completed = events[5]
    assert completed.tool_call is not None and completed.tool_call.id == "c1"
    assert completed.message is not None and completed.message.content == "5"


async def test_two_tool_calls_in_one_turn_run_one_after_the_other(
    log: list[str], recorder: Recorder, config: AgentRunConfig
) -> None:
    calls = (
        tool_call("add", {"a": 1, "b": 1}, id="c1"),
        tool_call("add", {"a": 2, "b": 2}, id="c2"),
    )
    agent = Agent(
        ScriptedModel([AssistantMessage("", tool_calls=calls), "Done."]),
        tools=[add],
        extensions=[recorder],
    )

    events = await collect(agent, "sums", config)

    assert log == [
        *SETUP,
        *MODEL_TURN,
        *TOOL_CALL,
        *TOOL_CALL,
        "after_turn",
        *MODEL_TURN,
        "after_turn",
        *SUCCESS,
    ]
    assert [event.type.name for event in events] == [
        "RUN_STARTED",
        "MODEL_STARTED",
        "TOOL_CALL_DELTA",
        "TOOL_CALL_DELTA",
        "MODEL_COMPLETED",
        "TOOL_STARTED",
        "TOOL_COMPLETED",
        "TOOL_STARTED",
        "TOOL_COMPLETED",
        "MODEL_STARTED",
        "TEXT_DELTA",
        "MODEL_COMPLETED",
        "RUN_COMPLETED",
    ]
    assert [e.message.content for e in events if e.type.name == "TOOL_COMPLETED"] == ["2", "4"]


async def test_after_turn_receives_each_turns_opening_message_including_the_final_answer(
    config: AgentRunConfig,
) -> None:
    opened: list[AssistantMessage] = []

    class TurnWatcher(AgentExtension):
        async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
            opened.append(result)

    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 2}),)), "Three."]
    )
    agent = Agent(model, tools=[add], extensions=[TurnWatcher()])

    answer = await agent.run("1+2", config=config)

    assert len(opened) == 2
    assert opened[0].tool_calls and opened[0].tool_calls[0].name == "add"
    assert opened[1] is answer


async def test_events_are_stamped_with_session_request_and_consecutive_seq() -> None:
    agent = Agent(ScriptedModel(["One two three."]), extensions=[])
    config = AgentRunConfig(session_id="s-stamp", request_id="r-stamp")

    events = await collect(agent, "hi", config)

    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert {event.session_id for event in events} == {"s-stamp"}
    assert {event.request_id for event in events} == {"r-stamp"}
    assert events[0].phase.name == "LOADING_CONTEXT"
    assert events[1].phase.name == "GENERATING"
    assert events[-1].phase.name == "COMPLETED"


async def test_setup_groups_are_barriers_on_tool_then_on_state_then_on_message(
    config: AgentRunConfig,
) -> None:
    log: list[str] = []
    entered = asyncio.Event()
    release = asyncio.Event()

    class Fast(Recorder):
        priority = 10

    class SlowTools(Recorder):
        priority = 20

        async def on_tool(self, context: AgentRunContext) -> None:
            self._record("on_tool:entered")
            entered.set()
            await release.wait()
            self._record("on_tool:done")

    fast, slow = Fast(log, prefix=True), SlowTools(log, prefix=True)
    agent = Agent(ScriptedModel(["Ok."]), extensions=[slow, fast])

    run = asyncio.create_task(agent.run("hi", config=config))
    await wait(entered.wait())
    held = list(log)
    release.set()
    await wait(run)

    assert held == ["Fast.on_tool", "SlowTools.on_tool:entered"]
    setup_hooks = ("on_tool", "on_state", "on_message")
    setup = [entry for entry in log if entry.split(".")[1].split(":")[0] in setup_hooks]
    assert setup == [
        "Fast.on_tool",
        "SlowTools.on_tool:entered",
        "SlowTools.on_tool:done",
        "Fast.on_state",
        "SlowTools.on_state",
        "Fast.on_message",
        "SlowTools.on_message",
    ]


async def test_hooks_run_in_ascending_priority_and_registration_order_for_ties(
    config: AgentRunConfig,
) -> None:
    log: list[str] = []

    class Late(Recorder):
        priority = 200

    class Early(Recorder):
        priority = 10

    late = Late(log, prefix=True)
    first = Recorder(log, name="first", prefix=True)
    second = Recorder(log, name="second", prefix=True)
    early = Early(log, prefix=True)
    agent = Agent(ScriptedModel(["Ok."]), extensions=[late, first, second, early])

    await agent.run("hi", config=config)

    assert [extension.name for extension in agent.extensions] == [
        "Early",
        "first",
        "second",
        "Late",
    ]
    assert [entry for entry in log if entry.endswith(".after_run")] == [
        "Early.after_run",
        "first.after_run",
        "second.after_run",
        "Late.after_run",
    ]


def test_extension_name_defaults_to_class_name_and_can_be_overridden() -> None:
    class Plain(AgentExtension):
        pass

    class Named(AgentExtension):
        name = "custom-name"

    assert Plain().name == "Plain"
    assert Named().name == "custom-name"
    renamed = Plain()
    renamed.name = "second-plain"
    assert renamed.name == "second-plain"
    named_instance = Named()
    named_instance.name = "instance-name"
    assert named_instance.name == "instance-name"
    assert Named().name == "custom-name"


def test_agent_rejects_two_extensions_with_one_name() -> None:
    class Plain(AgentExtension):
        pass

    with pytest.raises(ValueError, match="Plain"):
        Agent(ScriptedModel(), extensions=[Plain(), Plain()])
    renamed = Plain()
    renamed.name = "other"
    agent = Agent(ScriptedModel(), extensions=[Plain(), renamed])
    assert [extension.name for extension in agent.extensions] == ["Plain", "other"]


async def test_every_registered_extension_is_pending_during_a_request(
    recorder: Recorder, config: AgentRunConfig
) -> None:
    class Idle(AgentExtension):
        pass

    idle = Idle()
    model = GatedModel(["Ok."])
    agent = Agent(model, extensions=[idle, recorder])
    assert not idle.pending and not recorder.pending and not agent.pending

    run = asyncio.create_task(agent.run("hi", config=config))
    await wait(model.entered.wait())
    during = (idle.pending, recorder.pending, agent.pending, agent.is_active("session-1"))
    model.gate.set()
    await wait(run)

    assert during == (True, True, True, True)
    assert (idle.pending, recorder.pending, agent.pending) == (False, False, False)
    assert not agent.is_active("session-1")


async def test_shared_extension_stays_pending_until_every_agents_request_finished() -> None:
    class Shared(AgentExtension):
        pass

    shared = Shared()
    first_model, second_model = GatedModel(["One."]), GatedModel(["Two."])
    first = Agent(first_model, extensions=[shared])
    second = Agent(second_model, extensions=[shared])

    first_run = asyncio.create_task(first.run("a", config=AgentRunConfig(session_id="a")))
    second_run = asyncio.create_task(second.run("b", config=AgentRunConfig(session_id="b")))
    await wait(first_model.entered.wait())
    await wait(second_model.entered.wait())
    first_model.gate.set()
    await wait(first_run)
    after_first = (shared.pending, first.pending, second.pending)
    second_model.gate.set()
    await wait(second_run)

    assert after_first == (True, False, True)
    assert not shared.pending


async def test_pending_clears_after_a_failed_request(config: AgentRunConfig) -> None:
    class Idle(AgentExtension):
        pass

    idle = Idle()
    agent = Agent(ScriptedModel([RuntimeError("provider down")]), extensions=[idle])

    with pytest.raises(RuntimeError, match="provider down"):
        await agent.run("hi", config=config)

    assert not idle.pending
    assert not agent.pending


async def test_pending_is_tracked_without_touching_the_extensions_attributes() -> None:
    extension = AgentExtension()
    before = dict(vars(extension))
    model = GatedModel(["ok"])
    agent = Agent(model, extensions=[extension])

    run = asyncio.ensure_future(agent.run("hi"))
    await asyncio.wait_for(model.entered.wait(), 5)
    during = (extension.pending, dict(vars(extension)))
    model.gate.set()
    await asyncio.wait_for(run, 5)

    assert during == (True, before)
    assert not extension.pending and vars(extension) == before
