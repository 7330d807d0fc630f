"""A run whose hosting process dies is interrupted by the survivors, and nothing stored is lost."""

from __future__ import annotations

import time
from datetime import timedelta

from .conftest import (
    alogin,
    chat_path,
    poll,
    status_of,
)

APPROVAL_EXTENSIONS = (
    ("demo_tools", {"tools": ["calculator"]}),
    ("tool_approval", {"tools": ["calculator"]}),
)
HOST_STOPPED = "Interrupted: the server process hosting this run stopped."
INTERRUPTED_TOOL_CONTENT = "Not completed: the request ended before this tool call returned."


def arithmetic_then_text(messages):
    """Calls the calculator for 6*7; answers anything else in words."""
    last = messages[-1]
    if last["role"] == "user" and "6*7" in last["content"]:
        return ("tool", "calculator", {"expression": "6*7"})
    return ("text", "Still here, and the last calculation never finished.")


async def test_killed_host_is_interrupted_by_a_survivor_and_the_session_goes_on(
    daphne_cluster, rows, sockets, fake_chat_server
):
    provider = fake_chat_server(arithmetic_then_text)
    a, b = daphne_cluster.start(2, names=("A", "B"))
    owner = await rows.call(rows.create_user, "crash-alice")
    profile = await rows.call(
        rows.create_profile,
        "crash-openai",
        provider="openai",
        model_name="fake-model",
        provider_settings={"base_url": f"{provider.url}/v1", "max_retries": 0, "timeout": 20},
        extensions=APPROVAL_EXTENSIONS,
    )
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(b.url, "crash-alice")
    sender = await sockets(a, chat_path(session_id), alice, label="chat@A")
    chat = await sockets(b, chat_path(session_id), alice, label="chat@B")

    await sender.send(type="message", text="What is 6*7?")
    await chat.wait_for(lambda f: (s := status_of(f)) and s["status"] == "waiting")

    async def stored_waiting():  # the frame can overtake the checkpoint that stores it
        [run] = await rows.call(rows.runs, session_id)
        return run if run.status == "waiting" else None

    run = await poll(stored_waiting, timeout=10, what="the run stored as waiting")
    assert a.hosts(run.host)
    before = await rows.call(rows.messages, session_id)
    assert [m["role"] for m in before] == ["user", "assistant"]
    [call] = before[1]["tool_calls"]

    cursor = chat.mark()
    a.kill()
    killed_at = time.monotonic()
    index, _ = await chat.wait_for(
        lambda f: (s := status_of(f)) and s["status"] == "interrupted", after=cursor, timeout=10
    )
    shown_after = time.monotonic() - killed_at
    assert HOST_STOPPED in chat.frames[index]  # the page says why
    assert shown_after < 10, f"interrupted only {shown_after:.1f} s after the kill"

    interrupted = await rows.call(rows.run, run.request_id)
    assert (interrupted.status, interrupted.error) == ("interrupted", HOST_STOPPED)
    assert interrupted.finished_at is not None and interrupted.waiting_for == []
    assert await rows.call(rows.messages, session_id) == before

    # The next run sends the history with the dangling call closed, which the provider accepts.
    cursor = chat.mark()
    await chat.send(type="message", text="Are you still there?")
    await chat.wait_for(lambda f: (s := status_of(f)) and s["status"] == "completed", after=cursor)
    assert provider.refused == []
    sent = provider.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[3]["tool_call_id"] == call["id"]
    assert sent[3]["content"] == INTERRUPTED_TOOL_CONTENT
    after = await rows.call(rows.messages, session_id)
    assert after[:2] == before
    assert [m["role"] for m in after[2:]] == ["user", "assistant"]
    assert after[3]["content"] == "Still here, and the last calculation never finished."
    latest = (await rows.call(rows.runs, session_id))[-1]
    assert latest.status == "completed" and b.hosts(latest.host)


