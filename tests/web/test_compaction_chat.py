"""Compact conversation from the chat socket: a compaction run, its divider, its effect."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.models import Message, ModelPrice, Run, RunKind, RunStatus
from agents.providers import registry
from agents.providers.registry import DemoSettings, ProviderSpec, ScriptedSettings
from agents.providers.scripted import ScriptedModel
from agents.runtime import SystemMessage
from agents.web.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)

APP = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
TIMEOUT = 10  # a safety net; every frame waited for is one a correct server sends promptly
HELD = {"responses": ["-"]}  # the provider key "held" ignores them (see the model fixture)
COMPACTION = ("summary_compaction", {"auto": "never", "keep_last_messages": 2})


def _session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


class Socket:
    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[str] = []

    async def until(self, needle: str) -> str:
        """Receive frames until one contains ``needle``; returns that frame."""
        while True:
            frame = await self.communicator.receive_from(timeout=TIMEOUT)
            self.frames.append(frame)
            if needle in frame:
                return frame

    async def send(self, **frame: Any) -> None:
        await self.communicator.send_to(text_data=json.dumps(frame))

    async def reply(self, action: str = "", **frame: Any) -> str:
        """Send a frame and return the reply line it gets (its action: the frame's type)."""
        await self.send(**frame)
        return await self.until(f'data-action="{action or frame["type"]}"')


@pytest.fixture
async def connect(manager: Any) -> AsyncIterator[Callable[..., Awaitable[Socket]]]:
    opened: list[WebsocketCommunicator] = []

    async def open_socket(session_id: str, user: Any, path: str = "") -> Socket:
        cookie = await sync_to_async(_session_cookie)(user)
        headers = [
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
        ]
        path = path or f"/ws/sessions/{session_id}/"
        communicator = WebsocketCommunicator(APP, path, headers=headers)
        opened.append(communicator)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        assert connected
        return Socket(communicator)

    yield open_socket
    for communicator in opened:
        try:
            await communicator.disconnect()
        except asyncio.CancelledError:
            pass  # a receive that timed out already cancelled the application


class HeldModel(ScriptedModel):
    """A ScriptedModel whose call number ``hold`` (1-based) waits for ``release``."""

    def __init__(self, steps: list[Any], hold: int = 0) -> None:
        super().__init__(steps)
        self.hold = hold
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        if self.calls + 1 == self.hold:
            self.holding.set()
            await self.release.wait()
        async for event in super().stream(request):
            yield event


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Callable[..., HeldModel]:
    """model(steps, hold=0) -> the model behind the provider key "held"."""

    def install(steps: list[Any], hold: int = 0) -> HeldModel:
        held = HeldModel(steps, hold)
        spec = ProviderSpec("held", "Held", ScriptedSettings, "test", lambda _n, _s: held)
        monkeypatch.setitem(registry.PROVIDERS, "held", spec)
        return held

    return install


async def _chat(socket: Socket, manager: Any, *texts: str) -> None:
    for text in texts:
        reply = await socket.reply(type="message", text=text)
        assert 'data-reply="accepted"' in reply
        await manager.wait_idle()


def _dialogue(request: Any) -> list[str]:
    return [m.content for m in request.messages if not isinstance(m, SystemMessage)]


async def _runs(session_id: str) -> list[Run]:
    return [r async for r in Run.objects.filter(session_id=session_id).order_by("created_at")]


async def test_compact_runs_a_compaction_and_the_next_request_holds_summary_and_kept_only(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    held = model(["A1", "A2", "Q1 was answered with A1.", "A3"])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    await ModelPrice.objects.acreate(
        provider="held", model_pattern="*", input_per_million=1, output_per_million=2
    )
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")

    reply = await socket.reply(type="compact")
    assert 'data-reply="accepted"' in reply and 'data-action="compact"' in reply
    divider = await socket.until('data-testid="compaction-divider"')
    assert "2 earlier messages summarized" in divider
    assert "Q1 was answered with A1." in divider
    await manager.wait_idle()

    compaction = (await _runs(session.id))[-1]
    assert compaction.kind == RunKind.COMPACTION
    assert compaction.status == RunStatus.COMPLETED
    assert compaction.input_tokens > 0 and compaction.cost is not None and compaction.cost > 0
    assert held.calls == 3

    await _chat(socket, manager, "Q3")
    assert _dialogue(held.requests[-1]) == [
        "Summary of the earlier conversation:\nQ1 was answered with A1.",
        "Q2",
        "A2",
        "Q3",
    ]
    # Nothing was deleted: the originals stay, marked as summarised.
    rows = [m async for m in Message.objects.filter(session_id=session.id).order_by("seq")]
    assert [r.content for r in rows if r.summarized_by_id is not None] == ["Q1", "A1"]


async def test_a_summary_by_its_own_model_is_priced_at_that_models_price(
    connect: Any,
    manager: Any,
    model: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model(["A1", "A2"])
    summariser = ScriptedModel(["Q1 was answered with A1."])
    spec = ProviderSpec("cheap", "Cheap", DemoSettings, "test", lambda _n, _s: summariser)
    monkeypatch.setitem(registry.PROVIDERS, "cheap", spec)
    own_model = ("summary_compaction", {**COMPACTION[1], "provider": "cheap", "model": "mini"})
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(own_model,))
    # The chat's model is dear, the summary model cheap: the summary costs the cheap price.
    await ModelPrice.objects.acreate(
        provider="held", model_pattern="*", input_per_million=1000, output_per_million=1000
    )
    await ModelPrice.objects.acreate(
        provider="cheap", model_pattern="mini", input_per_million=1, output_per_million=2
    )
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")

    await socket.reply(type="compact")
    await socket.until('data-testid="compaction-divider"')
    await manager.wait_idle()

    compaction = (await _runs(session.id))[-1]
    assert compaction.kind == RunKind.COMPACTION and summariser.calls == 1
    expected = (
        Decimal(compaction.input_tokens) * 1 + Decimal(compaction.output_tokens) * 2
    ) / Decimal(1_000_000)
    assert compaction.input_tokens > 0
    assert compaction.cost == expected


async def test_a_reconnecting_page_shows_the_divider_below_the_originals(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    model(["A1", "A2", "The summary."])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")
    await socket.reply(type="compact")
    await manager.wait_idle()

    again = await connect(session.id, user)
    snapshot = await again.until('id="transcript"')
    assert snapshot.index(">Q1<") < snapshot.index("A1") < snapshot.index("compaction-divider")
    assert snapshot.index("compaction-divider") < snapshot.index(">Q2<")
    assert "The summary." in snapshot


async def test_someone_elses_session_cannot_be_compacted(
    connect: Any,
    manager: Any,
    model: Any,
    user: Any,
    other_user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    model(["A1"])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    socket = await connect(session.id, other_user)
    output = await socket.communicator.receive_output(timeout=TIMEOUT)
    assert output == {"type": "websocket.close", "code": 4404}
    assert await _runs(session.id) == []


@pytest.mark.parametrize("policy", ["reject", "queue", "interrupt"])
async def test_compact_while_a_run_is_active_follows_the_double_texting_policy(
    policy: str,
    connect: Any,
    manager: Any,
    model: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    held = model(["A1", "A2", "The summary."], hold=2)
    profile = await make_profile(
        provider="held",
        provider_settings=HELD,
        # Keep one: an interrupted Q2 has no answer, and Q1 with A1 is still summarised.
        extensions=(("summary_compaction", {"auto": "never", "keep_last_messages": 1}),),
        double_texting=policy,
    )
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1")
    await socket.send(type="message", text="Q2")
    await asyncio.wait_for(held.holding.wait(), TIMEOUT)

    reply = await socket.reply(policy, type="compact")
    held.release.set()
    if policy != "reject":  # the compaction starts once the active run has ended
        await socket.until('data-testid="compaction-divider"')
    await manager.wait_idle()
    runs = await _runs(session.id)
    if policy == "reject":
        assert 'data-reply="rejected"' in reply
        assert [r.kind for r in runs] == [RunKind.ANSWER, RunKind.ANSWER]
    else:
        assert 'data-reply="accepted"' in reply
        assert ("compacted when" if policy == "queue" else "Cancelling") in reply
        assert [r.kind for r in runs] == [RunKind.ANSWER, RunKind.ANSWER, RunKind.COMPACTION]
        expected = RunStatus.COMPLETED if policy == "queue" else RunStatus.CANCELLED
        assert runs[1].status == expected
        assert runs[-1].status == RunStatus.COMPLETED


async def test_a_failed_summary_changes_nothing_and_the_chat_says_why(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    held = model(["A1", "A2", RuntimeError("provider is down"), "A3"])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")

    await socket.reply(type="compact")
    notice = await socket.until('data-testid="run-notice"')
    assert "not compacted" in notice and "provider is down" in notice
    await manager.wait_idle()
    compaction = (await _runs(session.id))[-1]
    assert compaction.kind == RunKind.COMPACTION and compaction.status == RunStatus.FAILED
    assert not await Message.objects.filter(summarized_by__isnull=False).aexists()

    await _chat(socket, manager, "Q3")
    assert _dialogue(held.requests[-1]) == ["Q1", "A1", "Q2", "A2", "Q3"]


async def test_a_short_conversation_is_not_compacted_and_the_chat_says_so(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    held = model(["A1"])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1")

    await socket.reply(type="compact")
    notice = await socket.until('data-testid="run-notice"')
    assert "Nothing to summarise yet" in notice
    assert held.calls == 1


async def test_a_profile_without_a_compaction_extension_says_so(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    model(["A1", "A2"])
    profile = await make_profile(provider="held", provider_settings=HELD)
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")

    await socket.reply(type="compact")
    notice = await socket.until('data-testid="run-notice"')
    assert "no compaction extension" in notice


def _get(user: Any, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


async def test_the_monitor_and_the_run_page_label_a_compaction_run_and_its_cost(
    connect: Any,
    manager: Any,
    model: Any,
    user: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    model(["A1", "A2", "The summary."])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    await ModelPrice.objects.acreate(
        provider="held", model_pattern="*", input_per_million=1000, output_per_million=1000
    )
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")
    await socket.reply(type="compact")
    await socket.until('data-testid="compaction-divider"')
    await manager.wait_idle()
    compaction, answer = (await _runs(session.id))[-1], (await _runs(session.id))[0]

    page = await sync_to_async(_get)(user, f"/runs/{compaction.request_id}/")
    assert 'data-testid="run-kind"' in page and "Compaction run" in page
    assert f'data-testid="run-cost">${compaction.cost.quantize(Decimal("0.0001"))}' in page
    answer_page = await sync_to_async(_get)(user, f"/runs/{answer.request_id}/")
    assert 'data-testid="run-kind"' not in answer_page

    monitor = await connect("", staff_user, "/ws/monitor/")
    tables = await monitor.until('data-testid="monitor-row"')
    row = tables[tables.index(f'data-request-id="{compaction.request_id}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-testid="run-kind"' in row
    assert f"${compaction.cost.quantize(Decimal('0.0001'))}" in row


async def test_a_compaction_can_be_cancelled_and_the_context_stays(
    connect: Any, manager: Any, model: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    held = model(["A1", "A2", "The summary.", "A3"], hold=3)
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    socket = await connect(session.id, user)
    await socket.until('id="transcript"')
    await _chat(socket, manager, "Q1", "Q2")
    await socket.reply(type="compact")
    await asyncio.wait_for(held.holding.wait(), TIMEOUT)

    reply = await socket.reply(type="cancel")
    assert 'data-reply="accepted"' in reply
    await socket.until("The run has stopped.")
    await manager.wait_idle()
    compaction = (await _runs(session.id))[-1]
    assert compaction.kind == RunKind.COMPACTION and compaction.status == RunStatus.CANCELLED
    assert not await Message.objects.filter(summarized_by__isnull=False).aexists()

    held.hold = 0
    await _chat(socket, manager, "Q3")
    assert _dialogue(held.requests[-1]) == ["Q1", "A1", "Q2", "A2", "Q3"]


async def test_staff_may_compact_someone_elses_session(
    connect: Any,
    manager: Any,
    model: Any,
    user: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
) -> None:
    model(["A1", "A2", "The summary."])
    profile = await make_profile(provider="held", provider_settings=HELD, extensions=(COMPACTION,))
    session = await make_session(user, profile)
    owner = await connect(session.id, user)
    await owner.until('id="transcript"')
    await _chat(owner, manager, "Q1", "Q2")

    staff = await connect(session.id, staff_user)
    await staff.until('id="transcript"')
    reply = await staff.reply(type="compact")
    assert 'data-reply="accepted"' in reply
    await owner.until('data-testid="compaction-divider"')  # every tab of the chat sees it
    await manager.wait_idle()
    compaction = (await _runs(session.id))[-1]
    assert compaction.kind == RunKind.COMPACTION and compaction.status == RunStatus.COMPLETED
    assert compaction.started_by_id == staff_user.pk
