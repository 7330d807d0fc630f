"""OpenAIChatModel: the model protocol over the Chat Completions streaming API.

Works with OpenAI itself and with servers that speak the same API: vLLM, the llama.cpp
server, Ollama's ``/v1``, LM Studio. The official ``openai`` SDK does the HTTP, the
retries (429, 5xx, timeouts, with the server's ``retry-after``/``retry-after-ms``) and the
SSE decoding; this module converts our conversation to the wire format, turns the chunks
into ModelEvents and every failure into a ProviderError.

Tool-call arguments arrive as JSON text split across chunks. They are assembled per call
index and decoded once the stream ends. Text that is not a JSON object is kept as
``{"_raw": "<the text>"}``: the tool's argument validation then rejects it with a message
the model can read and correct, and when the conversation is sent back the raw text is
restored, so the model sees exactly what it produced.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..runtime.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ..runtime.model import ModelEvent, ModelRequest, ModelResponse, ModelUsage, ToolCallDelta
from ..runtime.tools import ToolDefinition
from .clients import LoopClients
from .errors import (
    ProviderError,
    connection_error,
    incomplete_stream_error,
    scrub,
    status_error,
    timeout_error,
)
from .time_limits import DEFAULT_DEADLINE, CallClock, check_limits
from .tool_arguments import decode_arguments, encode_arguments
from .usage import openai_usage

try:
    import openai
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise ImportError(
        "OpenAIChatModel needs the 'openai' package: pip install 'openai>=1.40'"
    ) from exc

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Self-hosted servers ignore the key, but the SDK (and some servers) want a non-empty one.
PLACEHOLDER_KEY = "not-needed"

_FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def to_chat_messages(messages: tuple[AnyMessage, ...]) -> list[dict[str, Any]]:
    """Our conversation as Chat Completions ``messages``."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            converted.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            converted.append({"role": "user", "content": message.content})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                # The canonical form of a text-less tool-call turn is a null content.
                entry["content"] = message.content or None
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": encode_arguments(call.arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            converted.append(entry)
        elif isinstance(message, ToolMessage):
            converted.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        else:
            raise TypeError(f"cannot send {type(message).__name__} to a chat model")
    return converted


def to_chat_tools(tools: tuple[ToolDefinition, ...]) -> list[dict[str, Any]]:
    """Our tool definitions as Chat Completions ``tools``."""
    return [
        {
            "type": "function",
            "function": {
                "name": definition.name,
                "description": definition.description,
                "parameters": dict(definition.parameters),
            },
        }
        for definition in tools
    ]


