"""A model call ends on time: keep-alives do not count as data, and every call has a deadline.

Run for both SDK adapters against a loopback server speaking each one's wire format.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.providers.errors import ProviderError
from agents.runtime import ModelRequest, UserMessage

from .adapters import ANTHROPIC, Adapter
from .loopback import FakeServer, Reply
from .streams import collect, texts
from .wire import sse

HELLO = ModelRequest(messages=(UserMessage("Say hello"),))
KEEP_ALIVE = b": keep-alive\n\n"


async def _consume(model: object, seen: list[str]) -> None:
    async def run() -> None:
        async for event in model.stream(HELLO):  # type: ignore[attr-defined]
            seen.append(event.delta)

    # A safety net only: without the limits under test this would run for the server's 10 s.
    await asyncio.wait_for(run(), 8)


async def test_a_stream_of_keep_alive_comments_alone_times_out(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(events=[KEEP_ALIVE], end="repeat", repeat=KEEP_ALIVE, every=0.05))
    model = adapter.model(fake_server, timeout=0.5, deadline=30)

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    error = caught.value
    assert (error.kind, error.provider, error.retryable) == ("timeout", adapter.name, True)
    assert "no data for 0.5 s" in str(error)
    assert fake_server.repeats_sent >= 3  # bytes kept flowing the whole time
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_keep_alives_after_part_of_an_answer_time_out_and_keep_the_part(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        Reply(events=adapter.opening("Hel"), end="repeat", repeat=KEEP_ALIVE, every=0.05)
    )
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        await _consume(adapter.model(fake_server, timeout=0.5, deadline=30), seen)

    assert seen == ["Hel"]
    assert caught.value.kind == "timeout"
    assert "stopped sending the answer" in str(caught.value)
    assert fake_server.repeats_sent >= 3


async def test_anthropic_pings_alone_do_not_keep_a_call_alive(
    fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ANTHROPIC.key_env, ANTHROPIC.key)
    ping = sse({"type": "ping"}, "ping")
    fake_server.script(Reply(events=ANTHROPIC.opening("Hel"), end="repeat", repeat=ping))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        await _consume(ANTHROPIC.model(fake_server, timeout=0.5, deadline=30), seen)

    assert seen == ["Hel"]
    assert caught.value.kind == "timeout"
    assert fake_server.repeats_sent >= 3


async def test_an_answer_trickling_past_the_deadline_is_stopped_at_the_deadline(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        Reply(events=adapter.opening("a"), end="repeat", repeat=adapter.more_text("."), every=0.05)
    )
    seen: list[str] = []
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await _consume(adapter.model(fake_server, timeout=0.5, deadline=1.5), seen)

    elapsed = time.monotonic() - started
    error = caught.value
    assert (error.kind, error.provider) == ("timeout", adapter.name)
    assert "within 1.5 s, the deadline for one model call" in str(error)
    # Data arrived far more often than the idle timeout all along: only the deadline ended it.
    assert len(seen) > 10
    assert 1.5 <= elapsed < 5
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_the_deadline_includes_the_sdks_retries(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    wait = {"retry-after-ms": "700", "x-should-retry": "true"}
    fake_server.script(
        *(adapter.error(503, "Overloaded.", type=adapter.server_type, headers=wait),) * 4
    )
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server, timeout=0.5, deadline=1.0, max_retries=3), HELLO)

    assert caught.value.kind == "timeout"
    assert "the deadline for one model call" in str(caught.value)
    # Without the deadline all four attempts would run (over 2 s) and end as a server error.
    assert len(fake_server.requests) < 4
    assert time.monotonic() - started < 2


async def test_retries_longer_than_the_timeout_are_not_counted_as_silence(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    wait = {"retry-after-ms": "700"}
    fake_server.script(
        adapter.error(429, "Slow down.", type="rate_limit_error", headers=wait),
        adapter.answer("Fine."),
    )
    model = adapter.model(fake_server, timeout=0.5, deadline=30, max_retries=1)

    events = await collect(model, HELLO)

    assert texts(events) == ["Fine."]
    assert len(fake_server.requests) == 2


async def test_keep_alives_between_data_events_do_no_harm(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    reply = adapter.answer("Hel", "lo")
    reply.events = [frame for event in reply.events for frame in (KEEP_ALIVE, event)]
    fake_server.script(reply)

    events = await collect(adapter.model(fake_server, timeout=0.5, deadline=30), HELLO)

    assert texts(events) == ["Hel", "lo"]
    assert events[-1].response.message.content == "Hello"