async def test_with_default_timings_a_dead_host_is_interrupted_soon_but_never_early(
    daphne_cluster, rows, sockets
):
    """The defaults: hosts renew their lease every 2 s, a dead host's run ends within 10 s.

    A lease counts as expired after 10 s minus one heartbeat without renewal, and the
    reaper passes every heartbeat: killed right after a renewal (the worst case), the run
    is not reaped before 8 s of silence and is reaped within 10 s of the kill.
    """
    a, b = daphne_cluster.start(2, names=("A", "B"), defaults=True)
    owner = await rows.call(rows.create_user, "bound-alice")
    profile = await rows.call(rows.create_profile, "bound-approval", extensions=APPROVAL_EXTENSIONS)
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    # B serves nothing before the kill but a login: its reaper runs from its start.
    alice = await alogin(b.url, "bound-alice")
    sender = await sockets(a, chat_path(session_id), alice, label="chat@A")
    await sender.send(type="message", text="What is 6*7?")

    async def waiting_run():
        found = await rows.call(rows.runs, session_id)
        return found and found[0].status == "waiting" and found[0]

    run = await poll(waiting_run, timeout=15, what="the run waits for approval")
    assert a.hosts(run.host)

    def lease_of(alias):
        from agents.models import Host

        return Host.objects.using(alias).get(pk=run.host).renewed_at

    first = await rows.call(rows.execute, lease_of)

    async def next_beat():
        renewed = await rows.call(rows.execute, lease_of)
        return renewed > first and renewed

    renewed = await poll(next_beat, timeout=5, interval=0.02, what="a lease renewal of A")
    a.kill()
    killed_at = time.monotonic()

    async def interrupted():
        current = await rows.call(rows.run, run.request_id)
        return current.status == "interrupted" and current

    reaped = await poll(interrupted, timeout=20, what="B interrupts the run")
    elapsed = time.monotonic() - killed_at
    print(f"\ninterrupted {elapsed:.2f} s after the kill (killed right after a heartbeat)")
    assert reaped.error == HOST_STOPPED
    assert reaped.finished_at - renewed >= timedelta(seconds=8)
    assert elapsed <= 10 + 0.5  # the promise, plus the test's own polling


async def test_a_starting_process_interrupts_runs_left_by_stopped_ones(daphne_cluster, rows):
    from django.utils import timezone

    from agents.models import Host, Run

    owner = await rows.call(rows.create_user, "startup-alice")
    profile = await rows.call(rows.create_profile, "startup-demo")
    stale_session, fresh_session = await rows.call(rows.create_sessions, owner, profile, 2)

    def seed(alias):
        now = timezone.now()
        stale = Run.objects.using(alias).create(
            session_id=stale_session,
            profile=profile,
            input_text="left behind",
            status="waiting",
            phase="running_tool",
            host="gone-host:4242:deadbeef",
            heartbeat_at=now - timedelta(seconds=60),
            started_at=now - timedelta(seconds=61),
        )
        fresh = Run.objects.using(alias).create(
            session_id=fresh_session,
            profile=profile,
            input_text="still beating elsewhere",
            status="running",
            phase="generating",
            host="other-host:4343:cafebabe",
            heartbeat_at=now + timedelta(seconds=30),  # beats on, as far as anyone can tell
            started_at=now,
        )
        # Its host renews its lease, as far as anyone can tell; the stale run's host does not.
        Host.objects.using(alias).create(
            host_id="other-host:4343:cafebabe", renewed_at=now + timedelta(seconds=30)
        )
        Host.objects.using(alias).create(
            host_id="gone-host:4242:deadbeef", renewed_at=now - timedelta(seconds=60)
        )
        return stale.request_id, fresh.request_id

    stale_id, fresh_id = await rows.call(rows.execute, seed)
    try:
        # No connection is made: what happened, happened while the ASGI module was imported.
        daphne_cluster.start(1, names=("fresh",))
        stale = await rows.call(rows.run, stale_id)
        assert (stale.status, stale.error) == ("interrupted", HOST_STOPPED)
        assert stale.phase == "failed" and stale.waiting_for == [] and stale.finished_at
        assert (await rows.call(rows.run, fresh_id)).status == "running"
    finally:

        def settle(alias):
            Run.objects.using(alias).filter(request_id=fresh_id).update(status="cancelled")

        await rows.call(rows.execute, settle)
