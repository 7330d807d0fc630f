"""AnthropicMessagesModel against a loopback server speaking Messages SSE, via the real SDK."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.providers.anthropic_messages import AnthropicMessagesModel
from agents.providers.errors import ProviderError
from agents.runtime import (
    AssistantMessage,
    ModelRequest,
    ServerToolDefinition,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)

from .conftest import (
    FakeServer,
    Reply,
    anthropic_error,
    anthropic_message_end,
    anthropic_message_start,
    anthropic_stream,
    anthropic_text_block,
    anthropic_thinking_block,
    anthropic_tool_block,
    collect,
    completed,
    free_port,
    sse,
    texts,
)

KEY = "sk-ant-test-secret-0123456789"
HELLO = ModelRequest(messages=(SystemMessage("Be brief."), UserMessage("Say hello")))


def model_for(server: FakeServer, **options: object) -> AnthropicMessagesModel:
    options.setdefault("max_retries", 0)
    return AnthropicMessagesModel("claude-test", base_url=server.url, **options)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


async def test_streamed_text_arrives_as_deltas_then_one_completed_response(
    fake_server: FakeServer,
) -> None:
    fake_server.script(anthropic_stream(anthropic_text_block(0, "Hel", "lo, ", "world.")))

    events = await collect(model_for(fake_server), HELLO)

    assert texts(events) == ["Hel", "lo, ", "world."]
    response = completed(events)
    assert response.message.content == "Hello, world."
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (25, 9)


async def test_cached_prompt_tokens_count_as_input(fake_server: FakeServer) -> None:
    frames = [anthropic_message_start(5, cache_read=100), *anthropic_text_block(0, "Hi")]
    fake_server.script(Reply(events=frames + anthropic_message_end("end_turn", 3)))

    response = completed(await collect(model_for(fake_server), HELLO))

    assert (response.usage.input_tokens, response.usage.output_tokens) == (105, 3)


async def test_request_carries_system_prompt_turns_tool_results_and_tools(
    fake_server: FakeServer,
) -> None:
    fake_server.script(anthropic_stream(anthropic_text_block(0, "ok")))
    definition = ToolDefinition(
        "calculator",
        "Evaluate arithmetic.",
        {"type": "object", "properties": {"expression": {"type": "string"}}},
    )
    request = ModelRequest(
        messages=(
            SystemMessage("You are terse."),
            SystemMessage("Answer in English."),
            UserMessage("What are 6 * 7 and the time?"),
            AssistantMessage(
                "Two tools.",
                tool_calls=(
                    ToolCall("toolu_a", "calculator", {"expression": "6 * 7"}),
                    ToolCall("toolu_b", "clock", {}),
                ),
            ),
            ToolMessage("toolu_a", "calculator", "42"),
            ToolMessage("toolu_b", "clock", "unknown time zone", is_error=True),
            UserMessage("Also, be quick."),
        ),
        tools=(definition,),
        server_tools=(
            ServerToolDefinition("web_search_20250305", {"name": "web_search", "max_uses": 2}),
        ),
    )

    await collect(model_for(fake_server, max_tokens=512, temperature=0.2), request)

    [received] = fake_server.requests
    assert received.path == "/v1/messages"
    assert received.headers["authorization"] == f"Bearer {KEY}"  # how this SDK sends the key
    assert "anthropic-version" in received.headers
    body = received.body
    assert body["model"] == "claude-test"
    assert body["stream"] is True
    assert body["max_tokens"] == 512
    assert body["temperature"] == 0.2
    assert body["system"] == "You are terse.\n\nAnswer in English."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What are 6 * 7 and the time?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Two tools."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "calculator",
                    "input": {"expression": "6 * 7"},
                },
                {"type": "tool_use", "id": "toolu_b", "name": "clock", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "42"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "unknown time zone",
                    "is_error": True,
                },
                {"type": "text", "text": "Also, be quick."},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "input_schema": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
            },
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
    ]


async def test_tool_use_input_split_across_deltas_is_assembled(fake_server: FakeServer) -> None:
    fake_server.script(
        anthropic_stream(
            anthropic_tool_block(0, "toolu_1", "calculator", '{"expre', 'ssion": "6', ' * 7"}'),
            stop_reason="tool_use",
        )
    )

    events = await collect(model_for(fake_server), HELLO)

    deltas = [event.tool_call_delta for event in events if event.kind == "tool_call"]
    assert (deltas[0].index, deltas[0].id, deltas[0].name) == (0, "toolu_1", "calculator")
    assert "".join(d.arguments for d in deltas) == '{"expression": "6 * 7"}'
    response = completed(events)
    assert response.message.tool_calls == (
        ToolCall("toolu_1", "calculator", {"expression": "6 * 7"}),
    )
    assert response.finish_reason == "tool_calls"


async def test_two_tool_calls_after_text_are_numbered_in_order(fake_server: FakeServer) -> None:
    fake_server.script(
        anthropic_stream(
            anthropic_text_block(0, "Checking ", "both."),
            anthropic_tool_block(1, "toolu_x", "calculator", '{"expression": ', '"1 + 1"}'),
            anthropic_tool_block(2, "toolu_y", "clock", ""),
            stop_reason="tool_use",
        )
    )

    events = await collect(model_for(fake_server), HELLO)

    indices = {event.tool_call_delta.index for event in events if event.kind == "tool_call"}
    assert indices == {0, 1}
    response = completed(events)
    assert response.message.content == "Checking both."
    assert response.message.tool_calls == (
        ToolCall("toolu_x", "calculator", {"expression": "1 + 1"}),
        ToolCall("toolu_y", "clock", {}),
    )


async def test_thinking_streams_as_reasoning_deltas(fake_server: FakeServer) -> None:
    fake_server.script(
        anthropic_stream(
            anthropic_thinking_block(0, "The user wants ", "a greeting."),
            anthropic_text_block(1, "Hello!"),
        )
    )

    events = await collect(model_for(fake_server), HELLO)

    assert [e.delta for e in events if e.kind == "reasoning"] == ["The user wants ", "a greeting."]
    response = completed(events)
    assert response.message.reasoning == "The user wants a greeting."
    assert response.message.content == "Hello!"


async def test_max_tokens_stop_is_reported_as_length(fake_server: FakeServer) -> None:
    fake_server.script(anthropic_stream(anthropic_text_block(0, "Cut"), stop_reason="max_tokens"))

    response = completed(await collect(model_for(fake_server), HELLO))

    assert response.finish_reason == "length"


async def test_anthropic_without_a_key_is_a_config_error_naming_the_variable() -> None:
    model = AnthropicMessagesModel("claude-test", api_key_env="MY_ANTHROPIC_KEY")

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert caught.value.kind == "config"
    assert "MY_ANTHROPIC_KEY" in str(caught.value)


async def test_rejected_key_is_an_auth_error_that_does_not_reveal_the_key(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        anthropic_error(401, f"invalid x-api-key {KEY}", type="authentication_error")
    )

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, max_retries=2), HELLO)

    error = caught.value
    assert (error.kind, error.status, error.provider, error.retryable) == (
        "auth",
        401,
        "anthropic",
        False,
    )
    assert "ANTHROPIC_API_KEY" in str(error)
    assert fake_server.url in str(error)
    assert KEY not in str(error)
    assert len(fake_server.requests) == 1


async def test_unknown_model_is_a_not_found_error_naming_the_model(
    fake_server: FakeServer,
) -> None:
    fake_server.script(anthropic_error(404, "model: claude-test", type="not_found_error"))

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server), HELLO)

    assert (caught.value.kind, caught.value.status) == ("not_found", 404)
    assert "'claude-test'" in str(caught.value)


async def test_rate_limit_is_retried_with_the_servers_wait_then_reported(
    fake_server: FakeServer,
) -> None:
    limited = {"retry-after-ms": "1"}
    fake_server.script(
        anthropic_error(429, "Rate limited.", type="rate_limit_error", headers=limited),
        anthropic_error(429, "Rate limited.", type="rate_limit_error", headers=limited),
    )
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, max_retries=1), HELLO)

    elapsed = time.monotonic() - started
    assert (caught.value.kind, caught.value.status, caught.value.retryable) == (
        "rate_limited",
        429,
        True,
    )
    assert "Rate limited." in str(caught.value)
    assert len(fake_server.requests) == 2
    assert fake_server.requests[1].headers["x-stainless-retry-count"] == "1"
    # The SDK's own first backoff is at least 0.375 s; 1 ms means it honoured the header.
    assert elapsed < 0.35


async def test_a_server_that_never_answers_times_out(fake_server: FakeServer) -> None:
    fake_server.script(Reply(stall_before_headers=True))

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, timeout=0.5), HELLO)

    assert caught.value.kind == "timeout"
    assert "0.5 s" in str(caught.value)


async def test_a_stream_that_goes_silent_mid_answer_times_out(fake_server: FakeServer) -> None:
    frames = [anthropic_message_start(), *anthropic_text_block(0, "Hel")]
    fake_server.script(Reply(events=frames, end="stall"))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in model_for(fake_server, timeout=0.5).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["Hel"]
    assert caught.value.kind == "timeout"


async def test_a_stream_dropped_mid_answer_is_reported_as_dropped(
    fake_server: FakeServer,
) -> None:
    frames = [anthropic_message_start(), *anthropic_text_block(0, "One ", "two ")[:-1]]
    fake_server.script(Reply(events=frames, end="drop"))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in model_for(fake_server).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["One ", "two "]
    assert caught.value.kind == "stream_dropped"
    assert "dropped in the middle of the answer" in str(caught.value)


async def test_a_stream_that_ends_without_message_stop_is_incomplete(
    fake_server: FakeServer,
) -> None:
    fake_server.script(Reply(events=[anthropic_message_start(), *anthropic_text_block(0, "Half")]))

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server), HELLO)

    assert caught.value.kind == "stream_dropped"


async def test_an_error_event_inside_the_stream_is_a_retryable_provider_error(
    fake_server: FakeServer,
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    frames = [anthropic_message_start(), *anthropic_text_block(0, "Hel")[:2]]
    fake_server.script(Reply(events=[*frames, sse(overloaded, "error")]))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in model_for(fake_server).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["Hel"]
    error = caught.value
    assert (error.kind, error.retryable, error.provider) == ("server", True, "anthropic")
    assert "overloaded_error" in str(error)
    assert "Overloaded" in str(error)


async def test_an_unreachable_server_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    model = AnthropicMessagesModel("claude-test", base_url=url, max_retries=0, timeout=2)

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert caught.value.kind == "connection"
    assert url in str(caught.value)


async def test_closing_a_stream_early_closes_the_http_connection(fake_server: FakeServer) -> None:
    frames = [anthropic_message_start(), *anthropic_text_block(0, "Thinking")[:2]]
    fake_server.script(Reply(events=frames, end="stall"))
    stream = model_for(fake_server, timeout=30).stream(HELLO)

    first = await asyncio.wait_for(anext(stream), 5)
    await stream.aclose()

    assert first.delta == "Thinking"
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_cancelling_a_stream_closes_the_http_connection(fake_server: FakeServer) -> None:
    frames = [anthropic_message_start(), *anthropic_text_block(0, "Thinking")[:2]]
    fake_server.script(Reply(events=frames, end="stall"))
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in model_for(fake_server, timeout=30).stream(HELLO):
            if event.kind == "text":
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)
