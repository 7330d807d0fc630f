"""A run hosted by one Daphne process is watched and controlled through the others."""

from __future__ import annotations

import asyncio
import html
import re

import pytest

from .conftest import (
    ASSISTANT,
    DELTA,
    MONITOR_PATH,
    RUN_STATUS,
    alogin,
    chat_path,
    monitor_row,
    status_of,
)

APPROVAL_EXTENSIONS = (
    ("demo_tools", {"tools": ["calculator"]}),
    ("tool_approval", {"tools": ["calculator"]}),
)


def reply(action: str, outcome: str = "accepted") -> str:
    return rf'data-reply="{outcome}" data-action="{action}"'


async def test_tokens_and_an_operator_approval_cross_between_three_processes(
    daphne_cluster, rows, sockets
):
    a, b, c = daphne_cluster.start(3, names=("A", "B", "C"))
    owner = await rows.call(rows.create_user, "cross-alice")
    await rows.call(rows.create_user, "cross-operator", staff=True)
    profile = await rows.call(
        rows.create_profile,
        "cross-approval",
        provider_settings={"delay": 0.01},
        extensions=APPROVAL_EXTENSIONS,
    )
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(b.url, "cross-alice")
    operator = await alogin(c.url, "cross-operator")
    sender = await sockets(a, chat_path(session_id), alice, label="chat@A")
    chat = await sockets(b, chat_path(session_id), alice, label="chat@B")
    monitor = await sockets(c, MONITOR_PATH, operator, label="monitor@C")

    await sender.send(type="message", text="What is 6*7?")
    await sender.wait_search(reply("message"))
    [run] = await rows.call(rows.runs, session_id)
    assert a.hosts(run.host), f"run hosted by {run.host!r}, not by A (pid {a.pid})"

    # The tool-call turn's words stream to B as they are generated in A.
    index, _ = await chat.wait_search(r'beforeend:#answer-[^"]*">[^<]*tool\.')
    streamed = "".join(m["text"] for f in chat.frames[: index + 1] for m in re.finditer(DELTA, f))
    assert html.unescape(streamed) == "Let me use the calculator tool."

    # C's monitor shows the run waiting on the calculator call; the operator approves there.
    _, waiting = await monitor.wait_search(
        monitor_row(run.request_id, "waiting")
        + r'.*?data-testid="approval-card" data-wait-id="(?P<wait>[^"]+)"'
    )
    call_id = waiting["wait"]
    cursor = monitor.mark()
    await monitor.send(type="approve", id=call_id, session=session_id)
    await monitor.wait_search(reply("approve"), after=cursor)

    # A ran the tool and answered; B shows the operator's decision, the answer and the end.
    await chat.wait_search(
        rf'data-call-id="{re.escape(call_id)}".*?data-testid="approval-outcome">'
        r"approved by cross-operator"
    )
    index, _ = await chat.wait_search(
        r'data-role="assistant"[^>]*>(?:(?!</article>).)*The result is 42\.'
    )
    await chat.wait_for(lambda f: (s := status_of(f)) and s["status"] == "completed", after=index)
    await monitor.wait_search(monitor_row(run.request_id, "completed"))

    finished = await rows.call(rows.run, run.request_id)
    assert finished.status == "completed"
    assert a.hosts(finished.host)
    transcript = await rows.call(rows.messages, session_id)
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "assistant"]
    assert transcript[2]["tool_call_id"] == call_id and transcript[2]["content"] == "42"
    assert transcript[3]["content"] == "The result is 42."


async def test_cancel_sent_through_another_process_stops_the_run_where_it_is_hosted(
    daphne_cluster, rows, sockets
):
    a, b = daphne_cluster.start(2, names=("A", "B"))
    owner = await rows.call(rows.create_user, "cancel-alice")
    # 0.3 s a word: the echo answer takes about ten seconds, so the cancel lands mid-stream.
    profile = await rows.call(rows.create_profile, "cross-slow", provider_settings={"delay": 0.3})
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(a.url, "cancel-alice")
    sender = await sockets(a, chat_path(session_id), alice, label="chat@A")
    chat = await sockets(b, chat_path(session_id), alice, label="chat@B")

    await sender.send(type="message", text="Tell me a long story")
    await sender.wait_search(reply("message"))
    await chat.wait_search(DELTA)
    [run] = await rows.call(rows.runs, session_id)
    assert a.hosts(run.host) and run.status == "running"

    cursor = chat.mark()
    await chat.send(type="cancel")
    await chat.wait_search(reply("cancel"), after=cursor)
    await chat.wait_for(lambda f: (s := status_of(f)) and s["status"] == "cancelled", after=cursor)

    states = [
        (m["status"], m["cancel"]) for m in chat.search_all(RUN_STATUS, after=cursor) if m["cancel"]
    ]
    progression = [
        cancel for i, (_, cancel) in enumerate(states) if i == 0 or states[i - 1][1] != cancel
    ]
    assert progression == ["requested", "acknowledged", "stopped"]
    assert states[-1] == ("cancelled", "stopped")

    stopped = await rows.call(rows.run, run.request_id)
    assert (stopped.status, stopped.cancel_state, stopped.phase) == (
        "cancelled",
        "stopped",
        "cancelled",
    )
    assert a.hosts(stopped.host)
    # What streamed before the cancel is kept, marked as stopped by the one who cancelled.
    answers = chat.search_all(ASSISTANT)
    assert answers, "the partial answer is shown"
    assert all('data-testid="partial-mark"' in m["body"] for m in answers), answers
    assert "stopped by" in answers[-1]["body"]


async def test_idle_sockets_survive_the_channel_layer_with_the_documented_redis_url(
    daphne_cluster, rows, sockets
):
    """REDIS_URL as the README documents it (no query options) must keep idle sockets alive."""
    [a] = daphne_cluster.start(1, names=("A",))
    owner = await rows.call(rows.create_user, "idle-alice")
    profile = await rows.call(rows.create_profile, "idle-echo")
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(a.url, "idle-alice")
    chat = await sockets(a, chat_path(session_id), alice, label="chat@A")

    # Idle time is the condition under test: several 5 s blocking receives of the layer.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(chat.closed.wait(), 16)
    cursor = chat.mark()
    await chat.send(type="message", text="still connected?")
    await chat.wait_search(reply("message"), after=cursor)
