"""Each SDK adapter described once for the contract tests: how to build it, how its wire looks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.providers.anthropic_messages import AnthropicMessagesModel
from agents.providers.openai_chat import OpenAIChatModel

from .loopback import FakeServer, Reply
from .wire import (
    anthropic_error,
    anthropic_message_start,
    anthropic_stream,
    anthropic_text_block,
    anthropic_thinking_block,
    anthropic_tool_block,
    openai_chunk,
    openai_error,
    openai_stream,
    openai_text,
    openai_tool_delta,
    sse,
)


@dataclass(frozen=True)
class Adapter:
    """One provider adapter and the wire format its loopback server speaks."""

    name: str  # the registry key, also the ProviderError's provider
    key_env: str  # the environment variable the adapter reads its key from
    key: str  # the key tests put there
    url_suffix: str  # appended to the server's root to make the adapter's base_url
    path: str  # where requests arrive
    build: Callable[..., Any]  # (base_url or None, **options) -> the model
    answer: Callable[..., Reply]  # (*text pieces) -> a complete streamed answer
    tool_answer: Callable[..., Reply]  # (call id, tool name, *argument fragments) -> an answer
    reasoning_answer: Callable[[list[str], str], Reply]  # (thoughts, text) -> an answer
    opening: Callable[[str], list[bytes]]  # frames that start an answer with one text delta
    more_text: Callable[[str], bytes]  # one further text delta of that answer
    error: Callable[..., Reply]  # (status, message, type=..., headers=...) -> an error reply
    auth_type: str  # the error type of a rejected key on this wire
    not_found_type: str  # the error type of an unknown model
    server_type: str  # the error type of a 5xx

    def base_url(self, server: FakeServer) -> str:
        return f"{server.url}{self.url_suffix}"

    def model(self, server: FakeServer, **options: Any) -> Any:
        """The adapter pointed at the loopback server, without retries unless asked."""
        options.setdefault("max_retries", 0)
        return self.build(self.base_url(server), **options)


def _openai_model(base_url: str | None, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=base_url, **options)


def _anthropic_model(base_url: str | None, **options: Any) -> AnthropicMessagesModel:
    return AnthropicMessagesModel("test-model", base_url=base_url, **options)


def _openai_tool_answer(call_id: str, name: str, *fragments: str) -> Reply:
    return openai_stream(
        openai_tool_delta(0, id=call_id, name=name),
        *(openai_tool_delta(0, arguments=fragment) for fragment in fragments),
        finish_reason="tool_calls",
    )


OPENAI = Adapter(
    name="openai",
    key_env="OPENAI_API_KEY",
    key="sk-test-secret-0123456789",
    url_suffix="/v1",
    path="/v1/chat/completions",
    build=_openai_model,
    answer=lambda *pieces: openai_text(*pieces),
    tool_answer=_openai_tool_answer,
    reasoning_answer=lambda thoughts, text: openai_stream(
        *({"reasoning_content": thought} for thought in thoughts), {"content": text}
    ),
    opening=lambda piece: [
        sse(openai_chunk({"role": "assistant", "content": ""})),
        sse(openai_chunk({"content": piece})),
    ],
    more_text=lambda piece: sse(openai_chunk({"content": piece})),
    error=openai_error,
    auth_type="invalid_request_error",
    not_found_type="invalid_request_error",
    server_type="server_error",
)

ANTHROPIC = Adapter(
    name="anthropic",
    key_env="ANTHROPIC_API_KEY",
    key="sk-ant-test-secret-0123456789",
    url_suffix="",
    path="/v1/messages",
    build=_anthropic_model,
    answer=lambda *pieces: anthropic_stream(anthropic_text_block(0, *pieces)),
    tool_answer=lambda call_id, name, *fragments: anthropic_stream(
        anthropic_tool_block(0, call_id, name, *fragments), stop_reason="tool_use"
    ),
    reasoning_answer=lambda thoughts, text: anthropic_stream(
        anthropic_thinking_block(0, *thoughts), anthropic_text_block(1, text)
    ),
    opening=lambda piece: [anthropic_message_start(), *anthropic_text_block(0, piece)[:2]],
    more_text=lambda piece: sse(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
        "content_block_delta",
    ),
    error=anthropic_error,
    auth_type="authentication_error",
    not_found_type="not_found_error",
    server_type="api_error",
)

ADAPTERS = (OPENAI, ANTHROPIC)
