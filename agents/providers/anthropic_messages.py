"""AnthropicMessagesModel: the model protocol over Anthropic's streaming Messages API.

The official ``anthropic`` SDK does the HTTP, the retries and the SSE decoding; this module
converts our conversation into Messages content blocks, turns the raw stream events into
ModelEvents and every failure into a ProviderError.

Conversion: system messages are joined into the ``system`` parameter; an assistant
message becomes text and ``tool_use`` blocks; tool results become ``tool_result`` blocks in
a user turn, and consecutive user-side messages (several tool results, a steering message
after them) are merged into one turn, as the API expects alternating roles. Reasoning is
not sent back: Anthropic only accepts thinking blocks with the signature we do not keep.
Provider-hosted tool calls (``server_tool_use``) run at Anthropic and are not reported as
tool calls. Tool-call arguments that are not a JSON object are kept as ``{"_raw": text}``,
as in the OpenAI adapter.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from ..runtime.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ..runtime.model import ModelEvent, ModelRequest, ModelResponse, ToolCallDelta
from ..runtime.tools import ServerToolDefinition, ToolDefinition
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
from .tool_arguments import decode_arguments
from .usage import AnthropicUsageTally

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise ImportError(
        "AnthropicMessagesModel needs the 'anthropic' package: pip install 'anthropic>=0.34'"
    ) from exc

# The SDK does not wrap transport errors raised while a stream is read; catch its HTTP
# library's own (httpx2 in current SDKs, httpx before).
try:
    import httpx2 as _http
except ImportError:  # pragma: no cover - depends on the SDK generation
    import httpx as _http  # type: ignore[no-redef, import-not-found]

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
PLACEHOLDER_KEY = "not-needed"

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

# Error types Anthropic sends in a stream's `event: error` (and in error bodies).
_ERROR_KINDS = {
    "overloaded_error": "server",
    "api_error": "server",
    "rate_limit_error": "rate_limited",
    "authentication_error": "auth",
    "permission_error": "auth",
    "not_found_error": "not_found",
    "invalid_request_error": "bad_request",
    "request_too_large": "bad_request",
    "timeout_error": "timeout",
}


def to_anthropic_messages(
    messages: tuple[AnyMessage, ...],
) -> tuple[str, list[dict[str, Any]]]:
    """Our conversation as the Messages API's ``system`` text and ``messages`` turns."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        if isinstance(message, SystemMessage):
            if message.content:
                system.append(message.content)
        elif isinstance(message, UserMessage):
            # Anthropic rejects empty text blocks.
            add("user", [{"type": "text", "text": message.content}] if message.content else [])
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in message.tool_calls
            )
            add("assistant", blocks)
        elif isinstance(message, ToolMessage):
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
        else:
            raise TypeError(f"cannot send {type(message).__name__} to an Anthropic model")
    return "\n\n".join(system), turns


def to_anthropic_tools(
    tools: tuple[ToolDefinition, ...], server_tools: tuple[ServerToolDefinition, ...] = ()
) -> list[dict[str, Any]]:
    """Our tools as Messages ``tools``; server tools pass through as their configuration."""
    converted: list[dict[str, Any]] = []
    for definition in tools:
        entry: dict[str, Any] = {
            "name": definition.name,
            "input_schema": dict(definition.parameters),
        }
        if definition.description:
            entry["description"] = definition.description
        converted.append(entry)
    converted.extend({**server.configuration, "type": server.type} for server in server_tools)
    return converted


@dataclass(slots=True)
class _PartialCall:
    """One tool_use block being assembled from its streamed fragments."""

    id: str
    name: str
    initial: dict[str, Any]  # the input in content_block_start (empty when it streams)
    arguments: list[str] = field(default_factory=list)

    def call(self) -> ToolCall:
        text = "".join(self.arguments)
        arguments = decode_arguments(text) if text.strip() else dict(self.initial)
        return ToolCall(id=self.id, name=self.name, arguments=arguments)


