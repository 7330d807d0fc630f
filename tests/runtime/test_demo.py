"""The offline demo: DemoModel with DemoToolsExtension answers sums, tells time and echoes."""

from __future__ import annotations

import re
import time

import pytest

from agents.extensions.demo_tools import DemoToolsExtension, calculator, evaluate
from agents.providers.demo import DemoModel
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import Agent, AgentEvent, AgentEventType, AssistantMessage, ToolMessage

from .conftest import collect


def demo_agent() -> Agent:
    return Agent(DemoModel(delay=0), extensions=[DemoToolsExtension()])


def tool_events(events: list[AgentEvent]) -> list[tuple[str, str]]:
    return [
        (event.tool_call.name, event.message.content)
        for event in events
        if event.type in (AgentEventType.TOOL_COMPLETED, AgentEventType.TOOL_FAILED)
        and event.tool_call is not None
        and event.message is not None
    ]


async def test_demo_answers_arithmetic_with_the_calculator() -> None:
    events = await collect(demo_agent(), "what is 2*(3+4)?")

    assert tool_events(events) == [("calculator", "14")]
    final = events[-1].message
    assert final is not None and "14" in final.content
    assert final.content == "The result is 14."


async def test_demo_tells_the_time_with_the_clock() -> None:
    events = await collect(demo_agent(), "What time is it?")

    ((name, content),) = tool_events(events)
    assert name == "clock"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", content)
    assert events[-1].message is not None and content in events[-1].message.content


async def test_demo_echoes_plain_text_without_tools() -> None:
    events = await collect(demo_agent(), "hello   there")

    assert tool_events(events) == []
    final = events[-1].message
    assert final is not None and final.content.startswith('You said: "hello there".')
    streamed = "".join(e.delta for e in events if e.type is AgentEventType.TEXT_DELTA)
    assert streamed == final.content


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('echo pwned')",
        "open('/etc/passwd').read()",
        "(1).__class__",
        "[1, 2, 3]",
        "x + 1",
        "'a' * 3",
        "1 if 1 else 2",
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError):
        evaluate(expression)


@pytest.mark.parametrize("expression", ["2**100000", "10 ** -5000", "9^99999"])
def test_calculator_refuses_huge_exponents(expression: str) -> None:
    with pytest.raises(ValueError, match="exponent too large"):
        evaluate(expression)


def test_calculator_refuses_nested_powers_with_a_huge_result() -> None:
    with pytest.raises(ValueError):
        evaluate("(2**999)**999")


def test_calculator_evaluates_ordinary_arithmetic() -> None:
    assert evaluate("2*(3+4)") == 14
    assert evaluate("7 / 2") == 3.5
    assert evaluate("-3 ** 2") == -9
    with pytest.raises(ValueError, match="division by zero"):
        evaluate("1/0")


async def test_refused_expression_reaches_the_model_as_a_failed_tool_result() -> None:
    model = ScriptedModel(
        [
            AssistantMessage(
                "", tool_calls=(tool_call("calculator", {"expression": "__import__('os')"}),)
            ),
            "Sorry.",
        ]
    )
    agent = Agent(model, extensions=[DemoToolsExtension()])

    await agent.run("hack")

    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage)
    assert result.is_error and result.name == calculator.name
    assert "unsupported element in expression" in result.content


async def test_demo_model_asks_the_user_when_told_to() -> None:
    from agents.extensions.ask_user import AskUserExtension
    from agents.providers.demo import DemoModel
    from agents.runtime import Agent, AgentEventType, AgentRunConfig, ExternalEvent

    agent = Agent(DemoModel(delay=0), extensions=[AskUserExtension(timeout_seconds=5)])
    config = AgentRunConfig(session_id="ask")
    answered = None
    async for event in agent.stream("ask: what is your favourite colour?", config=config):
        if event.type is AgentEventType.CUSTOM and event.name == "ask_user.question":
            assert event.data["question"] == "what is your favourite colour?"
            assert agent.emit_external_event(
                ExternalEvent("ask_user.answer", {"id": event.data["id"], "answer": "green"}),
                config=config,
            )
        if event.type is AgentEventType.RUN_COMPLETED:
            answered = event.message.content
    assert answered == "The ask_user tool returned: green"


async def test_demo_waits_with_the_wait_tool_as_often_as_asked() -> None:
    model = DemoModel(delay=0, reply_words=12)
    agent = Agent(model, extensions=[DemoToolsExtension(("calculator", "clock", "wait"))])

    events = await collect(agent, "wait 0.05 s 3 times")

    assert tool_events(events) == [("wait", "waited 0.05 s")] * 3
    turns = [e.message.content for e in events if e.type is AgentEventType.MODEL_COMPLETED]
    assert len(turns) == 4  # three calls of the tool, then the answer
    assert all(len(turn.split(" ")) == 12 for turn in turns)
    assert turns[0].startswith("Step 1 of 3: let me use the wait tool.")
    assert turns[-1].startswith("Done: I waited 0.05 s 3 times.")


async def test_demo_wait_tool_sleeps_and_is_bounded() -> None:
    from agents.extensions.demo_tools import wait

    started = time.monotonic()
    result = await wait({"seconds": 0.2})
    assert time.monotonic() - started >= 0.2
    assert result.content == "waited 0.2 s" and not result.is_error
    with pytest.raises(ValueError, match="between 0 and 60"):
        await wait({"seconds": 61})


async def test_demo_without_the_wait_tool_does_not_wait() -> None:
    events = await collect(demo_agent(), "wait 2 s 3 times")

    assert tool_events(events) == []
    assert events[-1].message is not None
    assert events[-1].message.content.startswith('You said: "wait 2 s 3 times".')


async def test_demo_first_token_delay_comes_before_every_model_call() -> None:
    model = DemoModel(delay=0, first_token_delay=0.15)
    agent = Agent(model, extensions=[DemoToolsExtension()])
    started = time.monotonic()
    firsts: list[float] = []
    async for event in agent.stream("what is 1+2?"):
        if event.type is AgentEventType.MODEL_STARTED:
            started = time.monotonic()
        elif event.type is AgentEventType.TEXT_DELTA and started:
            firsts.append(time.monotonic() - started)
            started = 0.0

    assert len(firsts) == 2  # the tool-call turn and the answer
    assert all(gap >= 0.15 for gap in firsts)
