"""ToolApprovalExtension on a real Agent: decisions, timeouts, routing, refusals, cleanup."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pydantic
import pytest

from agents.extensions.approval import (
    APPROVAL_EVENT,
    APPROVAL_REQUESTED,
    APPROVAL_RESOLVED,
    ToolApprovalExtension,
)
from agents.extensions.settings import ToolApprovalSettings
from agents.extensions.steering import STEER_EVENT, SteeringExtension
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExternalEvent,
    InMemoryMessageAccumulator,
    ModelResponse,
    ToolMessage,
    UserMessage,
)
from agents.runtime.request import CANCELLED_TOOL_CONTENT

from .conftest import SAFETY_NET, ProbeTool

ACCEPTED = ["ToolApprovalExtension"]


def deploy_calls(*targets: str) -> AssistantMessage:
    """One model answer calling deploy once per target, with ids call-1, call-2, ..."""
    return AssistantMessage(
        "Deploying.",
        tool_calls=[
            tool_call("deploy", {"target": target}, id=f"call-{number}")
            for number, target in enumerate(targets, 1)
        ],
    )


def decide(
    agent: Agent,
    config: AgentRunConfig | None,
    call_id: Any,
    decision: Any = "approve",
    **extra: Any,
) -> list[str]:
    payload = {"id": call_id, "decision": decision, **extra}
    return agent.emit_external_event(ExternalEvent(APPROVAL_EVENT, payload), config=config)


def tool_message(messages: Any, call_id: str) -> ToolMessage:
    found = [m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id]
    assert len(found) == 1, f"expected one result for {call_id}, got {found}"
    return found[0]


def pending_ids(approval: ToolApprovalExtension, session_id: str) -> list[str]:
    return sorted(wait["id"] for wait in approval.pending_waits(session_id))


@pytest.fixture
def deploy() -> ProbeTool:
    return ProbeTool("deploy")


@pytest.fixture
def memory() -> InMemoryMessageAccumulator:
    return InMemoryMessageAccumulator()


async def test_approved_call_runs_and_the_answer_follows(start_run, session, deploy, memory):
    model = ScriptedModel([deploy_calls("prod"), "Deployed to prod."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])

    run = start_run(agent, config=session)
    requested = await run.until_custom(APPROVAL_REQUESTED)

    assert requested.data["id"] == "call-1"
    assert requested.data["tool"] == "deploy"
    assert requested.data["arguments"] == {"target": "prod"}
    assert requested.data["timeout_seconds"] == 300
    assert requested.data["deadline"] > requested.data["timeout_seconds"]  # epoch seconds
    waiting = approval.pending_waits(session.session_id)
    assert [(w["id"], w["request_id"], w["tool"]) for w in waiting] == [
        ("call-1", "request-a1", "deploy")
    ]
    assert deploy.targets == []

    assert decide(agent, session, "call-1", by="operator-olga") == ACCEPTED
    final = await run.result()

    assert final.content == "Deployed to prod."
    assert deploy.targets == ["prod"]
    result = tool_message(model.requests[1].messages, "call-1")
    assert result.content == "deploy ran on prod"
    assert not result.is_error
    assert result.attributes["approval"] == "approved"
    assert result.attributes["by"] == "operator-olga"
    assert run.custom(APPROVAL_RESOLVED) == [
        {"id": "call-1", "decision": "approved", "reason": None, "by": "operator-olga"}
    ]
    assert approval.pending_waits(session.session_id) == []


@pytest.mark.parametrize(
    ("reason", "shown"),
    [("prod is frozen this week", "prod is frozen this week"), (None, "no reason given")],
)
async def test_denied_call_never_runs_and_the_model_reads_why(
    start_run, session, deploy, memory, reason, shown
):
    model = ScriptedModel([deploy_calls("prod"), "Understood, not deploying."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])

    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED, id="call-1")
    extra = {"reason": reason} if reason is not None else {}
    assert decide(agent, session, "call-1", "deny", by="olga", **extra) == ACCEPTED
    await run.result()

    assert deploy.targets == []
    result = tool_message(model.requests[1].messages, "call-1")
    assert result.is_error
    assert result.content == f"Denied by the operator: {shown}"
    assert result.attributes == {"approval": "denied", "reason": reason, "by": "olga"}
    assert run.of_type(AgentEventType.TOOL_FAILED)[0].message is not None
    assert run.custom(APPROVAL_RESOLVED) == [
        {"id": "call-1", "decision": "denied", "reason": reason, "by": "olga"}
    ]


async def test_unanswered_call_times_out_and_is_recorded_as_a_timeout_not_a_denial(
    start_run, session, deploy, memory
):
    model = ScriptedModel([deploy_calls("prod"), "Nobody answered."])
    approval = ToolApprovalExtension(timeout_seconds=0.05)
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])

    run = start_run(agent, config=session)
    await run.result()

    assert deploy.targets == []
    result = tool_message(model.requests[1].messages, "call-1")
    assert result.is_error
    assert result.content == "Not run: approval timed out after 0.05 s"
    assert result.attributes == {"approval": "timeout"}
    assert "Denied" not in result.content
    assert run.custom(APPROVAL_RESOLVED) == [
        {"id": "call-1", "decision": "timeout", "reason": None, "by": None}
    ]
    assert approval.pending_waits(session.session_id) == []
    assert decide(agent, session, "call-1") == []  # too late: nothing is waiting any more


async def test_parallel_approvals_answered_in_reverse_order_reach_their_own_calls(
    start_run, session, deploy, memory
):
    model = ScriptedModel([deploy_calls("alpha", "beta"), "Done."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])

    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED, id="call-2")
    # Both calls of the turn are asked for before the first one runs.
    assert [(d["id"], d["arguments"]) for d in run.custom(APPROVAL_REQUESTED)] == [
        ("call-1", {"target": "alpha"}),
        ("call-2", {"target": "beta"}),
    ]
    assert pending_ids(approval, session.session_id) == ["call-1", "call-2"]

    assert decide(agent, session, "call-2", by="bob") == ACCEPTED
    assert pending_ids(approval, session.session_id) == ["call-1"]
    assert deploy.targets == []  # call-2 waits its turn behind the undecided call-1
    assert decide(agent, session, "call-1", "deny", reason="alpha is fine as it is") == ACCEPTED
    await run.result()

    assert deploy.targets == ["beta"]
    first, second = (tool_message(model.requests[1].messages, c) for c in ("call-1", "call-2"))
    assert first.content == "Denied by the operator: alpha is fine as it is"
    assert first.is_error
    assert second.content == "deploy ran on beta"
    assert second.attributes["by"] == "bob"
    assert [(d["id"], d["decision"]) for d in run.custom(APPROVAL_RESOLVED)] == [
        ("call-1", "denied"),
        ("call-2", "approved"),
    ]


async def test_decision_from_another_thread_wakes_the_run(start_run, session, deploy, memory):
    model = ScriptedModel([deploy_calls("prod"), "Deployed."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])
    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED)

    outcome: list[tuple[int, list[str]]] = []

    def answer() -> None:
        outcome.append((threading.get_ident(), decide(agent, session, "call-1")))

    thread = threading.Thread(target=answer)
    thread.start()
    await asyncio.to_thread(thread.join, SAFETY_NET)

    assert outcome == [(thread.ident, ACCEPTED)]
    assert thread.ident != threading.get_ident()
    assert (await run.result()).content == "Deployed."
    assert deploy.targets == ["prod"]


REFUSED_PAYLOADS = [
    pytest.param({"id": "call-1", "decision": "maybe"}, id="unknown-decision"),
    pytest.param({"id": "call-1"}, id="no-decision"),
    pytest.param({"decision": "approve"}, id="no-id"),
    pytest.param({"id": 1, "decision": "approve"}, id="id-not-a-string"),
    pytest.param({"id": "", "decision": "approve"}, id="blank-id"),
    pytest.param({"id": "call-1", "decision": "approve", "reason": "x" * 2001}, id="long-reason"),
    pytest.param({"id": "call-1", "decision": "deny", "reason": 42}, id="reason-not-a-string"),
    pytest.param({"id": "call-1", "decision": "approve", "by": ["olga"]}, id="by-not-a-string"),
    pytest.param({"id": "call-1", "decision": "approve", "force": True}, id="unknown-key"),
    pytest.param({"id": "call-999", "decision": "approve"}, id="forged-id"),
]


async def test_refused_answers_return_nothing_and_change_nothing(
    start_run, session, deploy, memory
):
    model = ScriptedModel([deploy_calls("prod"), "Deployed."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])
    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED)
    before = approval.pending_waits(session.session_id)

    refusals: list[tuple[str, list[str]]] = []
    for case in REFUSED_PAYLOADS:
        event = ExternalEvent(APPROVAL_EVENT, case.values[0])
        refusals.append((case.id, agent.emit_external_event(event, config=session)))
    other_session = AgentRunConfig(session_id="session-b")
    refusals.append(("other-session", decide(agent, other_session, "call-1")))
    wrong_request = AgentRunConfig(session_id=session.session_id, request_id="request-a0")
    refusals.append(("wrong-request-id", decide(agent, wrong_request, "call-1")))
    # Without a config the Agent fills in its only active request's; the extension
    # itself still refuses an event that belongs to no request.
    unaddressed = ExternalEvent(APPROVAL_EVENT, {"id": "call-1", "decision": "approve"})
    refusals.append(("no-config", ["taken"] if approval.accept(None, unaddressed) else []))
    wrong_name = ExternalEvent("approval.decision", {"id": "call-1", "decision": "approve"})
    refusals.append(("wrong-event-name", agent.emit_external_event(wrong_name, config=session)))

    assert [name for name, accepted in refusals if accepted] == []
    assert approval.pending_waits(session.session_id) == before
    assert not run.task.done()
    assert deploy.targets == []
    assert run.custom(APPROVAL_RESOLVED) == []

    assert decide(agent, session, "call-1", by="olga") == ACCEPTED
    assert decide(agent, session, "call-1", by="mallory") == []  # duplicate
    assert decide(agent, session, "call-1", "deny", by="mallory") == []  # change of mind
    await run.result()

    assert deploy.targets == ["prod"]
    assert run.custom(APPROVAL_RESOLVED) == [
        {"id": "call-1", "decision": "approved", "reason": None, "by": "olga"}
    ]


async def test_same_call_id_in_two_sessions_is_routed_by_session(start_run, deploy):
    # Both sessions' answers carry the same call id, as a provider may well produce.
    model = ScriptedModel([deploy_calls("from-a"), deploy_calls("from-b"), "Done.", "Done."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[InMemoryMessageAccumulator(), approval])
    session_a = AgentRunConfig(session_id="session-a")
    session_b = AgentRunConfig(session_id="session-b")

    run_a = start_run(agent, config=session_a)
    await run_a.until_custom(APPROVAL_REQUESTED, id="call-1")
    run_b = start_run(agent, config=session_b)
    await run_b.until_custom(APPROVAL_REQUESTED, id="call-1")

    assert decide(agent, session_b, "call-1", "deny", reason="not from b") == ACCEPTED
    await run_b.result()
    assert pending_ids(approval, "session-a") == ["call-1"]  # A's identical id still waits
    assert deploy.targets == []
    assert decide(agent, session_a, "call-1") == ACCEPTED
    await run_a.result()

    assert deploy.targets == ["from-a"]
    assert run_b.tool_messages()[0].content == "Denied by the operator: not from b"
    assert run_a.tool_messages()[0].content == "deploy ran on from-a"


async def test_cancel_while_waiting_records_cancelled_results_and_leaves_no_wait(
    start_run, session, deploy, memory
):
    model = ScriptedModel([deploy_calls("alpha", "beta"), "Never reached."])
    approval = ToolApprovalExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval])
    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED, id="call-2")

    run.task.cancel()
    await asyncio.wait({run.task}, timeout=SAFETY_NET)

    assert run.task.cancelled()
    assert not agent.is_active(session.session_id)
    remembered = memory.messages(session.session_id)
    for call_id in ("call-1", "call-2"):
        result = tool_message(remembered, call_id)
        assert result.is_error
        assert result.content == CANCELLED_TOOL_CONTENT
        assert result.attributes == {"cancelled": True}
    assert approval.pending_waits(session.session_id) == []
    assert decide(agent, session, "call-1") == []
    assert decide(agent, session, "call-2") == []
    assert deploy.targets == []
    assert model.calls == 1


class FailAfterApprovalRequests(AgentExtension):
    """Fails the run right after the approval extension asked, recording what was open."""

    priority = 200  # after ToolApprovalExtension's after_model

    def __init__(self, approval: ToolApprovalExtension) -> None:
        self.approval = approval
        self.open_at_failure: list[str] = []

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        self.open_at_failure = pending_ids(self.approval, context.session_id)
        raise RuntimeError("storage is down")


async def test_failed_run_closes_the_waits_it_opened(session, deploy):
    model = ScriptedModel([deploy_calls("alpha", "beta")])
    approval = ToolApprovalExtension()
    failing = FailAfterApprovalRequests(approval)
    agent = Agent(model, tools=[deploy.tool], extensions=[approval, failing])

    with pytest.raises(RuntimeError, match="storage is down"):
        await asyncio.wait_for(agent.run("Go.", config=session), SAFETY_NET)

    assert failing.open_at_failure == ["call-1", "call-2"]
    assert approval.pending_waits(session.session_id) == []
    assert decide(agent, session, "call-1") == []
    assert deploy.targets == []


async def test_steering_skips_gated_calls_and_withdraws_their_requests(
    start_run, session, deploy, memory
):
    model = ScriptedModel([deploy_calls("alpha", "beta"), "Changed course."])
    approval = ToolApprovalExtension()
    steering = SteeringExtension()
    agent = Agent(model, tools=[deploy.tool], extensions=[memory, approval, steering])
    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED, id="call-2")

    steer = ExternalEvent(STEER_EVENT, {"text": "Only deploy alpha.", "by": "olga"})
    assert agent.emit_external_event(steer, config=session) == ["SteeringExtension"]
    assert decide(agent, session, "call-1") == ACCEPTED
    await run.result()

    assert deploy.targets == ["alpha"]
    assert [(d["id"], d["decision"]) for d in run.custom(APPROVAL_RESOLVED)] == [
        ("call-1", "approved"),
        ("call-2", "skipped"),
    ]
    assert approval.pending_waits(session.session_id) == []
    assert decide(agent, session, "call-2") == []
    skipped = tool_message(model.requests[1].messages, "call-2")
    assert skipped.skipped
    last = model.requests[1].messages[-1]
    assert isinstance(last, UserMessage)
    assert last.content == "Only deploy alpha."


async def test_only_matching_registered_tools_wait_for_approval(start_run, session, memory):
    lookup = ProbeTool("lookup")
    deploy_app = ProbeTool("deploy_app")
    calls = AssistantMessage(
        tool_calls=[
            tool_call("lookup", {"target": "docs"}, id="call-1"),
            tool_call("missing_tool", {"target": "x"}, id="call-2"),
            tool_call("deploy_app", {"target": "prod"}, id="call-3"),
        ]
    )
    model = ScriptedModel([calls, "Done."])
    approval = ToolApprovalExtension(tools=["deploy*", "missing*"])
    agent = Agent(model, tools=[lookup.tool, deploy_app.tool], extensions=[memory, approval])

    run = start_run(agent, config=session)
    await run.until_custom(APPROVAL_REQUESTED)
    await asyncio.wait_for(lookup.started.wait(), SAFETY_NET)

    assert [d["id"] for d in run.custom(APPROVAL_REQUESTED)] == ["call-3"]
    assert lookup.targets == ["docs"]  # ran without asking
    assert decide(agent, session, "call-3") == ACCEPTED
    await run.result()

    assert deploy_app.targets == ["prod"]
    unknown = tool_message(model.requests[1].messages, "call-2")
    assert unknown.is_error
    assert "unknown tool" in unknown.content
    assert "approval" not in unknown.attributes


async def test_default_settings_gate_every_tool_but_ask_user():
    approval = ToolApprovalExtension()

    assert approval.needs_approval("deploy")
    assert approval.needs_approval("calculator")
    assert not approval.needs_approval("ask_user")
    assert approval.settings.timeout_seconds == 300


@pytest.mark.parametrize(
    "fields",
    [{"timeout_seconds": 0}, {"timeout_seconds": -1}, {"tools": [""]}, {"tool": ["x"]}],
)
async def test_invalid_settings_are_refused(fields):
    with pytest.raises(pydantic.ValidationError):
        ToolApprovalSettings(**fields)
    with pytest.raises(pydantic.ValidationError):
        ToolApprovalExtension(**fields)
