"""AskUserExtension on a real Agent: the question round trip, timeouts, routing, refusals."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.extensions.approval import APPROVAL_REQUESTED, ToolApprovalExtension
from agents.extensions.ask_user import (
    ASK_USER_ANSWER,
    ASK_USER_ANSWERED,
    ASK_USER_EXPIRED,
    ASK_USER_QUESTION,
    AskUserExtension,
)
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    InMemoryMessageAccumulator,
    ModelRequest,
    ToolMessage,
)
from agents.runtime.request import CANCELLED_TOOL_CONTENT

from .conftest import SAFETY_NET

ACCEPTED = ["AskUserExtension"]


def ask(question: Any = "Which city should I book?", **arguments: Any) -> AssistantMessage:
    return AssistantMessage(
        tool_calls=[tool_call("ask_user", {"question": question, **arguments}, id="call-q")]
    )


def answer(agent: Agent, config: AgentRunConfig | None, question_id: Any, text: Any, **extra: Any):
    payload = {"id": question_id, "answer": text, **extra}
    return agent.emit_external_event(ExternalEvent(ASK_USER_ANSWER, payload), config=config)


def echo_tool_result(request: ModelRequest) -> str:
    """A final answer quoting the tool result the model was given."""
    last = request.messages[-1]
    assert isinstance(last, ToolMessage)
    return f"You said: {last.content}"


async def test_question_round_trip_returns_the_answer_as_the_tool_result(start_run, session):
    model = ScriptedModel([ask(choices=["Paris", "Rome"]), echo_tool_result])
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[InMemoryMessageAccumulator(), ask_user])

    run = start_run(agent, config=session)
    question = await run.until_custom(ASK_USER_QUESTION)

    offered = {definition.name: definition for definition in model.requests[0].tools}
    assert set(offered["ask_user"].parameters["properties"]) == {"question", "choices"}
    question_id = question.data["id"]
    assert question_id != "call-q"  # a fresh id, not the provider's call id
    assert question.data["question"] == "Which city should I book?"
    assert question.data["choices"] == ["Paris", "Rome"]
    assert question.data["tool_call_id"] == "call-q"
    assert question.data["timeout_seconds"] == 600
    waiting = ask_user.pending_waits(session.session_id)
    assert [(w["id"], w["request_id"], w["question"], w["choices"]) for w in waiting] == [
        (question_id, "request-a1", "Which city should I book?", ["Paris", "Rome"])
    ]

    assert answer(agent, session, question_id, "Rome, please", by="alice") == ACCEPTED
    final = await run.result()

    assert final.content == "You said: Rome, please"
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage)
    assert (result.tool_call_id, result.name, result.content) == (
        "call-q",
        "ask_user",
        "Rome, please",
    )
    assert not result.is_error
    assert run.custom(ASK_USER_ANSWERED) == [
        {"id": question_id, "answer": "Rome, please", "by": "alice"}
    ]
    assert ask_user.pending_waits(session.session_id) == []


async def test_unanswered_question_fails_the_tool_after_the_timeout(start_run, session):
    model = ScriptedModel([ask(), echo_tool_result])
    ask_user = AskUserExtension(timeout_seconds=0.05)
    agent = Agent(model, extensions=[ask_user])

    run = start_run(agent, config=session)
    final = await run.result()

    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage)
    assert result.is_error
    assert result.content == "No answer within 0.05 s"
    assert final.content == "You said: No answer within 0.05 s"
    question_id = run.custom(ASK_USER_QUESTION)[0]["id"]
    assert run.custom(ASK_USER_EXPIRED) == [{"id": question_id, "timeout_seconds": 0.05}]
    assert run.custom(ASK_USER_ANSWERED) == []
    assert ask_user.pending_waits(session.session_id) == []
    assert answer(agent, session, question_id, "too late") == []


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"question": ""}, id="empty"),
        pytest.param({"question": "   "}, id="blank"),
        pytest.param({"question": "x" * 2001}, id="too-long"),
        pytest.param({"question": 7}, id="not-a-string"),
        pytest.param({"question": "Ok?", "choices": [""]}, id="empty-choice"),
        pytest.param({"question": "Ok?", "choices": "yes"}, id="choices-not-a-list"),
        pytest.param({"question": "Ok?", "urgent": True}, id="unknown-argument"),
    ],
)
async def test_invalid_question_is_a_failed_result_and_nobody_is_asked(
    start_run, session, arguments
):
    call = AssistantMessage(tool_calls=[tool_call("ask_user", arguments, id="call-q")])
    model = ScriptedModel([call, echo_tool_result])
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[ask_user])

    run = start_run(agent, config=session)
    await run.result()

    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage)
    assert result.is_error
    assert "invalid arguments for ask_user" in result.content
    assert run.custom(ASK_USER_QUESTION) == []
    assert ask_user.pending_waits(session.session_id) == []


async def test_concurrent_sessions_get_their_own_answers(start_run):
    model = ScriptedModel(
        [ask("Question for A?"), ask("Question for B?"), echo_tool_result, echo_tool_result]
    )
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[InMemoryMessageAccumulator(), ask_user])
    session_a = AgentRunConfig(session_id="session-a")
    session_b = AgentRunConfig(session_id="session-b")

    run_a = start_run(agent, config=session_a)
    id_a = (await run_a.until_custom(ASK_USER_QUESTION)).data["id"]
    run_b = start_run(agent, config=session_b)
    id_b = (await run_b.until_custom(ASK_USER_QUESTION)).data["id"]

    assert [w["question"] for w in ask_user.pending_waits("session-a")] == ["Question for A?"]
    assert [w["question"] for w in ask_user.pending_waits("session-b")] == ["Question for B?"]
    assert answer(agent, session_b, id_a, "B answering A's question") == []
    assert answer(agent, session_b, id_b, "answer from B") == ACCEPTED
    assert (await run_b.result()).content == "You said: answer from B"
    assert not run_a.task.done()
    assert answer(agent, session_a, id_a, "answer from A") == ACCEPTED
    assert (await run_a.result()).content == "You said: answer from A"


async def test_refused_answers_return_nothing_and_change_nothing(start_run, session):
    model = ScriptedModel([ask(), echo_tool_result])
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[ask_user])
    run = start_run(agent, config=session)
    question_id = (await run.until_custom(ASK_USER_QUESTION)).data["id"]
    before = ask_user.pending_waits(session.session_id)
    wrong_request = AgentRunConfig(session_id=session.session_id, request_id="request-a0")

    refusals = {
        "too-long": answer(agent, session, question_id, "x" * 10_001),
        "empty": answer(agent, session, question_id, ""),
        "not-a-string": answer(agent, session, question_id, ["Rome"]),
        "unknown-key": answer(agent, session, question_id, "Rome", urgent=True),
        "forged-id": answer(agent, session, "question-999", "Rome"),
        "tool-call-id": answer(agent, session, "call-q", "Rome"),
        "wrong-request-id": answer(agent, wrong_request, question_id, "Rome"),
        # The extension itself refuses an event addressed to no request.
        "no-config": ask_user.accept(
            None, ExternalEvent(ASK_USER_ANSWER, {"id": question_id, "answer": "Rome"})
        ),
        "no-id": agent.emit_external_event(
            ExternalEvent(ASK_USER_ANSWER, {"answer": "Rome"}), config=session
        ),
    }

    assert {name: accepted for name, accepted in refusals.items() if accepted} == {}
    assert ask_user.pending_waits(session.session_id) == before
    assert not run.task.done()
    assert answer(agent, session, question_id, "Rome") == ACCEPTED
    assert answer(agent, session, question_id, "Paris") == []  # duplicate
    assert (await run.result()).content == "You said: Rome"


async def test_cancel_while_asking_leaves_no_question_open(start_run, session):
    memory = InMemoryMessageAccumulator()
    model = ScriptedModel([ask(), "Never reached."])
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[memory, ask_user])
    run = start_run(agent, config=session)
    question_id = (await run.until_custom(ASK_USER_QUESTION)).data["id"]

    run.task.cancel()
    await asyncio.wait({run.task}, timeout=SAFETY_NET)

    assert run.task.cancelled()
    assert ask_user.pending_waits(session.session_id) == []
    assert answer(agent, session, question_id, "Rome") == []
    result = memory.messages(session.session_id)[-1]
    assert isinstance(result, ToolMessage)
    assert (result.tool_call_id, result.content) == ("call-q", CANCELLED_TOOL_CONTENT)


async def test_asking_the_user_needs_no_approval_by_default(start_run, session):
    model = ScriptedModel([ask(), echo_tool_result])
    ask_user = AskUserExtension()
    agent = Agent(model, extensions=[ToolApprovalExtension(), ask_user])
    run = start_run(agent, config=session)
    question_id = (await run.until_custom(ASK_USER_QUESTION)).data["id"]

    assert answer(agent, session, question_id, "Rome") == ACCEPTED
    assert (await run.result()).content == "You said: Rome"
    assert run.custom(APPROVAL_REQUESTED) == []