class AnthropicMessagesModel:
    """An Anthropic Messages model; the API key is read from ``api_key_env`` on every call."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        timeout: float = 60.0,
        deadline: float = DEFAULT_DEADLINE,
        max_retries: int = 2,
        max_tokens: int = 4096,
        temperature: float | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("AnthropicMessagesModel needs a model name")
        check_limits(timeout=timeout, deadline=deadline)
        if max_retries < 0:
            raise ValueError("max_retries cannot be negative")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.model = model
        self.base_url = base_url.rstrip("/") if base_url else None
        self.api_key_env = api_key_env
        self.timeout = timeout  # seconds without a data event before the call fails
        self.deadline = deadline  # seconds the whole call may take, retries included
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._clients = LoopClients(self._client)  # reused by the calls of each event loop

    @property
    def where(self) -> str:
        """How messages name the server."""
        if self.base_url is None:
            return "Anthropic"
        return f"Anthropic-compatible provider at {self.base_url}"

    def __repr__(self) -> str:
        return f"AnthropicMessagesModel({self.model!r}, base_url={self.base_url!r})"

    def _api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if key:
            return key
        if self.base_url is None or "api.anthropic.com" in self.base_url:
            raise ProviderError(
                f"{self.where} needs an API key, but the environment variable "
                f"{self.api_key_env} is not set.",
                provider=PROVIDER,
                kind="config",
            )
        return PLACEHOLDER_KEY

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``messages.create`` (without the client options)."""
        system, turns = to_anthropic_messages(request.messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
            "stream": True,
        }
        if system:
            body["system"] = system
        if request.tools or request.server_tools:
            body["tools"] = to_anthropic_tools(request.tools, request.server_tools)
        if self.temperature is not None:
            # Current SDKs no longer list temperature; the API still accepts it.
            body["extra_body"] = {"temperature": self.temperature}
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
        # Closing the response (``async with events``) on any exit, cancellation included,
        # closes its HTTP connection; the shared client itself stays open for the next call.
        client = await self._clients.get(key)
        try:
            events = await clock.request(client.messages.create(**body))
        except anthropic.AnthropicError as exc:
            raise self._translate(exc, key, streaming=False) from exc
        async with events, aclosing(self._events(events, key, clock)) as converted:
            async for event in converted:
                yield event

    def _client(self, key: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=key,
            base_url=self.base_url or DEFAULT_BASE_URL,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    async def _events(
        self, events: Any, key: str, clock: CallClock
    ) -> AsyncGenerator[ModelEvent, None]:
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[_PartialCall] = []
        call_index: dict[int, int] = {}  # content block index -> position in calls
        stop_reason: str | None = None
        tally = AnthropicUsageTally()
        stopped = False
        iterator = events.__aiter__()
        while True:
            try:
                event = await clock.next(iterator)
            except StopAsyncIteration:
                break
            except anthropic.AnthropicError as exc:
                raise self._translate(exc, key, streaming=True) from exc
            except _http.TimeoutException as exc:
                raise self._translate(
                    anthropic.APITimeoutError(request=events.response.request), key, streaming=True
                ) from exc
            except _http.TransportError as exc:
                raise connection_error(
                    provider=PROVIDER, where=self.where, cause=exc, streaming=True
                ) from exc
            kind = getattr(event, "type", None)
            if kind == "message_start":
                tally.update(getattr(event.message, "usage", None))
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "text" and block.text:
                    text.append(block.text)
                    yield ModelEvent.text(block.text)
                elif block.type == "thinking" and getattr(block, "thinking", ""):
                    reasoning.append(block.thinking)
                    yield ModelEvent.reasoning(block.thinking)
                elif block.type == "tool_use":
                    initial = block.input if isinstance(block.input, dict) else {}
                    call_index[event.index] = len(calls)
                    calls.append(_PartialCall(id=block.id, name=block.name, initial=initial))
                    yield ModelEvent.tool_call(
                        ToolCallDelta(index=call_index[event.index], id=block.id, name=block.name)
                    )
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta" and delta.text:
                    text.append(delta.text)
                    yield ModelEvent.text(delta.text)
                elif delta.type == "thinking_delta" and delta.thinking:
                    reasoning.append(delta.thinking)
                    yield ModelEvent.reasoning(delta.thinking)
                elif delta.type == "input_json_delta" and event.index in call_index:
                    position = call_index[event.index]
                    calls[position].arguments.append(delta.partial_json)
                    yield ModelEvent.tool_call(
                        ToolCallDelta(index=position, arguments=delta.partial_json)
                    )
            elif kind == "message_delta":
                if event.delta.stop_reason:
                    stop_reason = event.delta.stop_reason
                tally.update(getattr(event, "usage", None))
            elif kind == "message_stop":
                stopped = True
        if not stopped:
            raise incomplete_stream_error(provider=PROVIDER, where=self.where)
        reason = _STOP_REASONS.get(stop_reason or "end_turn", stop_reason or "stop")
        message = AssistantMessage(
            "".join(text),
            tool_calls=tuple(partial.call() for partial in calls),
            reasoning="".join(reasoning) or None,
        )
        yield ModelEvent.completed(
            ModelResponse(message=message, finish_reason=reason, usage=tally.usage())
        )

    def _translate(self, exc: Exception, key: str, *, streaming: bool) -> ProviderError:
        where = self.where
        if isinstance(exc, anthropic.APITimeoutError):
            return timeout_error(
                provider=PROVIDER,
                where=where,
                timeout=self.timeout,
                max_retries=self.max_retries,
                streaming=streaming,
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return connection_error(provider=PROVIDER, where=where, cause=exc, streaming=streaming)
        if isinstance(exc, anthropic.APIStatusError):
            detail = scrub(exc.api_message or _body_text(exc.body), key)
            error_type = exc.type if isinstance(exc.type, str) else None
            if exc.status_code < 400:
                # `event: error` inside a 200 stream: no retry happened, the answer broke off.
                kind = _ERROR_KINDS.get(error_type or "", "server")
                named = f" ({error_type})" if error_type else ""
                hint = (
                    " Anthropic is overloaded; try again in a moment."
                    if error_type == "overloaded_error"
                    else " Try again."
                )
                return ProviderError(
                    f"{where} reported an error in the middle of the answer{named}: "
                    f"{detail or 'no details'}.{hint}",
                    provider=PROVIDER,
                    kind=kind,
                )
            return status_error(
                provider=PROVIDER,
                where=where,
                status=exc.status_code,
                detail=detail,
                model=self.model,
                api_key_env=self.api_key_env,
                max_retries=self.max_retries,
            )
        return ProviderError(
            f"{where} could not be used: {scrub(str(exc), key)}", provider=PROVIDER, kind="config"
        )


def _body_text(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return body if isinstance(body, str) else ""
