"""Operator actions through RunManager.control: approvals, cancellation and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import ChatSession, Message, OperatorAction, Run, RunEvent

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})
APPROVE_CALCULATOR = ("tool_approval", {"tools": ["calculator"]})


async def _rows(session_id: str) -> list[Message]:
    return [m async for m in Message.objects.filter(session_id=session_id).order_by("seq")]


async def _actions(session_id: str) -> list[tuple[str, str, str, str]]:
    return [
        (a.action, a.outcome, a.user.username if a.user else "", a.reason)
        async for a in OperatorAction.objects.filter(session_id=session_id)
        .select_related("user")
        .order_by("created_at", "id")
    ]


def _is_custom(name: str) -> Any:
    return lambda frame: frame["type"] == "run.custom" and frame["name"] == name


async def _waiting_run(
    manager: Any, owner: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> tuple[Any, Any, str, dict[str, Any]]:
    """A session whose run waits for approval of a calculator call: (session, listener, id, req)."""
    profile = await make_profile(extensions=(DEMO_TOOLS, APPROVE_CALCULATOR))
    session = await make_session(owner, profile)
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, owner, "What is 12 * 12?")
    assert reply.accepted, reply
    requested = await listener.until(_is_custom("approval.requested"))
    # The call has started and waits inside the tool step (approval gates on_tool_call).
    await listener.until(lambda f: f["type"] == "run.tool" and f["status"] == "started")
    return session, listener, reply.request_id, requested["data"]


async def test_a_gated_call_waits_with_the_call_listed_then_runs_once_approved(
    manager: Any,
    user: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    session, listener, request_id, requested = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )
    call_id = requested["id"]
    assert (requested["tool"], requested["arguments"]) == ("calculator", {"expression": "12 * 12"})
    run = await Run.objects.aget(request_id=request_id)
    assert run.status == "waiting"
    assert [(w["kind"], w["id"], w["tool"]) for w in run.waiting_for] == [
        ("approval", call_id, "calculator")
    ]
    assert run.waiting_for[0]["arguments"] == {"expression": "12 * 12"}
    assert (await manager.snapshot(session.id)).run["waiting_for"] == run.waiting_for
    assert (await ChatSession.objects.aget(pk=session.id)).status == "waiting"

    reply = await manager.control(session.id, staff_user, "approve", {"id": call_id})

    assert (reply.accepted, reply.action, reply.request_id) == (True, "approve", request_id)
    finished = await listener.finished(request_id)
    assert finished["run"]["status"] == "completed" and finished["run"]["waiting_for"] == []
    resolved = [f for f in listener.frames if _is_custom("approval.resolved")(f)]
    assert [(f["data"]["id"], f["data"]["decision"]) for f in resolved] == [(call_id, "approved")]
    after = [f["run"] for f in listener.frames if f["type"] == "run.state"]
    assert after[-1]["status"] == "running" and after[-1]["waiting_for"] == []
    rows = await _rows(session.id)
    tool = next(m for m in rows if m.role == "tool")
    assert (tool.tool_call_id, tool.content, tool.is_error) == (call_id, "144", False)
    assert tool.attributes["approval"] == "approved"
    assert tool.attributes["by"] == staff_user.username
    assert rows[-1].content == "The result is 144."
    assert await _actions(session.id) == [("approve", "accepted", staff_user.username, "")]
    action = await OperatorAction.objects.aget(session_id=session.id)
    assert action.payload == {"id": call_id}
    assert action.run_id == run.pk


async def test_a_denied_call_does_not_run_and_the_model_reads_the_reason(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, requested = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )

    reply = await manager.control(
        session.id, user, "deny", {"id": requested["id"], "reason": "not today"}
    )

    assert reply.accepted, reply
    await listener.finished(request_id)
    rows = await _rows(session.id)
    tool = next(m for m in rows if m.role == "tool")
    assert tool.is_error and tool.content == "Denied by the operator: not today"
    assert tool.attributes["approval"] == "denied"
    assert rows[-1].content.startswith("The calculator tool reported a problem: Denied")
    assert (await Run.objects.aget(request_id=request_id)).status == "completed"
    action = await OperatorAction.objects.aget(session_id=session.id)
    assert (action.action, action.outcome) == ("deny", "accepted")
    assert action.payload == {"id": requested["id"], "reason": "not today"}


async def test_cancel_while_waiting_moves_cancel_state_to_stopped_and_closes_the_call(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, requested = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )

    reply = await manager.control(session.id, user, "cancel", {})

    assert (reply.accepted, reply.action) == (True, "cancel")
    finished = await listener.finished(request_id)
    states = [f["run"]["cancel_state"] for f in listener.frames if f["type"] == "run.state"]
    changes = [s for i, s in enumerate(states) if s and (i == 0 or states[i - 1] != s)]
    assert changes == ["requested", "acknowledged"]
    assert (finished["run"]["status"], finished["run"]["cancel_state"]) == ("cancelled", "stopped")
    assert finished["run"]["waiting_for"] == [] and finished["run"]["current_tool"] == ""
    run = await Run.objects.aget(request_id=request_id)
    assert (run.status, run.phase, run.cancel_state) == ("cancelled", "cancelled", "stopped")
    assert run.waiting_for == [] and run.finished_at is not None
    # The call is closed everywhere: in the rows, in the frames and in the trace.
    tool = next(m for m in await _rows(session.id) if m.role == "tool")
    assert tool.tool_call_id == requested["id"] and tool.attributes.get("cancelled") is True
    tools = [f for f in listener.frames if f["type"] == "run.tool"]
    assert [(t["status"], t["call"]["id"]) for t in tools] == [
        ("started", requested["id"]),
        ("failed", requested["id"]),
    ]
    assert tools[1]["result"]["id"] == tool.message_id
    assert tools[1]["seq"] < finished["seq"]
    trace = [e.type async for e in RunEvent.objects.filter(run=run).order_by("seq")]
    assert trace[-1] == "tool_failed"
    assert await _actions(session.id) == [("cancel", "accepted", user.username, "Cancelling.")]


async def test_cancel_right_after_submitting_cancels_the_run_before_it_starts_working(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)
    started = await manager.submit_message(session.id, user, "What is 1 + 2?")

    reply = await manager.control(session.id, user, "cancel", {})

    assert reply.accepted, reply
    finished = await listener.finished(started.request_id)
    assert (finished["run"]["status"], finished["run"]["cancel_state"]) == ("cancelled", "stopped")
    run = await Run.objects.aget(request_id=started.request_id)
    assert (run.status, run.cancel_state) == ("cancelled", "stopped")
    # The session is free again.
    again = await manager.submit_message(session.id, user, "What is 2 + 2?")
    await listener.finished(again.request_id)
    assert (await _rows(session.id))[-1].content == "The result is 4."


async def test_a_second_cancel_is_rejected_and_recorded(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, _ = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )

    first = await manager.control(session.id, user, "cancel", {})
    second = await manager.control(session.id, user, "cancel", {})
    await listener.finished(request_id)

    assert first.accepted
    assert not second.accepted and second.reason
    actions = await _actions(session.id)
    assert [(a[0], a[1]) for a in actions] == [("cancel", "accepted"), ("cancel", "rejected")]
    assert actions[1][3] == second.reason


async def test_a_repeated_approval_is_rejected_and_changes_nothing(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, requested = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )
    first = await manager.control(session.id, user, "approve", {"id": requested["id"]})

    again = await manager.control(session.id, user, "deny", {"id": requested["id"]})

    assert first.accepted
    assert not again.accepted and again.reason
    await listener.finished(request_id)
    tools = [m for m in await _rows(session.id) if m.role == "tool"]
    assert [(m.content, m.attributes["approval"]) for m in tools] == [("144", "approved")]
    resolved = [
        f["data"]["decision"] for f in listener.frames if _is_custom("approval.resolved")(f)
    ]
    assert resolved == ["approved"]
    actions = await _actions(session.id)
    assert [(a[0], a[1]) for a in actions] == [("approve", "accepted"), ("deny", "rejected")]
    assert actions[1][3] == again.reason


async def test_a_forged_call_id_is_rejected_and_the_run_keeps_waiting(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, requested = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )

    forged = await manager.control(session.id, user, "approve", {"id": "call_forged"})
    malformed = await manager.control(session.id, user, "approve", {})
    unknown = await manager.control(session.id, user, "launch", {"id": requested["id"]})

    assert not forged.accepted and "No such pending request" in forged.reason
    assert not malformed.accepted and malformed.reason
    assert not unknown.accepted and "Unknown action" in unknown.reason
    run = await Run.objects.aget(request_id=request_id)
    assert run.status == "waiting" and [w["id"] for w in run.waiting_for] == [requested["id"]]
    assert [m.role for m in await _rows(session.id)] == ["user", "assistant"]
    # The real id still works afterwards.
    assert (await manager.control(session.id, user, "approve", {"id": requested["id"]})).accepted
    await listener.finished(request_id)
    actions = await _actions(session.id)
    assert [(a[0], a[1]) for a in actions] == [
        ("approve", "rejected"),
        ("approve", "rejected"),
        ("launch", "rejected"),
        ("approve", "accepted"),
    ]
    assert all(a[3] for a in actions[:3])


async def test_an_answer_for_another_sessions_call_is_rejected_in_both_sessions(
    manager: Any,
    user: Any,
    other_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    mine, my_listener, my_request, _ = await _waiting_run(
        manager, user, make_profile, make_session, listen_session
    )
    theirs, their_listener, their_request, their_call = await _waiting_run(
        manager, other_user, make_profile, make_session, listen_session
    )

    crossed = await manager.control(mine.id, user, "approve", {"id": their_call["id"]})

    assert not crossed.accepted and crossed.reason
    assert crossed.request_id == my_request
    their_run = await Run.objects.aget(request_id=their_request)
    assert their_run.status == "waiting" and their_run.waiting_for[0]["id"] == their_call["id"]
    assert (await Run.objects.aget(request_id=my_request)).status == "waiting"
    assert not any(_is_custom("approval.resolved")(f) for f in their_listener.frames)
    assert await _actions(theirs.id) == []
    assert [(a[0], a[1]) for a in await _actions(mine.id)] == [("approve", "rejected")]
    await manager.control(theirs.id, other_user, "approve", {"id": their_call["id"]})
    await their_listener.finished(their_request)
    assert my_request in {h.request_id for h in manager.hosted.values()}


async def test_an_action_without_an_active_run_is_rejected_with_a_reason(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile(extensions=(DEMO_TOOLS,)))

    replies = [
        await manager.control(session.id, user, action, payload)
        for action, payload in (
            ("cancel", {}),
            ("approve", {"id": "call_x"}),
            ("answer", {"id": "q1", "answer": "yes"}),
            ("steer", {"text": "go left"}),
        )
    ]

    assert all(not r.accepted for r in replies)
    assert {r.reason for r in replies} == {"No run is active in this session."}
    assert all(r.request_id is None for r in replies)
    assert await Run.objects.filter(session=session).acount() == 0
    actions = await _actions(session.id)
    assert [(a[0], a[1], a[2]) for a in actions] == [
        ("cancel", "rejected", user.username),
        ("approve", "rejected", user.username),
        ("answer", "rejected", user.username),
        ("steer", "rejected", user.username),
    ]
    stored = [a async for a in OperatorAction.objects.filter(session=session).order_by("id")]
    assert stored[3].payload == {"text": "go left"} and stored[3].run_id is None


async def test_a_question_waits_for_the_answer_which_resumes_the_run(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS, ("ask_user", {})))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)
    started = await manager.submit_message(session.id, user, "ask: which colour?")
    asked = (await listener.until(_is_custom("ask_user.question")))["data"]
    await listener.until(lambda f: f["type"] == "run.state" and f["run"]["status"] == "waiting")
    run = await Run.objects.aget(request_id=started.request_id)
    assert run.status == "waiting"
    assert [(w["kind"], w["id"], w["question"]) for w in run.waiting_for] == [
        ("question", asked["id"], "which colour?")
    ]

    forged = await manager.control(session.id, user, "answer", {"id": "q-forged", "answer": "red"})
    reply = await manager.control(session.id, user, "answer", {"id": asked["id"], "answer": "blue"})
    again = await manager.control(
        session.id, user, "answer", {"id": asked["id"], "answer": "green"}
    )

    assert not forged.accepted and "No such pending request" in forged.reason
    assert reply.accepted, reply
    assert not again.accepted and again.reason
    await listener.finished(started.request_id)
    answered = [f["data"] for f in listener.frames if _is_custom("ask_user.answered")(f)]
    assert [(a["id"], a["answer"], a["by"]) for a in answered] == [
        (asked["id"], "blue", user.username)
    ]
    rows = await _rows(session.id)
    tool = next(m for m in rows if m.role == "tool")
    assert (tool.tool_name, tool.content, tool.is_error) == ("ask_user", "blue", False)
    assert rows[-1].content == "The ask_user tool returned: blue"
    assert (await Run.objects.aget(request_id=started.request_id)).status == "completed"
    assert [(a[0], a[1]) for a in await _actions(session.id)] == [
        ("answer", "rejected"),
        ("answer", "accepted"),
        ("answer", "rejected"),
    ]
