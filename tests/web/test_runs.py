"""RunManager: a message becomes a hosted run with a Run row, a trace and ordered frames."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agents.models import ChatSession, ExtensionSetting, Message, Run, RunEvent

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})
# An OpenAI-compatible server that is not there: port 9 (discard) refuses at once.
UNREACHABLE = {"base_url": "http://127.0.0.1:9/v1", "timeout": 2, "max_retries": 0}
TERMINAL = {"completed", "failed", "cancelled", "interrupted"}


def _texts(frames: list[dict[str, Any]], iteration: int) -> str:
    return "".join(
        f["text"]
        for f in frames
        if f["type"] == "run.delta" and f["kind"] == "text" and f["iteration"] == iteration
    )


async def _rows(session_id: str) -> list[Message]:
    return [m async for m in Message.objects.filter(session_id=session_id).order_by("seq")]


async def test_a_message_becomes_a_run_that_goes_from_running_to_completed(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "What is 6 * 7?")

    assert reply.accepted and reply.action == "message" and reply.request_id
    # The reply comes after the intake committed: the run and its input are stored.
    stored = await Run.objects.aget(request_id=reply.request_id)
    assert stored.status == "running" and stored.host == manager.host_id
    assert [(m.role, m.content, m.run_id) for m in await _rows(session.id)][:1] == [
        ("user", "What is 6 * 7?", stored.pk)
    ]
    started = await listener.until_type("run.started")
    assert started["run"]["status"] == "running"
    finished = await listener.finished(reply.request_id)
    assert finished["run"]["status"] == "completed"

    run = await Run.objects.aget(request_id=reply.request_id)
    assert (run.status, run.phase, run.cancel_state, run.error) == (
        "completed",
        "completed",
        "",
        "",
    )
    assert run.iterations == 2  # the tool call, then the answer
    assert run.input_text == "What is 6 * 7?"
    assert run.started_by_id == user.pk
    assert run.created_at <= run.started_at <= run.finished_at
    rows = await _rows(session.id)
    assistant = [m for m in rows if m.role == "assistant"]
    assert run.input_tokens == sum(m.input_tokens for m in assistant) > 0
    assert run.output_tokens == sum(m.output_tokens for m in assistant) > 0
    assert assistant[-1].content == "The result is 42."
    session_row = await ChatSession.objects.aget(pk=session.id)
    assert session_row.status == "idle"
    assert session_row.title == "What is 6 * 7?"


async def test_the_trace_is_in_seq_order_with_text_deltas_coalesced(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(provider_settings={"delay": 0})
    session = await make_session(user, profile)

    reply = await manager.submit_message(session.id, user, "tell me something long")
    await manager.wait_for_run(reply.request_id)

    run = await Run.objects.aget(request_id=reply.request_id)
    trace = [e async for e in RunEvent.objects.filter(run=run).order_by("seq")]
    seqs = [e.seq for e in trace]
    assert seqs == sorted(set(seqs))
    assert all(e.seq <= e.last_seq for e in trace)
    # Consecutive entries never overlap: each covers seq..last_seq, the next starts later.
    assert all(a.last_seq < b.seq for a, b in zip(trace, trace[1:], strict=False))
    types = [e.type for e in trace]
    assert types[0] == "run_started" and types[-1] == "run_completed"
    deltas = [e for e in trace if e.type == "text_delta"]
    answer = (await _rows(session.id))[-1].content
    token_count = sum(e.data["count"] for e in deltas)
    assert len(deltas) < token_count  # many tokens, few rows
    assert "".join(e.data["text"] for e in deltas) == answer
    assert sum(e.last_seq - e.seq + 1 for e in deltas) == token_count


async def test_frames_reach_the_session_group_in_order_and_deltas_rebuild_each_answer(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(provider_settings={"delay": 0.002}, extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "What is 2 + 3?")
    await listener.finished(reply.request_id)

    frames = listener.of(reply.request_id)
    assert frames == listener.frames  # nothing of another run
    types = [f["type"] for f in frames if f["type"] not in ("run.delta", "run.state")]
    assert types == [
        "run.started",
        "run.model_started",
        "run.message",
        "run.tool",
        "run.tool",
        "run.model_started",
        "run.message",
        "run.finished",
    ]
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(seqs)
    assert frames[-1]["type"] == "run.finished" and frames[-1]["seq"] > frames[-2]["seq"]
    assert frames[0]["message"]["role"] == "user"
    assert frames[0]["message"]["content"] == "What is 2 + 3?"
    messages = [f["message"] for f in frames if f["type"] == "run.message"]
    assert [_texts(frames, 1), _texts(frames, 2)] == [m["content"] for m in messages]
    assert messages[1]["content"] == "The result is 5."
    # Every delta token is covered exactly once: the delta seq ranges do not overlap.
    ranges = [(f["first_seq"], f["seq"]) for f in frames if f["type"] == "run.delta"]
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    tools = [f for f in frames if f["type"] == "run.tool"]
    assert [t["status"] for t in tools] == ["started", "completed"]
    call = messages[0]["tool_calls"][0]
    assert tools[0]["call"] == call
    assert tools[1]["result"]["tool_call_id"] == call["id"]
    assert tools[1]["result"]["content"] == "5"
    # The persisted transcript says the same as the frames.
    rows = await _rows(session.id)
    assert [m.message_id for m in rows if m.role == "assistant"] == [m["id"] for m in messages]


async def test_the_monitor_gets_a_few_rows_per_second_and_a_final_terminal_row(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen: Any
) -> None:
    profile = await make_profile(provider_settings={"delay": 0.02})  # about 0.7 s of streaming
    session = await make_session(user, profile)
    monitor = await listen("monitor")

    began = time.monotonic()
    reply = await manager.submit_message(session.id, user, "hello there, monitor")

    def final_row(frame: dict[str, Any]) -> bool:
        return any(
            row["request_id"] == reply.request_id and row["status"] in TERMINAL
            for row in frame.get("rows", ())
        )

    await monitor.until(final_row)
    elapsed = time.monotonic() - began
    assert all(f["type"] == "monitor.rows" for f in monitor.frames)
    rows = [
        row for f in monitor.frames for row in f["rows"] if row["request_id"] == reply.request_id
    ]
    assert rows[-1]["status"] == "completed"
    assert rows[-1]["user"] == user.username and rows[-1]["profile"] == profile.name
    assert any(row["status"] == "running" for row in rows[:-1])
    # Coalesced: about four rows a second while it streams, plus the final one.
    assert len(rows) <= elapsed / 0.25 + 3, (len(rows), elapsed)


async def test_a_run_completes_with_nobody_listening(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)

    reply = await manager.submit_message(session.id, user, "What is 10 - 4?")
    await manager.wait_for_run(reply.request_id)

    run = await Run.objects.aget(request_id=reply.request_id)
    assert run.status == "completed"
    assert (await _rows(session.id))[-1].content == "The result is 6."


async def test_a_listener_that_leaves_mid_run_does_not_stop_it(
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
    channel_layer: Any,
) -> None:
    from agents.hosting import session_group

    profile = await make_profile(provider_settings={"delay": 0.01})
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "hello, I will close my tab")
    await listener.until_type("run.delta")
    await channel_layer.group_discard(session_group(session.id), listener.channel)
    await manager.wait_for_run(reply.request_id)

    run = await Run.objects.aget(request_id=reply.request_id)
    assert run.status == "completed"
    assert (await _rows(session.id))[-1].content.startswith('You said: "hello, I will close')


async def test_an_unreachable_provider_fails_the_run_with_a_clear_error(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(provider="openai", provider_settings=UNREACHABLE)
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "hello?")
    finished = await listener.finished(reply.request_id)

    assert finished["run"]["status"] == "failed"
    assert "Could not connect" in finished["run"]["error"]
    run = await Run.objects.aget(request_id=reply.request_id)
    assert run.status == "failed" and run.phase == "failed"
    assert "Could not connect" in run.error and "127.0.0.1:9" in run.error
    assert run.finished_at is not None
    assert (await ChatSession.objects.aget(pk=session.id)).status == "idle"
    # The user's message is kept; no assistant message was invented.
    assert [m.role for m in await _rows(session.id)] == ["user"]


async def test_one_sessions_failure_never_touches_another_running_at_the_same_time(
    manager: Any, user: Any, other_user: Any, make_profile: Any, make_session: Any
) -> None:
    broken = await make_profile(provider="openai", provider_settings=UNREACHABLE)
    working = await make_profile(provider_settings={"delay": 0.005}, extensions=(DEMO_TOOLS,))
    failing_session = await make_session(user, broken)
    good_session = await make_session(other_user, working)

    good = await manager.submit_message(good_session.id, other_user, "What is 3 * 3?")
    bad = await manager.submit_message(failing_session.id, user, "hello?")
    assert set(manager.hosted) == {good_session.id, failing_session.id}
    await asyncio.gather(
        manager.wait_for_run(good.request_id), manager.wait_for_run(bad.request_id)
    )

    assert (await Run.objects.aget(request_id=bad.request_id)).status == "failed"
    good_run = await Run.objects.aget(request_id=good.request_id)
    assert (good_run.status, good_run.error) == ("completed", "")
    roles = [m.role for m in await _rows(good_session.id)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_profile_that_cannot_be_built_fails_its_run_and_the_site_keeps_working(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    # Written past the admin's validation, as a bad migration or a manual edit would.
    await ExtensionSetting.objects.filter(profile=profile).aupdate(settings={"tools": ["abacus"]})
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "What is 1 + 1?")
    finished = await listener.finished(reply.request_id)

    error = finished["run"]["error"]
    assert finished["run"]["status"] == "failed"
    assert error.startswith("The agent profile cannot be used:")
    assert "demo_tools" in error and "abacus" in error
    assert (await Run.objects.aget(request_id=reply.request_id)).error == error
    # The session is not stuck: the next message gets its own (equally failed) run.
    again = await manager.submit_message(session.id, user, "still there?")
    assert again.accepted and again.request_id != reply.request_id
    await listener.finished(again.request_id)
    # And other profiles are unaffected.
    healthy = await make_session(user, await make_profile(extensions=(DEMO_TOOLS,)))
    ok = await manager.submit_message(healthy.id, user, "What is 1 + 1?")
    await manager.wait_for_run(ok.request_id)
    assert (await Run.objects.aget(request_id=ok.request_id)).status == "completed"


async def test_a_snapshot_mid_stream_plus_later_deltas_gives_the_answer_exactly_once(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(provider_settings={"delay": 0.01})
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "please stream a while")
    await listener.until_type("run.delta")
    snapshot = await manager.snapshot(session.id)
    await listener.finished(reply.request_id)

    partial = snapshot.partial
    assert partial is not None and partial.request_id == reply.request_id
    assert snapshot.run["request_id"] == reply.request_id
    assert snapshot.run["status"] == "running"
    assert [m["content"] for m in snapshot.messages] == ["please stream a while"]
    assert snapshot.message_ids == {m["id"] for m in snapshot.messages}
    later = [
        f
        for f in listener.frames
        if f["type"] == "run.delta" and f["kind"] == "text" and f["seq"] > snapshot.seq
    ]
    assert later, "the snapshot was taken before the end of the answer"
    answer = (await _rows(session.id))[-1].content
    assert partial.text + "".join(f["text"] for f in later) == answer
    # The answer's run.message is not in the snapshot, so the page must keep it.
    final = [f for f in listener.frames if f["type"] == "run.message"][-1]
    assert final["seq"] > snapshot.seq and final["message"]["id"] not in snapshot.message_ids


async def test_a_snapshot_without_an_active_run_is_the_transcript_alone(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    reply = await manager.submit_message(session.id, user, "hi")
    await manager.wait_for_run(reply.request_id)

    snapshot = await manager.snapshot(session.id)

    assert snapshot.run is None and snapshot.partial is None and snapshot.seq == 0
    assert [m["role"] for m in snapshot.messages] == ["user", "assistant"]
    assert all(m["request_id"] == reply.request_id for m in snapshot.messages)


async def test_a_snapshot_taken_as_the_run_starts_still_shows_the_users_message_once(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(provider_settings={"delay": 0.01})
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    reply = await manager.submit_message(session.id, user, "my first words")
    started = await listener.until_type("run.started")
    snapshot = await manager.snapshot(session.id)
    await listener.finished(reply.request_id)

    # What a page shows: the snapshot's messages, then live messages newer than its seq.
    shown = [m["content"] for m in snapshot.messages]
    if started["seq"] > snapshot.seq:
        shown.append(started["message"]["content"])
    assert shown.count("my first words") == 1, (snapshot.seq, snapshot.messages)
