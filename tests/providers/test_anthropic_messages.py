"""What only the Messages wire does (conversion, its error events), via the real SDK.

The behaviour every adapter shares is in test_adapter_contract.py.
"""

from __future__ import annotations

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

from .loopback import FakeServer, Reply
from .streams import collect, completed
from .wire import (
    anthropic_message_start,
    anthropic_stream,
    anthropic_text_block,
    anthropic_tool_block,
    sse,
)

KEY = "sk-ant-test-secret-0123456789"
HELLO = ModelRequest(messages=(SystemMessage("Be brief."), UserMessage("Say hello")))


def model_for(server: FakeServer, **options: object) -> AnthropicMessagesModel:
    options.setdefault("max_retries", 0)
    return AnthropicMessagesModel("claude-test", base_url=server.url, **options)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


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


async def test_max_tokens_stop_is_reported_as_length(fake_server: FakeServer) -> None:
    fake_server.script(anthropic_stream(anthropic_text_block(0, "Cut"), stop_reason="max_tokens"))

    response = completed(await collect(model_for(fake_server), HELLO))

    assert response.finish_reason == "length"


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
