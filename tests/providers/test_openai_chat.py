"""What only the Chat Completions wire does (conversion, raw arguments, an agent turn).

The behaviour every adapter shares is in test_adapter_contract.py; these run the real SDK.
"""

from __future__ import annotations

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

from .loopback import FakeServer, Reply
from .streams import collect, completed
from .wire import (
    openai_chunk,
    openai_stream,
    openai_text,
    openai_tool_delta,
    sse,
)

KEY = "sk-test-secret-0123456789"
HELLO = ModelRequest(messages=(SystemMessage("Be brief."), UserMessage("Say hello")))


def model_for(server: FakeServer, **options: object) -> OpenAIChatModel:
    options.setdefault("max_retries", 0)
    return OpenAIChatModel("test-model", base_url=f"{server.url}/v1", **options)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


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


async def test_usage_is_zero_when_the_server_reports_none(fake_server: FakeServer) -> None:
    fake_server.script(openai_text("Hi", usage=None))

    response = completed(await collect(model_for(fake_server), HELLO))

    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


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