@dataclass(slots=True)
class _PartialCall:
    """One tool call being assembled from its streamed fragments."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _is_openai_host(base_url: str | None) -> bool:
    if base_url is None:
        return True
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "api.openai.com"


class OpenAIChatModel:
    """A Chat Completions model; the API key is read from ``api_key_env`` on every call."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        deadline: float = DEFAULT_DEADLINE,
        max_retries: int = 2,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("OpenAIChatModel needs a model name")
        check_limits(timeout=timeout, deadline=deadline)
        if max_retries < 0:
            raise ValueError("max_retries cannot be negative")
        self.model = model
        self.base_url = base_url.rstrip("/") if base_url else None
        self.api_key_env = api_key_env
        self.timeout = timeout  # seconds without a data event before the call fails
        self.deadline = deadline  # seconds the whole call may take, retries included
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_headers = dict(extra_headers or {})
        self._clients = LoopClients(self._client)  # reused by the calls of each event loop

    @property
    def where(self) -> str:
        """How messages name the server."""
        if self.base_url is None:
            return "OpenAI"
        return f"OpenAI-compatible provider at {self.base_url}"

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={self.base_url!r})"

    def _api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if key:
            return key
        if _is_openai_host(self.base_url):
            raise ProviderError(
                f"{self.where} needs an API key, but the environment variable "
                f"{self.api_key_env} is not set. Set it, or point base_url at a "
                "self-hosted server.",
                provider=PROVIDER,
                kind="config",
            )
        return PLACEHOLDER_KEY

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create`` (without the client options)."""
        if request.server_tools:
            raise ProviderError(
                f"{self.where} cannot run provider-hosted tools "
                f"({', '.join(t.type for t in request.server_tools)}): the Chat Completions API "
                "has none. Remove them from this agent or use a provider that offers them.",
                provider=PROVIDER,
                kind="config",
            )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = to_chat_tools(request.tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            # OpenAI's reasoning models refuse the older name; self-hosted servers know only it.
            name = "max_completion_tokens" if _is_openai_host(self.base_url) else "max_tokens"
            body[name] = self.max_tokens
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        key = self._api_key()
        body = self.request_body(request)
        clock = CallClock(
            provider=PROVIDER,
            where=self.where,
            timeout=self.timeout,
            deadline=self.deadline,
            max_retries=self.max_retries,
        )
        # Closing the response (``async with chunks``) on any exit, cancellation included,
        # closes its HTTP connection; the shared client itself stays open for the next call.
        client = await self._clients.get(key)
        try:
            chunks = await clock.request(client.chat.completions.create(**body))
        except openai.OpenAIError as exc:
            raise self._translate(exc, key, streaming=False) from exc
        async with chunks, aclosing(self._events(chunks, key, clock)) as events:
            async for event in events:
                yield event

    def _client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self.base_url or DEFAULT_BASE_URL,
            timeout=self.timeout,
            max_retries=self.max_retries,
            default_headers=self.extra_headers or None,
        )

    async def _events(
        self, chunks: Any, key: str, clock: CallClock
    ) -> AsyncGenerator[ModelEvent, None]:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, _PartialCall] = {}
        finish_reason: str | None = None
        usage = ModelUsage()
        iterator = chunks.__aiter__()
        while True:
            try:
                chunk = await clock.next(iterator)
            except StopAsyncIteration:
                break
            except openai.OpenAIError as exc:
                raise self._translate(exc, key, streaming=True) from exc
            if chunk.usage is not None:
                # With include_usage the last chunk carries it; some servers repeat it on
                # every chunk, cumulatively, so the latest report wins.
                usage = openai_usage(chunk.usage)
            for choice in chunk.choices or ():
                if choice.index != 0:
                    continue  # we never ask for n > 1
                delta = choice.delta
                # vLLM and llama.cpp send reasoning_content; newer vLLM and Ollama say reasoning.
                thought = getattr(delta, "reasoning_content", None) or getattr(
                    delta, "reasoning", None
                )
                if isinstance(thought, str) and thought:
                    reasoning.append(thought)
                    yield ModelEvent.reasoning(thought)
                if delta.content:
                    text.append(delta.content)
                    yield ModelEvent.text(delta.content)
                for part in delta.tool_calls or ():
                    partial = calls.setdefault(part.index, _PartialCall())
                    name = part.function.name if part.function else None
                    fragment = (part.function.arguments if part.function else None) or ""
                    if part.id:
                        partial.id = part.id
                    if name and not partial.name:
                        partial.name = name
                    partial.arguments.append(fragment)
                    yield ModelEvent.tool_call(
                        ToolCallDelta(
                            index=part.index, id=part.id or None, name=name, arguments=fragment
                        )
                    )
                if choice.finish_reason:
                    finish_reason = choice.finish_reason
        if finish_reason is None:
            raise incomplete_stream_error(provider=PROVIDER, where=self.where)
        tool_calls = tuple(
            ToolCall(
                id=partial.id or f"call_{index}",
                name=partial.name,
                arguments=decode_arguments("".join(partial.arguments)),
            )
            for index, partial in sorted(calls.items())
            if partial.name
        )
        reason = _FINISH_REASONS.get(finish_reason, finish_reason)
        if tool_calls and reason == "stop":
            reason = "tool_calls"  # Ollama reports "stop" even when it calls tools
        message = AssistantMessage(
            "".join(text), tool_calls=tool_calls, reasoning="".join(reasoning) or None
        )
        yield ModelEvent.completed(
            ModelResponse(message=message, finish_reason=reason, usage=usage)
        )

    def _translate(self, exc: Exception, key: str, *, streaming: bool) -> ProviderError:
        where = self.where
        if isinstance(exc, openai.APITimeoutError):
            return timeout_error(
                provider=PROVIDER,
                where=where,
                timeout=self.timeout,
                max_retries=self.max_retries,
                streaming=streaming,
            )
        if isinstance(exc, openai.APIConnectionError):
            return connection_error(provider=PROVIDER, where=where, cause=exc, streaming=streaming)
        if isinstance(exc, openai.APIStatusError):
            return status_error(
                provider=PROVIDER,
                where=where,
                status=exc.status_code,
                detail=scrub(_server_message(exc), key),
                model=self.model,
                api_key_env=self.api_key_env,
                max_retries=self.max_retries,
            )
        if isinstance(exc, openai.APIError):
            # An error object inside a 200 stream: the server gave up mid-answer.
            return ProviderError(
                f"{where} reported an error while answering: {scrub(_server_message(exc), key)}",
                provider=PROVIDER,
                kind="server",
            )
        return ProviderError(
            f"{where} could not be used: {scrub(str(exc), key)}", provider=PROVIDER, kind="config"
        )


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str):
        return body
    return getattr(exc, "message", "") or str(exc)
