"""A provider failure ends the run with a clear message on the chat and the monitor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.layers import get_channel_layer

from agents.hosting import MONITOR_GROUP, get_run_manager, session_group
from agents.models import AgentProfile, ChatSession, Message, Run

from .conftest import FakeServer, Reply, anthropic_error, openai_error, openai_text

pytestmark = pytest.mark.django_db(transaction=True)


async def _profile(provider: str, url: str, **settings: Any) -> AgentProfile:
    return await AgentProfile.objects.acreate(
        name=f"{provider} profile",
        slug=f"{provider}-profile",
        provider=provider,
        model_name="test-model",
        provider_settings={
            "base_url": url,
            "api_key_env": "ZETT_TEST_PROVIDER_KEY",
            "max_retries": 0,
            "timeout": 5,
            **settings,
        },
    )


async def _run_until_finished(
    profile: AgentProfile, owner: Any, text: str = "hello"
) -> tuple[dict[str, Any], dict[str, Any], Run]:
    """Send one message; return the chat's run.finished frame, the monitor's last row, the run."""
    session = await ChatSession.objects.acreate(owner=owner, profile=profile)
    layer = get_channel_layer()
    chat = await layer.new_channel()
    monitor = await layer.new_channel()
    await layer.group_add(session_group(session.id), chat)
    await layer.group_add(MONITOR_GROUP, monitor)
    manager = get_run_manager()
    reply = await manager.submit_message(session.id, owner, text)
    assert reply.accepted, reply
    finished = None
    while finished is None:
        frame = await asyncio.wait_for(layer.receive(chat), 15)
        if frame["type"] == "run.finished":
            finished = frame
    row = None
    while row is None or row["status"] not in ("failed", "completed"):
        frame = await asyncio.wait_for(layer.receive(monitor), 15)
        for candidate in frame["rows"]:
            if candidate["request_id"] == reply.request_id:
                row = candidate
    run = await Run.objects.aget(request_id=reply.request_id)
    return finished["run"], row, run


@pytest.fixture
async def owner(user: Any) -> AsyncIterator[Any]:
    """The session owner; the run manager of the test's loop is closed afterwards."""
    yield user
    await get_run_manager().close()


async def test_rejected_api_key_fails_the_run_with_a_clear_message(
    fake_server: FakeServer, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZETT_TEST_PROVIDER_KEY", "sk-very-secret")
    fake_server.replies.append(openai_error(401, "Incorrect API key provided", type="auth"))
    profile = await _profile("openai", f"{fake_server.url}/v1")
    chat_row, monitor_row, run = await _run_until_finished(profile, owner)
    assert run.status == "failed"
    assert "401" in run.error and "ZETT_TEST_PROVIDER_KEY" in run.error
    assert "sk-very-secret" not in run.error
    assert chat_row["error"] == run.error
    assert monitor_row["error"] == run.error and monitor_row["status"] == "failed"


async def test_unknown_model_fails_the_run_naming_the_model(
    fake_server: FakeServer, owner: Any
) -> None:
    fake_server.replies.append(anthropic_error(404, "model: test-model", type="not_found_error"))
    profile = await _profile("anthropic", fake_server.url)
    chat_row, _, run = await _run_until_finished(profile, owner)
    assert run.status == "failed"
    assert "test-model" in run.error
    assert chat_row["status"] == "failed"


async def test_rate_limit_after_retries_fails_the_run(fake_server: FakeServer, owner: Any) -> None:
    for _ in range(2):
        fake_server.replies.append(
            openai_error(429, "Slow down", type="rate_limit", headers={"retry-after-ms": "1"})
        )
    profile = await _profile("openai", f"{fake_server.url}/v1", max_retries=1)
    _, _, run = await _run_until_finished(profile, owner)
    assert run.status == "failed"
    assert "429" in run.error or "rate" in run.error.lower()
    assert len(fake_server.requests) == 2


async def test_dropped_stream_fails_the_run_and_keeps_the_message_and_the_partial_answer(
    fake_server: FakeServer, owner: Any
) -> None:
    dropped = openai_text("Hello", " there")
    fake_server.replies.append(Reply(events=dropped.events[:2], end="drop"))
    profile = await _profile("openai", f"{fake_server.url}/v1")
    _, _, run = await _run_until_finished(profile, owner, "keep me")
    assert run.status == "failed"
    assert run.error
    rows = Message.objects.filter(session_id=run.session_id).order_by("seq")
    contents = [(m.role, m.content, m.include_in_messages, m.attributes) async for m in rows]
    # What streamed before the drop is kept and marked, but is not the model's context.
    assert contents[0][:2] == ("user", "keep me")
    assert contents[1] == (
        "assistant",
        "Hello",
        False,
        {"partial": True, "stopped": "failed", "by": ""},
    )
    assert len(contents) == 2


async def test_timeout_fails_the_run(fake_server: FakeServer, owner: Any) -> None:
    fake_server.replies.append(Reply(stall_before_headers=True))
    profile = await _profile("openai", f"{fake_server.url}/v1", timeout=0.5)
    _, _, run = await _run_until_finished(profile, owner)
    assert run.status == "failed"
    assert "time" in run.error.lower()


async def test_one_failing_session_does_not_touch_another(
    fake_server: FakeServer, owner: Any
) -> None:
    fake_server.replies.append(openai_error(500, "boom", type="server_error"))
    broken = await _profile("openai", f"{fake_server.url}/v1")
    healthy = await AgentProfile.objects.acreate(
        name="demo", slug="demo-ok", provider="demo", provider_settings={"delay": 0}
    )
    results = await asyncio.gather(
        _run_until_finished(broken, owner), _run_until_finished(healthy, owner)
    )
    assert results[0][2].status == "failed"
    assert results[1][2].status == "completed"
