"""Double-texting: what a message sent while the session's run is active does, per profile."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Message, OperatorAction, Run, RunEvent

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})
APPROVE_CALCULATOR = ("tool_approval", {"tools": ["calculator"]})
STEERING = ("steering", {})


async def _rows(session_id: str) -> list[Message]:
    return [m async for m in Message.objects.filter(session_id=session_id).order_by("seq")]


async def _runs(session_id: str) -> list[Run]:
    return [r async for r in Run.objects.filter(session_id=session_id).order_by("created_at")]


def _approval_of(request_id: str) -> Any:
    return lambda f: (
        f["type"] == "run.custom"
        and f["name"] == "approval.requested"
        and f["request_id"] == request_id
    )


def _tool_started_in(request_id: str) -> Any:
    return lambda f: (
        f["type"] == "run.tool" and f["status"] == "started" and f["request_id"] == request_id
    )


async def _busy_session(
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    *,
    policy: str,
    steering: bool = False,
) -> tuple[Any, Any, str, str]:
    """A session whose run holds in an approval wait: (session, listener, request id, call id)."""
    extensions = (DEMO_TOOLS, APPROVE_CALCULATOR) + ((STEERING,) if steering else ())
    profile = await make_profile(extensions=extensions, double_texting=policy)
    session = await make_session(user, profile)
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, "What is 5 * 5?")
    requested = await listener.until(_approval_of(reply.request_id))
    await listener.until(_tool_started_in(reply.request_id))
    return session, listener, reply.request_id, requested["data"]["id"]


async def _approve_next(manager: Any, session: Any, user: Any, listener: Any) -> str:
    """Approve the next run's calculator call; returns that run's request id."""
    started = await listener.until(lambda f: f["type"] == "run.started")
    request_id = started["request_id"]
    requested = await listener.until(_approval_of(request_id))
    reply = await manager.control(session.id, user, "approve", {"id": requested["data"]["id"]})
    assert reply.accepted, reply
    await listener.finished(request_id)
    return request_id


async def test_steer_is_the_default_and_the_active_run_takes_the_message(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="steer", steering=True
    )
    assert session.profile.double_texting == "steer"

    reply = await manager.submit_message(session.id, user, "actually, just say hi")

    assert (reply.accepted, reply.action, reply.request_id) == (True, "steer", request_id)
    await manager.control(session.id, user, "approve", {"id": call_id})
    await listener.finished(request_id)
    runs = await _runs(session.id)
    assert [r.request_id for r in runs] == [request_id]
    rows = await _rows(session.id)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "user", "assistant"]
    steering = rows[3]
    assert steering.content == "actually, just say hi" and steering.run_id == runs[0].pk
    assert steering.attributes["steering"] is True
    assert rows[-1].content.startswith('You said: "actually, just say hi"')
    shown = [f["message"] for f in listener.frames if f["type"] == "run.message"]
    assert [(m["role"], m["content"]) for m in shown if m["role"] == "user"] == [
        ("user", "actually, just say hi")
    ]
    assert shown[1]["id"] == steering.message_id
    trace = [e async for e in RunEvent.objects.filter(run=runs[0], type="steering_started")]
    assert [e.data["text"] for e in trace] == ["actually, just say hi"]
    actions = [
        (a.action, a.outcome, a.run_id)
        async for a in OperatorAction.objects.filter(session=session).order_by("id")
    ]
    assert actions == [
        ("message:steer", "accepted", runs[0].pk),
        ("approve", "accepted", runs[0].pk),
    ]


async def test_steer_without_a_steering_extension_queues_the_message_instead(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="steer"
    )

    reply = await manager.submit_message(session.id, user, "and then hello")

    assert (reply.accepted, reply.action) == (True, "queue")
    await manager.control(session.id, user, "approve", {"id": call_id})
    second = await listener.until(
        lambda f: f["type"] == "run.started" and f["request_id"] != request_id
    )
    await listener.finished(second["request_id"])
    assert [r.input_text for r in await _runs(session.id)] == ["What is 5 * 5?", "and then hello"]


async def test_queue_starts_a_second_run_after_the_first_that_answers_the_message(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="queue", steering=True
    )

    reply = await manager.submit_message(session.id, user, "hello after that")

    assert (reply.accepted, reply.action, reply.request_id) == (True, "queue", request_id)
    assert len(await _runs(session.id)) == 1  # nothing starts while the first is active
    await manager.control(session.id, user, "approve", {"id": call_id})
    second = await listener.until(
        lambda f: f["type"] == "run.started" and f["request_id"] != request_id
    )
    first_finished = [f for f in listener.of(request_id) if f["type"] == "run.finished"]
    assert first_finished and first_finished[0]["run"]["status"] == "completed"
    assert second["message"]["content"] == "hello after that"
    await listener.finished(second["request_id"])
    first, queued = await _runs(session.id)
    assert (queued.request_id, queued.input_text, queued.status) == (
        second["request_id"],
        "hello after that",
        "completed",
    )
    assert queued.started_by_id == user.pk
    assert first.finished_at <= queued.started_at
    rows = await _rows(session.id)
    assert [m.content for m in rows][4:] == [
        "hello after that",
        'You said: "hello after that". I am the offline demo model, so I can only echo you, '
        "do arithmetic with the calculator tool and tell the time with the clock tool.",
    ]
    assert [m.run_id for m in rows] == [first.pk] * 4 + [queued.pk] * 2


async def test_queued_messages_run_in_the_order_they_were_sent_and_none_is_lost(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="queue"
    )
    for text in ("What is 1 + 1?", "What is 2 + 2?"):
        assert (await manager.submit_message(session.id, user, text)).action == "queue"

    await manager.control(session.id, user, "approve", {"id": call_id})
    # The second run waits for approval; a message sent now queues behind the third.
    started = await listener.until(
        lambda f: f["type"] == "run.started" and f["request_id"] != request_id
    )
    await listener.until(_tool_started_in(started["request_id"]))
    assert (await manager.submit_message(session.id, user, "What is 3 + 3?")).action == "queue"
    approval = [f for f in listener.frames if _approval_of(started["request_id"])(f)][0]
    await manager.control(session.id, user, "approve", {"id": approval["data"]["id"]})
    await listener.finished(started["request_id"])
    await _approve_next(manager, session, user, listener)
    await _approve_next(manager, session, user, listener)
    await manager.wait_idle(10)

    runs = await _runs(session.id)
    assert [(r.input_text, r.status) for r in runs] == [
        ("What is 5 * 5?", "completed"),
        ("What is 1 + 1?", "completed"),
        ("What is 2 + 2?", "completed"),
        ("What is 3 + 3?", "completed"),
    ]
    answers = [m.content for m in await _rows(session.id) if m.content.startswith("The result")]
    assert answers == [f"The result is {n}." for n in (25, 2, 4, 6)]


async def test_reject_refuses_the_message_with_a_reason_and_starts_nothing(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="reject", steering=True
    )

    reply = await manager.submit_message(session.id, user, "are you there?")

    assert (reply.accepted, reply.action, reply.request_id) == (False, "reject", request_id)
    assert "still active" in reply.reason
    await manager.control(session.id, user, "approve", {"id": call_id})
    await listener.finished(request_id)
    await manager.wait_idle(10)
    assert [r.input_text for r in await _runs(session.id)] == ["What is 5 * 5?"]
    assert "are you there?" not in [m.content for m in await _rows(session.id)]
    action = await OperatorAction.objects.aget(session=session, action="message:reject")
    assert (action.outcome, action.reason, action.payload) == (
        "rejected",
        reply.reason,
        {"text": "are you there?"},
    )


async def test_interrupt_cancels_the_active_run_and_a_new_run_answers_the_message(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    session, listener, request_id, call_id = await _busy_session(
        manager, user, make_profile, make_session, listen_session, policy="interrupt"
    )

    reply = await manager.submit_message(session.id, user, "stop, say hello instead")

    assert (reply.accepted, reply.action, reply.request_id) == (True, "interrupt", request_id)
    first_end = await listener.finished(request_id)
    assert (first_end["run"]["status"], first_end["run"]["cancel_state"]) == (
        "cancelled",
        "stopped",
    )
    second = await listener.until(
        lambda f: f["type"] == "run.started" and f["request_id"] != request_id
    )
    await listener.finished(second["request_id"])
    first, new = await _runs(session.id)
    assert (first.status, first.cancel_state) == ("cancelled", "stopped")
    assert (new.input_text, new.status) == ("stop, say hello instead", "completed")
    rows = await _rows(session.id)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "user", "assistant"]
    assert rows[2].tool_call_id == call_id and rows[2].attributes.get("cancelled") is True
    assert rows[-1].content.startswith('You said: "stop, say hello instead"')
    assert [m.run_id for m in rows] == [first.pk] * 3 + [new.pk] * 2
