"""Each SDK adapter described once for the contract tests: how to build it, how its wire looks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.providers.anthropic_messages import AnthropicMessagesModel
from agents.providers.openai_chat import OpenAIChatModel

from .conftest import (
    FakeServer,
    Reply,
    anthropic_error,
    anthropic_message_start,
    anthropic_stream,
    anthropic_text_block,
    openai_chunk,
    openai_error,
    openai_text,
    sse,
)


@dataclass(frozen=True)
class Adapter:
    """One provider adapter and the wire format its loopback server speaks."""

    name: str  # the registry key, also the ProviderError's provider
    key_env: str  # the environment variable the adapter reads its key from
    path: str  # where requests arrive
    build: Callable[..., Any]  # (server url, **options) -> the model
    answer: Callable[..., Reply]  # (*text pieces) -> a complete streamed answer
    opening: Callable[[str], list[bytes]]  # frames that start an answer with one text delta
    more_text: Callable[[str], bytes]  # one further text delta of that answer
    error: Callable[..., Reply]  # (status, message, type=..., headers=...) -> an error reply
    server_type: str  # the error type a 5xx carries on this wire

    def model(self, server: FakeServer, **options: Any) -> Any:
        options.setdefault("max_retries", 0)
        return self.build(server.url, **options)


def _openai_model(url: str, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=f"{url}/v1", **options)


def _anthropic_model(url: str, **options: Any) -> AnthropicMessagesModel:
    return AnthropicMessagesModel("claude-test", base_url=url, **options)


OPENAI = Adapter(
    name="openai",
    key_env="OPENAI_API_KEY",
    path="/v1/chat/completions",
    build=_openai_model,
    answer=lambda *pieces: openai_text(*pieces),
    opening=lambda piece: [
        sse(openai_chunk({"role": "assistant", "content": ""})),
        sse(openai_chunk({"content": piece})),
    ],
    more_text=lambda piece: sse(openai_chunk({"content": piece})),
    error=openai_error,
    server_type="server_error",
)

ANTHROPIC = Adapter(
    name="anthropic",
    key_env="ANTHROPIC_API_KEY",
    path="/v1/messages",
    build=_anthropic_model,
    answer=lambda *pieces: anthropic_stream(anthropic_text_block(0, *pieces)),
    opening=lambda piece: [anthropic_message_start(), *anthropic_text_block(0, piece)[:2]],
    more_text=lambda piece: sse(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
        "content_block_delta",
    ),
    error=anthropic_error,
    server_type="api_error",
)

ADAPTERS = (OPENAI, ANTHROPIC)
