"""The chat and monitor sockets: who may connect, frame checking, live fragments, reconnects."""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import channels.layers
import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.hosting import format_cost, session_group
from agents.models import Message, ModelPrice, OperatorAction, Run
from agents.providers import registry
from agents.providers.registry import ProviderSpec, ScriptedSettings
from agents.providers.scripted import ScriptedModel
from agents.web.routing import websocket_urlpatterns
from zett_site.layers import EmbeddedChannelLayer

pytestmark = pytest.mark.django_db(transaction=True)

# The same stack as zett_site/asgi.py's "websocket" entry.
APP = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
TIMEOUT = 10  # a safety net; every frame waited for is one a correct server sends promptly
HEADERS = {"HX-Request": "true", "HX-Trigger": None, "HX-Current-URL": "http://localhost/"}

DELTA = re.compile(r'<span hx-swap-oob="beforeend:#answer-([^"]+)">(.*?)</span>', re.S)
STREAM_TEXT = re.compile(r'id="answer-([^"]+)" data-testid="streaming-text">(.*?)</span>', re.S)
FINAL = re.compile(r'data-testid="message" data-role="assistant"')


def _session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


class Socket:
    """A WebsocketCommunicator that keeps every text frame it received."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[str] = []

    async def next(self) -> str:
        frame = await self.communicator.receive_from(timeout=TIMEOUT)
        self.frames.append(frame)
        return frame

    async def until(self, predicate: Callable[[str], bool]) -> list[str]:
        """Receive until a frame matches; returns the frames received by this call."""
        start = len(self.frames)
        while not predicate(await self.next()):
            pass
        return self.frames[start:]

    async def send(self, **frame: Any) -> None:
        await self.communicator.send_to(text_data=json.dumps({**frame, "HEADERS": HEADERS}))

    async def closed_with(self) -> int:
        output = await self.communicator.receive_output(timeout=TIMEOUT)
        assert output["type"] == "websocket.close"
        return int(output["code"])


@pytest.fixture
async def connect(manager: Any) -> AsyncIterator[Callable[..., Awaitable[Socket]]]:
    """connect(path, user=None) -> an accepted Socket; all are disconnected after the test."""
    opened: list[WebsocketCommunicator] = []

    async def open_socket(path: str, user: Any = None) -> Socket:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
        if user is not None:
            cookie = await sync_to_async(_session_cookie)(user)
            headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
        communicator = WebsocketCommunicator(APP, path, headers=headers)
        opened.append(communicator)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        assert connected
        return Socket(communicator)

    yield open_socket
    for communicator in opened:
        await communicator.disconnect()


class PausingModel:
    """Streams its answer word by word, stopping after `pause_after` words until `resume`."""

    def __init__(self, answer: str, pause_after: int) -> None:
        self.answer = answer
        self.pause_after = pause_after
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        words = 0
        async for event in ScriptedModel([self.answer]).stream(request):
            if event.kind == "text":
                words += 1
                if words == self.pause_after + 1:
                    self.paused.set()
                    await self.resume.wait()
            yield event


@pytest.fixture
def pausing(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, int], PausingModel]:
    """pausing(answer, pause_after) -> the model behind the provider key "pausing"."""

    def install(answer: str, pause_after: int) -> PausingModel:
        model = PausingModel(answer, pause_after)
        spec = ProviderSpec("pausing", "Pausing", ScriptedSettings, "test", lambda _n, _s: model)
        monkeypatch.setitem(registry.PROVIDERS, "pausing", spec)
        return model

    return install


_sentinels = itertools.count(1)


async def next_is_sentinel(socket: Socket, channel_layer: Any, session_id: str) -> bool:
    """Whether the socket rendered nothing for the frames sent to its session group so far.

    A run.state of an unrelated run goes through the same group, which reaches the socket in
    order: if its status bar is the next frame the socket sends, every frame before it was
    dropped. Deterministic, unlike waiting a while for nothing to arrive.
    """
    label = f"sentinel-{next(_sentinels)}"
    row = {"request_id": label, "status": "completed", "phase": label}
    await channel_layer.group_send(
        session_group(session_id), {"type": "run.state", "request_id": label, "seq": 1, "run": row}
    )
    frame = await socket.next()
    if f'data-phase="{label}"' in frame:
        return True
    raise AssertionError(f"expected the sentinel's status bar next, got: {frame[:300]}")


def streamed(frames: list[str]) -> str:
    return "".join(html.unescape(text) for frame in frames for _, text in DELTA.findall(frame))


async def assistant_contents(session_id: str) -> list[str]:
    return [
        row.content async for row in Message.objects.filter(session_id=session_id, role="assistant")
    ]


# -- who may connect ---------------------------------------------------------------------------


async def test_anonymous_chat_and_monitor_sockets_are_closed_with_4401(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    chat = await connect(f"/ws/sessions/{session.id}/")
    assert await chat.closed_with() == 4401
    monitor = await connect("/ws/monitor/")
    assert await monitor.closed_with() == 4401


async def test_another_users_session_is_closed_like_a_missing_one(
    connect: Any, user: Any, other_user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", other_user)
    assert await socket.closed_with() == 4404


async def test_unknown_session_is_closed_with_4404(connect: Any, user: Any) -> None:
    socket = await connect("/ws/sessions/no-such-session/", user)
    assert await socket.closed_with() == 4404


async def test_monitor_refuses_non_staff_with_4403(connect: Any, user: Any) -> None:
    socket = await connect("/ws/monitor/", user)
    assert await socket.closed_with() == 4403


async def test_foreign_origin_is_refused_before_anything_runs(user: Any) -> None:
    communicator = WebsocketCommunicator(
        APP, "/ws/monitor/", headers=[(b"origin", b"https://evil.example")]
    )
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert not connected
    await communicator.disconnect()


async def test_staff_may_watch_another_users_session(
    connect: Any, user: Any, staff_user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", staff_user)
    snapshot = await socket.next()
    assert '<div id="transcript"' in snapshot and 'hx-swap-oob="true"' in snapshot


# -- the snapshot and frame checking -----------------------------------------------------------


async def test_connect_replaces_transcript_status_and_waits_with_the_snapshot(
    connect: Any, channel_layer: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    await Message.objects.acreate(session=session, seq=1, message_id="m-1", role="user",
                                  content="earlier <question>")  # fmt: skip
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    snapshot = await socket.next()
    assert re.match(r'\s*<div id="transcript"[^>]* hx-swap-oob="true" data-snapshot="1"', snapshot)
    assert 'data-message-id="m-1"' in snapshot and "earlier &lt;question&gt;" in snapshot
    assert '<div id="run-status"' in snapshot and 'data-status="idle"' in snapshot
    assert '<div id="waiting"' in snapshot
    assert await next_is_sentinel(socket, channel_layer, session.id)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("x" * (64 * 1024 + 1), "too_large"),
        (json.dumps({"type": "message", "text": "é" * 40_000}), "too_large"),  # bytes, not chars
        ("{not json", "bad_json"),
        ('["message", "hi"]', "not_object"),
        ('"message"', "not_object"),
        (json.dumps({"type": "launch", "text": "hi"}), "unknown_type"),
        (json.dumps({"text": "hi"}), "unknown_type"),
        (json.dumps({"type": "message"}), "invalid"),
        (json.dumps({"type": "message", "text": "   "}), "invalid"),
        (json.dumps({"type": "message", "text": "x" * 10_001}), "invalid"),
        (json.dumps({"type": "message", "text": 5}), "invalid"),
        (json.dumps({"type": "approve"}), "invalid"),
        (json.dumps({"type": "answer", "id": "q1"}), "invalid"),
        (json.dumps({"type": "deny", "id": "c1", "reason": "r" * 2001}), "invalid"),
    ],
)
async def test_bad_frames_get_an_error_fragment_and_change_nothing(
    connect: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    raw: str,
    code: str,
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()  # the snapshot
    await socket.communicator.send_to(text_data=raw)
    error = await socket.next()
    assert error.startswith('<div hx-swap-oob="innerHTML:#errors">')
    assert f'data-error="{code}"' in error
    assert await next_is_sentinel(socket, channel_layer, session.id)
    assert await Run.objects.acount() == 0
    assert await OperatorAction.objects.acount() == 0


async def test_binary_frames_are_refused(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.communicator.send_to(bytes_data=b'{"type": "message", "text": "hi"}')
    assert 'data-error="invalid"' in await socket.next()
    assert await Run.objects.acount() == 0


# -- runs through the socket -------------------------------------------------------------------


async def test_message_frame_starts_a_run_and_tokens_arrive_before_the_final_message(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile(provider_settings={"delay": 0.002}))
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.send(type="message", text="hello there")
    frames = await socket.until(lambda frame: 'data-status="completed"' in frame)
    assert 'data-testid="control-reply" data-reply="accepted" data-action="message"' in frames[0]
    final_at = next(i for i, frame in enumerate(frames) if FINAL.search(frame))
    first_delta_at = next(i for i, frame in enumerate(frames) if DELTA.search(frame))
    assert first_delta_at < final_at
    [answer] = await assistant_contents(session.id)
    assert answer.startswith('You said: "hello there".')
    assert streamed(frames[:final_at]) == answer
    # The final message replaces the streaming bubble it was built from.
    key = DELTA.search(frames[first_delta_at]).group(1)
    assert f'<div id="stream-{key}" hx-swap-oob="delete"></div>' in frames[final_at]
    assert sum(len(FINAL.findall(frame)) for frame in frames) == 1
    assert 'data-testid="message" data-role="user"' in "".join(frames[:first_delta_at])


async def _chat_paused_mid_answer(
    connect: Any, user: Any, make_profile: Any, make_session: Any, model: Any, text: str
) -> tuple[Any, Socket]:
    """A chat whose run streams until the pausing model stops: (session, its socket)."""
    profile = await make_profile(provider="pausing", provider_settings={"responses": ["-"]})
    session = await make_session(user, profile)
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.send(type="message", text=text)
    await asyncio.wait_for(model.paused.wait(), TIMEOUT)
    return session, socket


async def test_reconnect_mid_stream_gets_the_snapshot_then_the_rest_exactly_once(
    connect: Any,
    manager: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    pausing: Any,
) -> None:
    answer = "one two three four five six seven eight nine ten"
    model = pausing(answer, 4)
    session, first = await _chat_paused_mid_answer(
        connect, user, make_profile, make_session, model, "count to ten"
    )
    await first.until(lambda frame: bool(DELTA.search(frame)))
    await first.communicator.disconnect()

    second = await connect(f"/ws/sessions/{session.id}/", user)
    snapshot = await second.next()
    [(key, partial)] = STREAM_TEXT.findall(snapshot)
    partial = html.unescape(partial)
    assert partial and answer.startswith(partial) and partial != answer
    [user_message_id] = re.findall(r'data-role="user" data-message-id="([^"]+)"', snapshot)
    # Frames the snapshot already covers may still be queued in the layer (the host's sender
    # and the snapshot race); replay two such frames as the layer would deliver them.
    covered = await manager.snapshot(session.id)
    run = covered.run
    group = session_group(session.id)
    await channel_layer.group_send(group, {
        "type": "run.delta", "request_id": run["request_id"], "seq": covered.seq,
        "first_seq": covered.seq, "kind": "text", "text": "DUPLICATE", "iteration": 1,
    })  # fmt: skip
    user_message = next(m for m in covered.messages if m["id"] == user_message_id)
    await channel_layer.group_send(group, {
        "type": "run.started", "request_id": run["request_id"], "seq": 1, "run": run,
        "message": user_message,
    })  # fmt: skip
    assert await next_is_sentinel(second, channel_layer, session.id)

    model.resume.set()
    rest = await second.until(lambda frame: 'data-status="completed"' in frame)
    assert partial + streamed(rest) == answer
    assert sum(len(FINAL.findall(frame)) for frame in rest) == 1
    assert f'<div id="stream-{key}" hx-swap-oob="delete"></div>' in "".join(rest)
    everything = snapshot + "".join(rest)
    assert everything.count(f'data-message-id="{user_message_id}"') == 1
    assert await assistant_contents(session.id) == [answer]


async def _second_tab_while_approval_waits(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> tuple[Any, Socket, str]:
    """A run whose first answer (with its tool call) is stored and that waits for approval,
    and a second tab opened on it: (session, the second tab, its snapshot frame)."""
    profile = await make_profile(
        extensions=(("demo_tools", {}), ("tool_approval", {"tools": ["calculator"]}))
    )
    session = await make_session(user, profile)
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.send(type="message", text="what is 6*7?")
    await socket.until(lambda frame: "approval" in frame)

    again = await connect(f"/ws/sessions/{session.id}/", user)
    return session, again, await again.next()


async def test_late_deltas_of_an_answer_the_snapshot_already_holds_are_dropped(
    connect: Any,
    manager: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    session, again, snapshot = await _second_tab_while_approval_waits(
        connect, user, make_profile, make_session
    )
    assert "Let me use the calculator tool." in snapshot
    covered = await manager.snapshot(session.id)
    assert covered.persisted_iterations == 1
    # A delta of that answer arriving with a seq above the snapshot's (the answer completed
    # between the snapshot's two reads) must not reopen a streaming bubble.
    run = covered.run
    group = session_group(session.id)
    await channel_layer.group_send(group, {
        "type": "run.delta", "request_id": run["request_id"], "seq": covered.seq + 1,
        "first_seq": covered.seq + 1, "kind": "text", "text": "tool.", "iteration": 1,
    })  # fmt: skip
    assert await next_is_sentinel(again, channel_layer, session.id)
    await manager.control(session.id, user, "cancel", {})


async def test_a_message_the_snapshot_shows_is_not_appended_again(
    connect: Any,
    manager: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    session, again, _ = await _second_tab_while_approval_waits(
        connect, user, make_profile, make_session
    )
    covered = await manager.snapshot(session.id)
    shown = next(m for m in covered.messages if m["role"] == "assistant")
    # The same message again with a fresh seq (a host's retry, a replay after a reconnect):
    # the page already shows it, so nothing may be appended.
    await channel_layer.group_send(session_group(session.id), {
        "type": "run.message", "request_id": covered.run["request_id"],
        "seq": covered.seq + 1, "message": shown,
    })  # fmt: skip
    assert await next_is_sentinel(again, channel_layer, session.id)
    await manager.control(session.id, user, "cancel", {})


async def test_late_frames_of_a_run_the_snapshot_shows_finished_are_dropped(
    connect: Any, channel_layer: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.send(type="message", text="hi")
    await socket.until(lambda frame: 'data-status="completed"' in frame)
    run = await Run.objects.aget()

    again = await connect(f"/ws/sessions/{session.id}/", user)
    snapshot = await again.next()
    assert FINAL.search(snapshot)
    group = session_group(session.id)
    await channel_layer.group_send(
        group, {"type": "run.model_started", "request_id": run.request_id, "seq": 2, "iteration": 1}
    )
    await channel_layer.group_send(group, {
        "type": "run.delta", "request_id": run.request_id, "seq": 3, "first_seq": 3,
        "kind": "text", "text": "again", "iteration": 1,
    })  # fmt: skip
    assert await next_is_sentinel(again, channel_layer, session.id)


async def test_cancel_shows_requested_then_stopped_and_the_run_ends_cancelled(
    connect: Any, user: Any, make_profile: Any, make_session: Any, pausing: Any
) -> None:
    model = pausing("never finished answer", 1)
    session, socket = await _chat_paused_mid_answer(
        connect, user, make_profile, make_session, model, "go"
    )
    await socket.until(lambda frame: bool(DELTA.search(frame)))
    await socket.send(type="cancel")
    frames = await socket.until(lambda frame: 'data-status="cancelled"' in frame)
    assert any('data-cancel-state="requested"' in frame for frame in frames)
    assert 'data-cancel-state="stopped"' in frames[-1]
    assert any('data-reply="accepted" data-action="cancel"' in frame for frame in frames)
    run = await Run.objects.aget()
    assert (run.status, run.cancel_state) == ("cancelled", "stopped")


async def test_staff_acting_on_another_users_idle_session_gets_an_explicit_rejection(
    connect: Any, user: Any, staff_user: Any, make_profile: Any, make_session: Any
) -> None:
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", staff_user)
    await socket.next()
    await socket.send(type="cancel")
    reply = await socket.next()
    assert 'data-reply="rejected" data-action="cancel"' in reply
    assert "No run is active" in reply
    action = await OperatorAction.objects.select_related("user").aget()
    assert (action.user, action.action, action.outcome) == (staff_user, "cancel", "rejected")


# -- group membership ----------------------------------------------------------------------------

GROUP_EXPIRY = 3  # seconds; the consumers re-join every group_expiry / 3 (at least every 1 s)


class RefreshWatchingLayer(EmbeddedChannelLayer):
    """The embedded layer scanning for expiry on every call, and telling when a socket re-joins."""

    cleanup_interval = 0.0

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.rejoined = asyncio.Event()

    async def group_add(self, group: str, channel: str) -> None:
        again = channel in self.groups.get(group, {})
        await super().group_add(group, channel)
        if again and group.startswith("session."):
            self.rejoined.set()


class LayerClock:
    """The wall clock channels' in-memory layer dates group memberships by, moved by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


