"""OpenAIChatModel against a loopback server speaking Chat Completions SSE, via the real SDK."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.extensions.demo_tools import calculator
from agents.providers.errors import ProviderError
from agents.providers.openai_chat import OpenAIChatModel, to_chat_messages
from agents.runtime import (
    Agent,
    AgentEventType,
    AssistantMessage,
    ModelRequest,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)

from .conftest import (
    FakeServer,
    Reply,
    collect,
    completed,
    free_port,
    openai_chunk,
    openai_error,
    openai_stream,
    openai_text,
    openai_tool_delta,
    sse,
    texts,
)

KEY = "sk-test-secret-0123456789"
HELLO = ModelRequest(messages=(SystemMessage("Be brief."), UserMessage("Say hello")))


def model_for(server: FakeServer, **options: object) -> OpenAIChatModel:
    options.setdefault("max_retries", 0)
    return OpenAIChatModel("test-model", base_url=f"{server.url}/v1", **options)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


async def test_streamed_text_arrives_as_deltas_then_one_completed_response(
    fake_server: FakeServer,
) -> None:
    fake_server.script(openai_text("Hel", "lo, ", "world."))

    events = await collect(model_for(fake_server), HELLO)

    assert texts(events) == ["Hel", "lo, ", "world."]
    response = completed(events)
    assert response.message.content == "Hello, world."
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 7)


async def test_request_carries_the_converted_conversation_and_tools(
    fake_server: FakeServer,
) -> None:
    fake_server.script(openai_text("ok"))
    definition = ToolDefinition(
        "calculator",
        "Evaluate arithmetic.",
        {"type": "object", "properties": {"expression": {"type": "string"}}},
    )
    request = ModelRequest(
        messages=(
            SystemMessage("You are terse."),
            UserMessage("What is 6 * 7?"),
            AssistantMessage(
                "", tool_calls=(ToolCall("call_a", "calculator", {"expression": "6 * 7"}),)
            ),
            ToolMessage("call_a", "calculator", "42"),
            AssistantMessage("It is 42."),
            UserMessage("Thanks"),
        ),
        tools=(definition,),
    )
    model = model_for(fake_server, temperature=0.3, max_tokens=64, extra_headers={"X-Team": "zett"})

    await collect(model, request)

    [received] = fake_server.requests
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["x-team"] == "zett"
    body = received.body
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 64  # a self-hosted server: the widely supported name
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 6 * 7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "6 * 7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": "Evaluate arithmetic.",
                "parameters": {
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                },
            },
        }
    ]


async def test_tool_call_arguments_split_across_chunks_are_assembled(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_stream(
            openai_tool_delta(0, id="call_1", name="calculator"),
            openai_tool_delta(0, arguments='{"expre'),
            openai_tool_delta(0, arguments='ssion": "6'),
            openai_tool_delta(0, arguments=' * 7"}'),
            finish_reason="tool_calls",
        )
    )

    events = await collect(model_for(fake_server), HELLO)

    deltas = [event.tool_call_delta for event in events if event.kind == "tool_call"]
    assert [(d.index, d.id, d.name) for d in deltas][0] == (0, "call_1", "calculator")
    assert "".join(d.arguments for d in deltas) == '{"expression": "6 * 7"}'
    response = completed(events)
    assert response.message.tool_calls == (
        ToolCall("call_1", "calculator", {"expression": "6 * 7"}),
    )
    assert response.finish_reason == "tool_calls"


async def test_two_tool_calls_in_one_answer_keep_their_order_and_ids(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_stream(
            {"content": "Checking both."},
            openai_tool_delta(0, id="call_x", name="calculator", arguments='{"expression":'),
            openai_tool_delta(1, id="call_y", name="clock", arguments='{"timezone": '),
            openai_tool_delta(0, arguments=' "1 + 1"}'),
            openai_tool_delta(1, arguments='"UTC"}'),
            finish_reason="tool_calls",
        )
    )

    response = completed(await collect(model_for(fake_server), HELLO))

    assert response.message.content == "Checking both."
    assert response.message.tool_calls == (
        ToolCall("call_x", "calculator", {"expression": "1 + 1"}),
        ToolCall("call_y", "clock", {"timezone": "UTC"}),
    )


async def test_arguments_that_are_not_json_are_kept_raw_and_sent_back_unchanged(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_stream(
            openai_tool_delta(0, id="call_1", name="calculator", arguments='{"expression": 6 *'),
            finish_reason="tool_calls",
        )
    )

    response = completed(await collect(model_for(fake_server), HELLO))

    [call] = response.message.tool_calls
    assert call.arguments == {"_raw": '{"expression": 6 *'}
    [entry] = to_chat_messages((response.message,))
    assert entry["tool_calls"][0]["function"]["arguments"] == '{"expression": 6 *'


async def test_reasoning_content_streams_as_reasoning_deltas(fake_server: FakeServer) -> None:
    fake_server.script(
        openai_stream(
            {"reasoning_content": "The user wants "},
            {"reasoning_content": "a greeting."},
            {"content": "Hello!"},
        )
    )

    events = await collect(model_for(fake_server), HELLO)

    assert [e.delta for e in events if e.kind == "reasoning"] == ["The user wants ", "a greeting."]
    response = completed(events)
    assert response.message.reasoning == "The user wants a greeting."
    assert response.message.content == "Hello!"


async def test_usage_is_zero_when_the_server_reports_none(fake_server: FakeServer) -> None:
    fake_server.script(openai_text("Hi", usage=None))

    response = completed(await collect(model_for(fake_server), HELLO))

    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


async def test_self_hosted_server_without_a_key_gets_a_placeholder(
    fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    fake_server.script(openai_text("Hi"))

    await collect(model_for(fake_server), HELLO)

    assert fake_server.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_key_is_read_from_the_named_variable_at_call_time(
    fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_for(fake_server, api_key_env="VLLM_TOKEN")
    monkeypatch.setenv("VLLM_TOKEN", "first")
    fake_server.script(openai_text("a"), openai_text("b"))

    await collect(model, HELLO)
    monkeypatch.setenv("VLLM_TOKEN", "second")
    await collect(model, HELLO)

    assert [r.headers["authorization"] for r in fake_server.requests] == [
        "Bearer first",
        "Bearer second",
    ]


async def test_openai_without_a_key_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    model = OpenAIChatModel("gpt-4o-mini", api_key_env="OPENAI_API_KEY")

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert caught.value.kind == "config"
    assert "OPENAI_API_KEY" in str(caught.value)
    assert caught.value.retryable is False


async def test_rejected_key_is_an_auth_error_that_does_not_reveal_the_key(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_error(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key")
    )

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, max_retries=2), HELLO)

    error = caught.value
    assert (error.kind, error.status, error.provider, error.retryable) == (
        "auth",
        401,
        "openai",
        False,
    )
    message = str(error)
    assert f"{fake_server.url}/v1" in message
    assert "OPENAI_API_KEY" in message
    assert KEY not in message
    assert KEY[:12] not in message
    assert len(fake_server.requests) == 1  # a wrong key is not retried


async def test_unknown_model_is_a_not_found_error_naming_the_model(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_error(404, "The model `test-model` does not exist.", code="model_not_found")
    )

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server), HELLO)

    assert caught.value.kind == "not_found"
    assert caught.value.status == 404
    assert "'test-model'" in str(caught.value)
    assert "does not exist" in str(caught.value)


async def test_rate_limit_is_retried_with_the_servers_wait_then_reported(
    fake_server: FakeServer,
) -> None:
    limited = {"retry-after-ms": "1"}
    fake_server.script(
        openai_error(429, "Slow down.", type="rate_limit_error", headers=limited),
        openai_error(429, "Slow down.", type="rate_limit_error", headers=limited),
    )
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, max_retries=1), HELLO)

    elapsed = time.monotonic() - started
    assert caught.value.kind == "rate_limited"
    assert caught.value.status == 429
    assert caught.value.retryable is True
    assert "1 retry" in str(caught.value)
    assert len(fake_server.requests) == 2
    assert fake_server.requests[1].headers["x-stainless-retry-count"] == "1"
    # The SDK's own first backoff is at least 0.375 s; 1 ms means it honoured the header.
    assert elapsed < 0.35


async def test_rate_limit_followed_by_success_answers_normally(fake_server: FakeServer) -> None:
    fake_server.script(
        openai_error(429, "Slow down.", headers={"retry-after-ms": "1"}), openai_text("Fine.")
    )

    response = completed(await collect(model_for(fake_server, max_retries=1), HELLO))

    assert response.message.content == "Fine."
    assert len(fake_server.requests) == 2


async def test_server_errors_are_retried_then_reported(fake_server: FakeServer) -> None:
    failing = {"retry-after-ms": "1"}
    fake_server.script(
        openai_error(503, "Overloaded.", type="server_error", headers=failing),
        openai_error(503, "Overloaded.", type="server_error", headers=failing),
    )

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, max_retries=1), HELLO)

    assert (caught.value.kind, caught.value.status, caught.value.retryable) == ("server", 503, True)
    assert len(fake_server.requests) == 2


async def test_a_server_that_never_answers_times_out(fake_server: FakeServer) -> None:
    fake_server.script(Reply(stall_before_headers=True))

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server, timeout=0.5), HELLO)

    assert caught.value.kind == "timeout"
    assert "0.5 s" in str(caught.value)
    assert caught.value.retryable is True


async def test_a_stream_that_goes_silent_mid_answer_times_out(fake_server: FakeServer) -> None:
    fake_server.script(Reply(events=[sse(openai_chunk({"content": "Hel"}))], end="stall"))
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in model_for(fake_server, timeout=0.5).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["Hel"]
    assert caught.value.kind == "timeout"
    assert "stopped sending" in str(caught.value)


async def test_a_stream_dropped_mid_answer_is_reported_as_dropped(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        Reply(
            events=[sse(openai_chunk({"content": piece})) for piece in ("One ", "two ")],
            end="drop",
        )
    )
    seen: list[str] = []

    with pytest.raises(ProviderError) as caught:
        async for event in model_for(fake_server).stream(HELLO):
            seen.append(event.delta)

    assert seen == ["One ", "two "]
    assert caught.value.kind == "stream_dropped"
    assert "dropped in the middle of the answer" in str(caught.value)
    assert caught.value.retryable is True


async def test_a_stream_that_ends_without_a_finish_reason_is_incomplete(
    fake_server: FakeServer,
) -> None:
    fake_server.script(Reply(events=[sse(openai_chunk({"content": "Half"}))]))

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server), HELLO)

    assert caught.value.kind == "stream_dropped"


async def test_an_error_object_inside_the_stream_is_a_server_error(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        Reply(
            events=[
                sse(openai_chunk({"content": "Hel"})),
                sse({"error": {"message": "the model crashed", "type": "server_error"}}),
            ]
        )
    )

    with pytest.raises(ProviderError) as caught:
        await collect(model_for(fake_server), HELLO)

    assert caught.value.kind == "server"
    assert "the model crashed" in str(caught.value)


async def test_an_unreachable_server_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIChatModel("test-model", base_url=url, max_retries=0, timeout=2)

    with pytest.raises(ProviderError) as caught:
        await collect(model, HELLO)

    assert caught.value.kind == "connection"
    assert url in str(caught.value)


async def test_cancelling_a_stream_closes_the_http_connection(fake_server: FakeServer) -> None:
    fake_server.script(Reply(events=[sse(openai_chunk({"content": "Thinking"}))], end="stall"))
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


async def test_closing_a_stream_early_closes_the_http_connection(fake_server: FakeServer) -> None:
    fake_server.script(Reply(events=[sse(openai_chunk({"content": "Thinking"}))], end="stall"))
    stream = model_for(fake_server, timeout=30).stream(HELLO)

    first = await asyncio.wait_for(anext(stream), 5)
    await stream.aclose()

    assert first.delta == "Thinking"
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)


async def test_agent_runs_a_tool_calling_turn_against_the_server(
    fake_server: FakeServer,
) -> None:
    fake_server.script(
        openai_stream(
            {"content": "Let me compute."},
            openai_tool_delta(0, id="call_calc", name="calculator", arguments='{"expression": '),
            openai_tool_delta(0, arguments='"6 * 7"}'),
            finish_reason="tool_calls",
            usage=(30, 12),
        ),
        openai_text("6 * 7 ", "is 42.", usage=(48, 5)),
    )
    agent = Agent(model_for(fake_server), system_prompt="Use tools.", tools=[calculator])

    events = [event async for event in agent.stream("What is 6 * 7?")]

    answer = [e for e in events if e.type == AgentEventType.RUN_COMPLETED]
    assert answer, "the run did not complete"
    assert "".join(e.delta for e in events if e.type == AgentEventType.TEXT_DELTA) == (
        "Let me compute.6 * 7 is 42."
    )
    assert [e.type for e in events if e.type.name.startswith("TOOL_")][-1] == (
        AgentEventType.TOOL_COMPLETED
    )
    first, second = (request.body for request in fake_server.requests)
    assert first["messages"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    assert [tool["function"]["name"] for tool in first["tools"]] == ["calculator"]
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [
                {
                    "id": "call_calc",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "6 * 7"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_calc", "content": "42"},
    ]
