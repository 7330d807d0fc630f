"""Operator protocols: extensions declare their actions and waits, and the host routes by them.

The end-to-end tests use an extension the host has never heard of, defined here and loaded
the way a project loads its own (ZETT_EXTENSIONS): its wait shows in Run.waiting_for and an
operator's answer, sent through RunManager.control, resumes the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest

from agents.models import ChatSession, OperatorAction, Run, RunEvent
from agents.profiles import catalog
from agents.runtime import AgentEvent, AgentEventType, ExternalEvent, ExternalEventExtension
from agents.runtime.context import AgentRunContext
from agents.runtime.operator import ActionSpec, OperatorProtocol, WaitSpec, operator_protocol

# -- the declarations, as data ----------------------------------------------------------------


def test_an_action_maps_payload_fields_adds_constants_and_who_acted() -> None:
    spec = ActionSpec(
        "deny",
        "review.decision",
        fields={"id": "call_id", "note": "reason"},
        constants={"decision": "deny"},
        by="operator",
    )
    event = spec.event_for({"id": "c1", "note": "too risky", "ignored": 1}, "olga")
    assert event == ExternalEvent(
        "review.decision",
        {"call_id": "c1", "reason": "too risky", "decision": "deny", "operator": "olga"},
    )


def test_an_empty_or_missing_field_becomes_none_and_by_none_records_nobody() -> None:
    spec = ActionSpec("answer", "quiz.answer", fields={"id": "id", "text": "text"}, by=None)
    assert spec.event_for({"id": "q", "text": ""}, "olga").payload == {"id": "q", "text": None}
    assert spec.event_for({}, "olga").payload == {"id": None, "text": None}


def test_a_wait_opens_with_its_fields_and_closes_by_correlation_only() -> None:
    spec = WaitSpec("vote", "poll.opened", frozenset({"poll.closed", "poll.expired"}), ("topic",))
    protocol = OperatorProtocol({}, (spec,))
    waiting: list[dict[str, Any]] = []
    assert protocol.apply_wait(waiting, "poll.opened", {"id": "a", "topic": "Lunch?", "x": 1})
    assert protocol.apply_wait(waiting, "poll.opened", {"id": "b", "topic": "Dinner?"})
    assert waiting == [
        {"kind": "vote", "id": "a", "topic": "Lunch?"},
        {"kind": "vote", "id": "b", "topic": "Dinner?"},
    ]
    assert protocol.apply_wait(waiting, "poll.expired", {"id": "a"})
    assert waiting == [{"kind": "vote", "id": "b", "topic": "Dinner?"}]
    assert not protocol.apply_wait(waiting, "poll.noise", {"id": "b"})
    assert waiting == [{"kind": "vote", "id": "b", "topic": "Dinner?"}]


def test_a_wait_may_name_its_own_correlation_key() -> None:
    spec = WaitSpec("gate", "gate.asked", frozenset({"gate.done"}), correlation="call_id")
    protocol = OperatorProtocol({}, (spec,))
    waiting: list[dict[str, Any]] = []
    protocol.apply_wait(waiting, "gate.asked", {"call_id": "c7", "id": "other"})
    assert waiting == [{"kind": "gate", "id": "c7"}]
    protocol.apply_wait(waiting, "gate.done", {"call_id": "c7"})
    assert waiting == []


def test_the_protocol_of_extensions_collects_every_wait_and_the_first_action_of_a_name() -> None:
    class First:
        operator_actions = (ActionSpec("answer", "first.answer"),)
        operator_waits = (WaitSpec("one", "first.asked", frozenset({"first.done"})),)

    class Second:
        operator_actions = (ActionSpec("answer", "second.answer"), ActionSpec("vote", "v"))
        operator_waits = (WaitSpec("two", "second.asked", frozenset({"second.done"})),)

    class Silent:  # declares nothing: contributes nothing
        pass

    protocol = operator_protocol([First(), Silent(), Second()])
    answer = protocol.action("answer")
    assert answer is not None and answer.event == "first.answer"
    assert protocol.action("vote") is not None
    assert protocol.action("missing") is None
    assert [w.kind for w in protocol.waits] == ["one", "two"]


# -- a third-party extension, end to end ------------------------------------------------------

GATE_OPENED = "gate.opened"
GATE_CLOSED = "gate.closed"
TOPIC = "Which way should I answer?"


class DecisionGate(ExternalEventExtension):
    """Holds every run until an operator picks a direction."""

    catalog_key = "decision_gate"
    event_names: ClassVar[frozenset[str]] = frozenset({"gate.answer"})
    operator_actions: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec("decide", "gate.answer", fields={"id": "id", "choice": "choice"}, by="who"),
    )
    operator_waits: ClassVar[tuple[WaitSpec, ...]] = (
        WaitSpec("direction", GATE_OPENED, frozenset({GATE_CLOSED}), fields=("topic",)),
    )

    def parse_response(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        if payload.get("choice") not in ("left", "right"):
            raise ValueError("choice must be left or right")
        return dict(payload)

    async def before_run(self, context: AgentRunContext) -> None:
        gate_id = f"gate-{context.request_id}"
        self.open_wait(context, gate_id, {"topic": TOPIC})
        await context.emit(
            AgentEvent(
                AgentEventType.CUSTOM, name=GATE_OPENED, data={"id": gate_id, "topic": TOPIC}
            )
        )
        answer = await self.wait_for(context, gate_id, timeout=30)
        await context.emit(
            AgentEvent(
                AgentEventType.CUSTOM,
                name=GATE_CLOSED,
                data={"id": gate_id, "choice": answer["choice"], "who": answer["who"]},
            )
        )


@pytest.fixture
def decision_gate(settings: Any) -> Iterator[str]:
    settings.ZETT_EXTENSIONS = [f"{__name__}.DecisionGate"]
    catalog._configured.cache_clear()
    try:
        yield DecisionGate.catalog_key
    finally:
        catalog._configured.cache_clear()


def _waiting(frame: dict[str, Any]) -> bool:
    return frame["type"] == "run.state" and frame["run"]["status"] == "waiting"


async def _gated_run(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any, key: str
) -> tuple[Any, Any, str, dict[str, Any]]:
    """A session whose run waits at the gate: (session, listener, request id, waiting frame)."""
    profile = await make_profile(extensions=((key, {}),))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, "Hello there")
    assert reply.accepted, reply
    return session, listener, reply.request_id, await listener.until(_waiting)


@pytest.mark.django_db(transaction=True)
async def test_a_third_party_wait_shows_in_waiting_for_and_its_answer_resumes_the_run(
    manager: Any,
    user: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    decision_gate: str,
) -> None:
    session, listener, request_id, waiting = await _gated_run(
        manager, user, make_profile, make_session, listen_session, decision_gate
    )
    gate_id = f"gate-{request_id}"
    entry = {"kind": "direction", "id": gate_id, "topic": TOPIC}
    assert waiting["run"]["waiting_for"] == [entry]
    run = await Run.objects.aget(request_id=request_id)
    assert (run.status, run.waiting_for) == ("waiting", [entry])
    assert (await ChatSession.objects.aget(pk=session.id)).status == "waiting"

    reply = await manager.control(
        session.id, staff_user, "decide", {"id": gate_id, "choice": "left"}
    )
    assert reply.accepted, reply

    finished = await listener.finished(request_id)
    assert finished["run"]["status"] == "completed"
    run = await Run.objects.aget(request_id=request_id)
    assert (run.status, run.waiting_for) == ("completed", [])
    closed = await RunEvent.objects.aget(run=run, type="custom", data__name=GATE_CLOSED)
    assert closed.data["data"] == {"id": gate_id, "choice": "left", "who": "operator"}
    running_again = [
        f for f in listener.of(request_id) if f["type"] == "run.state" and f["seq"] > waiting["seq"]
    ]
    assert running_again and running_again[0]["run"]["status"] == "running"
    recorded = [
        (a.action, a.outcome) async for a in OperatorAction.objects.filter(session_id=session.id)
    ]
    assert recorded == [("decide", "accepted")]


@pytest.mark.django_db(transaction=True)
async def test_a_refused_third_party_answer_changes_nothing_and_says_why(
    manager: Any,
    user: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    decision_gate: str,
) -> None:
    session, listener, request_id, _ = await _gated_run(
        manager, user, make_profile, make_session, listen_session, decision_gate
    )
    gate_id = f"gate-{request_id}"

    malformed = await manager.control(
        session.id, staff_user, "decide", {"id": gate_id, "choice": "up"}
    )
    assert not malformed.accepted and "refused" in malformed.reason
    unknown = await manager.control(
        session.id, staff_user, "decide", {"id": "gate-nope", "choice": "left"}
    )
    assert not unknown.accepted and "No such pending request" in unknown.reason
    undeclared = await manager.control(session.id, staff_user, "vote", {"id": gate_id})
    assert not undeclared.accepted and "Unknown action" in undeclared.reason

    run = await Run.objects.aget(request_id=request_id)
    assert run.status == "waiting" and [w["id"] for w in run.waiting_for] == [gate_id]

    right = await manager.control(
        session.id, staff_user, "decide", {"id": gate_id, "choice": "right"}
    )
    assert right.accepted, right
    assert (await listener.finished(request_id))["run"]["status"] == "completed"