@pytest.fixture
def layer_clock(settings: Any, monkeypatch: pytest.MonkeyPatch) -> LayerClock:
    """A layer with a short group_expiry whose clock the test moves (ask for it first)."""
    clock = LayerClock()
    monkeypatch.setattr(channels.layers, "time", clock)
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": f"{__name__}.RefreshWatchingLayer",
            "CONFIG": {"group_expiry": GROUP_EXPIRY},
        }
    }
    return clock


async def test_a_long_lived_socket_still_gets_frames_after_group_expiry(
    layer_clock: LayerClock,
    connect: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    assert isinstance(channel_layer, RefreshWatchingLayer)
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()  # the snapshot: the socket joined its group at layer_clock.now
    layer_clock.now += GROUP_EXPIRY - 1  # the first membership is still valid
    # The renewal must come before group_expiry has passed for real, too.
    await asyncio.wait_for(channel_layer.rejoined.wait(), GROUP_EXPIRY)
    layer_clock.now += 2  # past group_expiry since the join: only a renewed membership lives
    assert await next_is_sentinel(socket, channel_layer, session.id)


# -- the monitor -------------------------------------------------------------------------------


async def test_monitor_shows_a_run_live_then_moves_it_to_recent(
    connect: Any, user: Any, staff_user: Any, make_profile: Any, make_session: Any, pausing: Any
) -> None:
    model = pausing("a b c d", 1)
    profile = await make_profile(provider="pausing", provider_settings={"responses": ["-"]})
    session = await make_session(user, profile)
    monitor = await connect("/ws/monitor/", staff_user)
    tables = await monitor.next()
    assert '<tbody id="active-runs"' in tables and '<tbody id="recent-runs"' in tables
    assert 'data-testid="monitor-row"' not in tables

    chat = await connect(f"/ws/sessions/{session.id}/", user)
    await chat.next()
    await chat.send(type="message", text="go")
    await asyncio.wait_for(model.paused.wait(), TIMEOUT)
    run = await Run.objects.aget()
    added = await monitor.until(lambda frame: f'id="run-{run.request_id}"' in frame)
    assert added[-1].startswith('<tbody hx-swap-oob="beforeend:#active-runs">')
    assert ">alice<" in added[-1] and f'href="/sessions/{session.id}/"' in added[-1]

    model.resume.set()
    done = await monitor.until(lambda frame: 'data-status="completed"' in frame)
    assert done[-2] == f'<tr id="run-{run.request_id}" hx-swap-oob="delete"></tr>'
    assert done[-1].startswith('<tbody hx-swap-oob="afterbegin:#recent-runs">')


async def test_staff_approve_a_waiting_tool_call_from_the_monitor(
    connect: Any, user: Any, staff_user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(
        extensions=(("demo_tools", {}), ("tool_approval", {"tools": ["calculator"]}))
    )
    session = await make_session(user, profile)
    monitor = await connect("/ws/monitor/", staff_user)
    await monitor.next()
    chat = await connect(f"/ws/sessions/{session.id}/", user)
    await chat.next()
    await chat.send(type="message", text="what is 2 + 3?")
    waiting = await monitor.until(lambda frame: 'data-testid="approval-card"' in frame)
    [call_id] = re.findall(r'data-testid="approval-card" data-wait-id="([^"]+)"', waiting[-1])
    assert f'name="session" value="{session.id}"' in waiting[-1]
    chat_frames = await chat.until(lambda frame: 'data-testid="approval-card"' in frame)
    assert any('data-state="pending"' in frame or "calculator" in frame for frame in chat_frames)

    await monitor.send(type="approve", id=call_id, session=session.id)
    await monitor.until(lambda frame: 'data-reply="accepted" data-action="approve"' in frame)
    rest = await chat.until(lambda frame: 'data-status="completed"' in frame)
    assert any(f'id="tool-{call_id}"' in frame and 'data-state="ok"' in frame for frame in rest)
    assert (await assistant_contents(session.id))[-1] == "The result is 5."
    action = await OperatorAction.objects.select_related("user").aget(action="approve")
    assert (action.user, action.outcome, action.payload["id"]) == (staff_user, "accepted", call_id)


async def test_monitor_frames_must_name_a_known_session_and_cannot_chat(
    connect: Any, staff_user: Any
) -> None:
    monitor = await connect("/ws/monitor/", staff_user)
    await monitor.next()
    await monitor.send(type="approve", id="c1")
    assert 'data-error="invalid"' in await monitor.next()
    await monitor.send(type="approve", id="c1", session="nope")
    assert 'data-error="invalid"' in await monitor.next()
    await monitor.send(type="message", text="hi", session="nope")
    assert 'data-error="unknown_type"' in await monitor.next()
    assert await OperatorAction.objects.acount() == 0


async def test_owner_denies_a_tool_call_with_a_reason_and_the_card_shows_denied(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(
        extensions=(("demo_tools", {}), ("tool_approval", {"tools": ["calculator"]}))
    )
    session = await make_session(user, profile)
    chat = await connect(f"/ws/sessions/{session.id}/", user)
    await chat.next()
    await chat.send(type="message", text="what is 2 + 3?")
    waiting = await chat.until(lambda frame: 'data-testid="approval-card"' in frame)
    [call_id] = re.findall(r'data-testid="approval-card" data-wait-id="([^"]+)"', waiting[-1])
    await chat.send(type="deny", id=call_id, reason="not <today>")
    rest = await chat.until(lambda frame: 'data-status="completed"' in frame)
    assert any('data-reply="accepted" data-action="deny"' in frame for frame in rest)
    cards = [frame for frame in rest if f'id="tool-{call_id}"' in frame]
    card = cards[-1]  # the card as its result left it
    assert 'data-state="denied"' in card
    assert "not &lt;today&gt;" in card and "<today>" not in card
    assert 'data-testid="approval-card"' not in rest[-1]


async def test_steer_frame_reaches_the_active_run_and_shows_the_steering_message(
    connect: Any, user: Any, make_profile: Any, make_session: Any, pausing: Any
) -> None:
    model = pausing("first answer words", 1)
    profile = await make_profile(
        provider="pausing",
        provider_settings={"responses": ["-"]},
        extensions=(("steering", {}),),
    )
    session = await make_session(user, profile)
    chat = await connect(f"/ws/sessions/{session.id}/", user)
    await chat.next()
    await chat.send(type="message", text="go")
    await asyncio.wait_for(model.paused.wait(), TIMEOUT)
    await chat.until(lambda frame: 'data-testid="steer-hint"' in frame)
    await chat.send(type="steer", text="shorter please")
    reply = await chat.until(lambda frame: 'data-testid="control-reply"' in frame)
    assert 'data-reply="accepted" data-action="steer"' in reply[-1]
    model.resume.set()
    rest = await chat.until(lambda frame: 'data-status="completed"' in frame)
    steering = [f for f in rest if 'data-role="user"' in f and "shorter please" in f]
    assert len(steering) == 1


# -- streaming loss is detected: every delta carries where it starts -----------------------------


async def test_a_lost_delta_makes_the_page_take_a_fresh_snapshot_and_a_repeat_is_trimmed(
    connect: Any,
    manager: Any,
    channel_layer: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    pausing: Any,
) -> None:
    answer = "one two three four five six seven eight nine ten"
    model = pausing(answer, 3)
    session, socket = await _chat_paused_mid_answer(
        connect, user, make_profile, make_session, model, "count"
    )
    shown = ""
    while shown != "one two three ":
        shown += "".join(text for _, text in DELTA.findall(await socket.next()))
    snap = await manager.snapshot(session.id)
    assert snap.partial is not None and snap.partial.text == shown
    group = session_group(session.id)
    frame = {
        "type": "run.delta", "request_id": snap.run["request_id"], "kind": "text", "iteration": 1,
    }  # fmt: skip
    # A repeat of text the bubble shows, overlapping into new text: only the new part is shown.
    await channel_layer.group_send(
        group, {**frame, "seq": snap.seq + 1, "first_seq": snap.seq + 1, "offset": 8,
                "text": "three FOUR "},
    )  # fmt: skip
    [(_, added)] = DELTA.findall(await socket.next())
    assert added == "FOUR "
    # A delta that starts past what the page shows: one was lost, so the page is replaced
    # by a snapshot, whose bubble holds exactly the answer so far (a prefix of the final one).
    await channel_layer.group_send(
        group, {**frame, "seq": snap.seq + 3, "first_seq": snap.seq + 3, "offset": 40,
                "text": "nine "},
    )  # fmt: skip
    fresh = await socket.next()
    assert 'data-snapshot="1"' in fresh
    [(_, bubble)] = STREAM_TEXT.findall(fresh)
    assert html.unescape(bubble) == shown and "FOUR" not in fresh
    model.resume.set()
    rest = await socket.until(lambda f: 'data-status="completed"' in f)
    assert shown + "".join(text for f in rest for _, text in DELTA.findall(f)) == answer


async def test_a_snapshot_too_big_for_one_frame_goes_out_in_order_in_several(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    # Daphne closes a socket that sends a frame over 1 MiB; this transcript is 1.5 MiB.
    session = await make_session(user, await make_profile())
    long_text = "word " * 10_000  # 50 KB each
    await Message.objects.abulk_create(
        Message(session_id=session.id, seq=n, message_id=f"big-{n}", role="user",
                content=f"{n}: {long_text}")
        for n in range(1, 31)
    )  # fmt: skip
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    frames = [await socket.next()]
    assert 'data-snapshot="1"' in frames[0] and 'data-status="idle"' in frames[0]
    shown = re.findall(r'data-message-id="(big-\d+)"', frames[0])
    while len(shown) < 30:
        frame = await socket.next()
        assert frame.startswith('<div hx-swap-oob="beforeend:#transcript">')
        frames.append(frame)
        shown += re.findall(r'data-message-id="(big-\d+)"', frame)
    assert shown == [f"big-{n}" for n in range(1, 31)]
    assert len(frames) > 1 and all(len(f.encode()) < 1024 * 1024 for f in frames)
    await socket.send(type="message", text="still works")
    await socket.until(lambda frame: 'data-status="completed"' in frame)


# -- the quiet usage line under each finished answer --------------------------------------------

USAGE_LINE = re.compile(
    r'data-testid="answer-usage" data-request-id="([^"]+)">(?:<span[^>]*>[^<]*</span>)?([^<]*)</p>'
)


async def test_a_completed_answer_gets_its_usage_line_live_and_on_reconnect_once(
    connect: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    await ModelPrice.objects.acreate(
        provider="demo", model_pattern="*", input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
    )  # fmt: skip
    session = await make_session(user, await make_profile())
    socket = await connect(f"/ws/sessions/{session.id}/", user)
    await socket.next()
    await socket.send(type="message", text="hello there")
    frames = await socket.until(lambda frame: 'data-status="completed"' in frame)
    run = await Run.objects.aget()
    expected = f"{run.input_tokens + run.output_tokens:,} tokens · {format_cost(run.cost, 'USD')}"
    lines = [(i, m.groups()) for i, frame in enumerate(frames) for m in USAGE_LINE.finditer(frame)]
    assert [line for _, line in lines] == [(run.request_id, expected)]
    final_at = next(i for i, frame in enumerate(frames) if FINAL.search(frame))
    assert lines[0][0] > final_at  # it comes after the answer it belongs to
    assert 'hx-swap-oob="beforeend:#transcript"' in frames[lines[0][0]]

    again = await connect(f"/ws/sessions/{session.id}/", user)
    snapshot = await again.next()
    assert [m.groups() for m in USAGE_LINE.finditer(snapshot)] == [(run.request_id, expected)]
    assert snapshot.index("answer-usage") > FINAL.search(snapshot).start()


async def test_a_cancelled_run_gets_no_usage_line(
    connect: Any, user: Any, make_profile: Any, make_session: Any, pausing: Any
) -> None:
    model = pausing("one two three four", 2)
    session, socket = await _chat_paused_mid_answer(
        connect, user, make_profile, make_session, model, "go"
    )
    await socket.until(lambda frame: bool(DELTA.search(frame)))
    await socket.send(type="cancel")
    frames = await socket.until(lambda frame: 'data-status="cancelled"' in frame)
    assert not any(USAGE_LINE.search(frame) for frame in frames)
    again = await connect(f"/ws/sessions/{session.id}/", user)
    snapshot = await again.next()
    assert 'data-testid="run-notice"' in snapshot and not USAGE_LINE.search(snapshot)


TOTALS = re.compile(
    r'<tfoot id="active-totals" hx-swap-oob="true">.*?data-testid="active-totals"[^>]*>([^<]*)</td>'
)


async def test_monitor_totals_follow_the_active_set_live(
    connect: Any, user: Any, staff_user: Any, make_profile: Any, make_session: Any, pausing: Any
) -> None:
    model = pausing("a b c d", 1)
    profile = await make_profile(provider="pausing", provider_settings={"responses": ["-"]})
    session = await make_session(user, profile)
    monitor = await connect("/ws/monitor/", staff_user)
    tables = await monitor.next()
    assert TOTALS.search(tables).group(1) == "No active run."
    assert tables.index('id="active-runs"') < tables.index('id="active-totals"')

    chat = await connect(f"/ws/sessions/{session.id}/", user)
    await chat.next()
    await chat.send(type="message", text="go")
    await asyncio.wait_for(model.paused.wait(), TIMEOUT)
    active = await monitor.until(lambda frame: bool(TOTALS.search(frame)))
    assert TOTALS.search(active[-1]).group(1).startswith("1 active run · ")
    assert "no price set" in active[-1]

    model.resume.set()
    ended = await monitor.until(lambda frame: 'data-status="completed"' in frame)
    # The row's move to the recent table carries the totals without it.
    assert TOTALS.search(ended[-1]).group(1) == "No active run."


def _rows_of_a_tick(count: int, status: str = "running") -> list[dict[str, Any]]:
    return [
        {
            "request_id": f"r{i}",
            "session_id": f"s{i}",
            "session_title": f"chat {i} " + "x" * 200,
            "status": status,
            "phase": "generating",
            "usage": {"estimated": True, "label": "≈ 10 tokens", "total_tokens": 10},
            "elapsed": 1.0,
        }
        for i in range(count)
    ]


async def test_a_tick_of_many_rows_reaches_the_monitor_in_frames_within_the_limit(
    connect: Any, staff_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thousand rows in one frame passed Daphne's 1 MiB limit and cost the monitor its socket.
    from agents.hosting import MONITOR_GROUP
    from agents.web import rendering

    monkeypatch.setattr(rendering, "MAX_FRAME_BYTES", 8 * 1024)
    monitor = await connect("/ws/monitor/", staff_user)
    await monitor.next()
    layer = channels.layers.get_channel_layer()

    rows = _rows_of_a_tick(40)
    await layer.group_send(MONITOR_GROUP, {"type": "monitor.rows", "rows": rows})
    added = await monitor.until(lambda frame: bool(TOTALS.search(frame)))
    await layer.group_send(MONITOR_GROUP, {"type": "monitor.rows", "rows": rows})
    replaced = await monitor.until(lambda frame: 'id="run-r39"' in frame)

    for frames in (added, replaced):
        assert len(frames) > 1 and all(len(f.encode()) <= 8 * 1024 for f in frames)
        shown = [m for f in frames for m in re.findall(r'<tr id="run-(r\d+)"', f)]
        assert shown == [f"r{i}" for i in range(40)]  # every row once, in order
    assert all(f.startswith('<tbody hx-swap-oob="beforeend:#active-runs">') for f in added)
    assert all(f.startswith('<tr id="run-') for f in replaced)
    assert TOTALS.search(added[-1]).group(1).startswith("40 active runs")


def test_the_monitor_snapshot_of_many_runs_comes_in_frames_that_rebuild_both_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents.web import rendering

    monkeypatch.setattr(rendering, "MAX_FRAME_BYTES", 8 * 1024)
    active, recent = _rows_of_a_tick(30), _rows_of_a_tick(3, "completed")
    for row in recent:
        row["request_id"] = "done-" + row["request_id"]
    frames = rendering.monitor_tables(active, recent, '<tfoot id="active-totals"></tfoot>')

    assert len(frames) > 2 and all(len(f.encode()) <= 8 * 1024 for f in frames)
    joined = "".join(frames)
    assert joined.index('<tbody id="active-runs"') < joined.index("beforeend:#active-runs")
    assert joined.index("beforeend:#active-runs") < joined.index('<tbody id="recent-runs"')
    assert re.findall(r'<tr id="run-((?:done-)?r\d+)"', joined) == [
        *(f"r{i}" for i in range(30)),
        *(f"done-r{i}" for i in range(3)),
    ]
    assert frames[-1].endswith('<tfoot id="active-totals"></tfoot>')
    for frame in frames:  # every frame is table sections only (htmx drops a mix)
        assert re.fullmatch(r"\s*(<(tbody|tfoot)\b.*?</\2>\s*)+", frame, re.S), frame[:200]
