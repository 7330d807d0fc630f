"""What every SDK adapter promises, run for each against a loopback server speaking its wire.

Streaming, the errors a person can act on, timeouts and closing the connection are the same
contract for every provider; only the bytes differ, and those come from ``adapters.py``.
Behaviour particular to one wire (how a conversation is converted, its own error events)
stays in that adapter's test module.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.providers.errors import ProviderError
from agents.runtime import ModelRequest, SystemMessage, ToolCall, UserMessage

from .adapters import Adapter
from .loopback import FakeServer, Reply, free_port
from .streams import collect, completed, texts

HELLO = ModelRequest(messages=(SystemMessage("Be brief."), UserMessage("Say hello")))


async def test_streamed_text_arrives_as_deltas_then_one_completed_response(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(adapter.answer("Hel", "lo, ", "world."))

    events = await collect(adapter.model(fake_server), HELLO)

    assert texts(events) == ["Hel", "lo, ", "world."]
    response = completed(events)
    assert response.message.content == "Hello, world."
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    [received] = fake_server.requests
    assert received.path == adapter.path
    assert received.body["stream"] is True


async def test_tool_call_arguments_split_across_chunks_are_assembled(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        adapter.tool_answer("call_1", "calculator", '{"expre', 'ssion": "6', ' * 7"}')
    )

    events = await collect(adapter.model(fake_server), HELLO)

    deltas = [event.tool_call_delta for event in events if event.kind == "tool_call"]
    assert (deltas[0].index, deltas[0].id, deltas[0].name) == (0, "call_1", "calculator")
    assert "".join(delta.arguments for delta in deltas) == '{"expression": "6 * 7"}'
    response = completed(events)
    assert response.message.tool_calls == (
        ToolCall("call_1", "calculator", {"expression": "6 * 7"}),
    )
    assert response.finish_reason == "tool_calls"


async def test_reasoning_streams_as_reasoning_deltas(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(adapter.reasoning_answer(["The user wants ", "a greeting."], "Hello!"))

    events = await collect(adapter.model(fake_server), HELLO)

    reasoning = [event.delta for event in events if event.kind == "reasoning"]
    assert reasoning == ["The user wants ", "a greeting."]
    response = completed(events)
    assert response.message.reasoning == "The user wants a greeting."
    assert response.message.content == "Hello!"


async def test_the_key_is_read_from_the_named_variable_at_call_time(
    adapter: Adapter, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = adapter.model(fake_server, api_key_env="TEAM_MODEL_TOKEN")
    fake_server.script(adapter.answer("a"), adapter.answer("b"))

    monkeypatch.setenv("TEAM_MODEL_TOKEN", "first")
    await collect(model, HELLO)
    monkeypatch.setenv("TEAM_MODEL_TOKEN", "second")
    await collect(model, HELLO)

    sent = [request.headers["authorization"] for request in fake_server.requests]
    assert sent == ["Bearer first", "Bearer second"]


async def test_a_self_hosted_server_without_a_key_gets_a_placeholder(
    adapter: Adapter, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(adapter.key_env)
    fake_server.script(adapter.answer("Hi"))

    await collect(adapter.model(fake_server), HELLO)

    assert fake_server.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_the_hosted_provider_without_a_key_is_a_config_error_naming_the_variable(
    adapter: Adapter,
) -> None:
    model = adapter.build(None, api_key_env="MY_MODEL_KEY")

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert (caught.value.kind, caught.value.retryable) == ("config", False)
    assert "MY_MODEL_KEY" in str(caught.value)


async def test_a_rejected_key_is_an_auth_error_that_does_not_reveal_the_key(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        adapter.error(401, f"Incorrect API key provided: {adapter.key}.", type=adapter.auth_type)
    )

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server, max_retries=2), HELLO)

    error = caught.value
    assert (error.kind, error.status, error.provider, error.retryable) == (
        "auth",
        401,
        adapter.name,
        False,
    )
    message = str(error)
    assert adapter.base_url(fake_server) in message
    assert adapter.key_env in message
    assert adapter.key not in message
    assert adapter.key[:12] not in message
    assert len(fake_server.requests) == 1  # a wrong key is not retried


async def test_an_unknown_model_is_a_not_found_error_naming_the_model(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        adapter.error(404, "The model `test-model` does not exist.", type=adapter.not_found_type)
    )

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server), HELLO)

    assert (caught.value.kind, caught.value.status) == ("not_found", 404)
    assert "'test-model'" in str(caught.value)
    assert "does not exist" in str(caught.value)


async def test_a_rate_limit_is_retried_with_the_servers_wait_then_reported(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    limited = {"retry-after-ms": "1"}
    fake_server.script(
        *(adapter.error(429, "Slow down.", type="rate_limit_error", headers=limited),) * 2
    )
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server, max_retries=1), HELLO)

    elapsed = time.monotonic() - started
    error = caught.value
    assert (error.kind, error.status, error.retryable) == ("rate_limited", 429, True)
    assert "1 retry" in str(error)
    assert "Slow down." in str(error)
    assert len(fake_server.requests) == 2
    assert fake_server.requests[1].headers["x-stainless-retry-count"] == "1"
    # The SDK's own first backoff is at least 0.375 s; 1 ms means it honoured the header.
    assert elapsed < 0.35


async def test_a_rate_limit_followed_by_success_answers_normally(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        adapter.error(429, "Slow down.", type="rate_limit_error", headers={"retry-after-ms": "1"}),
        adapter.answer("Fine."),
    )

    response = completed(await collect(adapter.model(fake_server, max_retries=1), HELLO))

    assert response.message.content == "Fine."
    assert len(fake_server.requests) == 2


async def test_server_errors_are_retried_then_reported(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    failing = {"retry-after-ms": "1"}
    fake_server.script(
        *(adapter.error(503, "Overloaded.", type=adapter.server_type, headers=failing),) * 2
    )

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server, max_retries=1), HELLO)

    assert (caught.value.kind, caught.value.status, caught.value.retryable) == ("server", 503, True)
    assert "after 1 retry" in str(caught.value)
    assert len(fake_server.requests) == 2


async def test_a_server_that_never_answers_times_out(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(stall_before_headers=True))

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server, timeout=0.5), HELLO)

    assert (caught.value.kind, caught.value.retryable) == ("timeout", True)
    assert "0.5 s" in str(caught.value)


async def test_a_stream_that_goes_silent_mid_answer_times_out(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(events=adapter.opening("Hel"), end="stall"))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in adapter.model(fake_server, timeout=0.5).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["Hel"]
    assert caught.value.kind == "timeout"
    assert "stopped sending" in str(caught.value)


async def test_a_stream_dropped_mid_answer_is_reported_as_dropped(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(
        Reply(events=[*adapter.opening("One "), adapter.more_text("two ")], end="drop")
    )
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in adapter.model(fake_server).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["One ", "two "]
    assert (caught.value.kind, caught.value.retryable) == ("stream_dropped", True)
    assert "dropped in the middle of the answer" in str(caught.value)


async def test_a_stream_that_ends_without_its_finish_marker_is_incomplete(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(events=adapter.opening("Half")))

    with pytest.raises(ProviderError) as caught:
        await collect(adapter.model(fake_server), HELLO)

    assert caught.value.kind == "stream_dropped"
    assert "before it was complete" in str(caught.value)


async def test_an_unreachable_server_is_a_connection_error(adapter: Adapter) -> None:
    url = f"http://127.0.0.1:{free_port()}{adapter.url_suffix}"
    model = adapter.build(url, max_retries=0, timeout=2)

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert caught.value.kind == "connection"
    assert url in str(caught.value)


async def test_cancelling_a_stream_closes_the_http_connection(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(events=adapter.opening("Thinking"), end="stall"))
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in adapter.model(fake_server, timeout=30).stream(HELLO):
            if event.kind == "text":
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_closing_a_stream_early_closes_the_http_connection(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(Reply(events=adapter.opening("Thinking"), end="stall"))
    stream = adapter.model(fake_server, timeout=30).stream(HELLO)

    first = await asyncio.wait_for(anext(stream), 5)
    await stream.aclose()

    assert first.delta == "Thinking"
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_calls_on_one_event_loop_reuse_one_connection(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(adapter.answer("first"), adapter.answer("second"))
    model = adapter.model(fake_server)

    await collect(model, HELLO)
    await collect(model, HELLO)

    first, second = fake_server.requests
    assert first.client_port == second.client_port  # no new connection, no new handshake


async def test_concurrent_calls_on_one_event_loop_share_the_client(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(adapter.answer("same"), adapter.answer("same"))
    model = adapter.model(fake_server)

    answers = await asyncio.gather(collect(model, HELLO), collect(model, HELLO))

    assert [completed(events).message.content for events in answers] == ["same", "same"]


def test_each_event_loop_gets_its_own_client_closed_when_that_loop_ends(
    adapter: Adapter, fake_server: FakeServer
) -> None:
    fake_server.script(adapter.answer("one loop"), adapter.answer("another loop"))
    model = adapter.model(fake_server)

    asyncio.run(collect(model, HELLO))

    first = fake_server.requests[0].client_port
    # Bounded wait for the server's thread; an unclosed client would hold the connection.
    assert fake_server.connection_closed.wait(2)
    assert fake_server.closed_by_client == [first]

    asyncio.run(collect(model, HELLO))

    assert fake_server.requests[1].client_port != first
