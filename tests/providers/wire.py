"""The providers' streaming wire formats as bytes: SSE framing, Chat Completions, Messages."""

from __future__ import annotations

import json
from typing import Any

from .loopback import Reply

# -- SSE framing -----------------------------------------------------------------------------


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event carrying JSON data."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


# -- OpenAI Chat Completions wire format -----------------------------------------------------


def openai_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A chat.completion.chunk; with usage only, the final usage chunk (no choices)."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "test-model",
        "choices": [],
    }
    if delta is not None or finish_reason is not None:
        chunk["choices"] = [
            {"index": 0, "delta": delta or {}, "finish_reason": finish_reason, "logprobs": None}
        ]
    if usage is not None:
        prompt, completion = usage
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return chunk


def openai_tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    """A delta carrying one fragment of one tool call."""
    part: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        part["id"] = id
        part["type"] = "function"
    if name is not None:
        part["function"]["name"] = name
    return {"tool_calls": [part]}


def openai_stream(
    *deltas: dict[str, Any], finish_reason: str = "stop", usage: tuple[int, int] | None = (11, 7)
) -> Reply:
    """A complete streamed answer: role, the deltas, the finish chunk, usage, [DONE]."""
    chunks = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk(delta) for delta in deltas]
    chunks.append(openai_chunk({}, finish_reason=finish_reason))
    if usage is not None:
        chunks.append(openai_chunk(usage=usage))
    return Reply(events=[sse(chunk) for chunk in chunks] + [b"data: [DONE]\n\n"])


def openai_text(*pieces: str, usage: tuple[int, int] | None = (11, 7)) -> Reply:
    """A streamed text answer in the given pieces."""
    return openai_stream(*({"content": piece} for piece in pieces), usage=usage)


def openai_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An OpenAI-style JSON error response."""
    return Reply(
        status,
        json={"error": {"message": message, "type": type, "param": None, "code": code}},
        headers=dict(headers or {}),
    )


# -- Anthropic Messages wire format ----------------------------------------------------------


def anthropic_message_start(input_tokens: int = 25, *, cache_read: int = 0) -> bytes:
    return sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": cache_read,
                },
            },
        },
        "message_start",
    )


def anthropic_block(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> list[bytes]:
    """content_block_start, its deltas, content_block_stop."""
    frames = [
        sse(
            {"type": "content_block_start", "index": index, "content_block": block},
            "content_block_start",
        )
    ]
    frames += [
        sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        for delta in deltas
    ]
    frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return frames


def anthropic_text_block(index: int, *pieces: str) -> list[bytes]:
    return anthropic_block(
        index,
        {"type": "text", "text": ""},
        *({"type": "text_delta", "text": piece} for piece in pieces),
    )


def anthropic_thinking_block(index: int, *pieces: str) -> list[bytes]:
    deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces]
    deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
    return anthropic_block(index, {"type": "thinking", "thinking": "", "signature": ""}, *deltas)


def anthropic_tool_block(index: int, id: str, name: str, *fragments: str) -> list[bytes]:
    return anthropic_block(
        index,
        {"type": "tool_use", "id": id, "name": name, "input": {}},
        *({"type": "input_json_delta", "partial_json": fragment} for fragment in fragments),
    )


def anthropic_message_end(stop_reason: str = "end_turn", output_tokens: int = 9) -> list[bytes]:
    return [
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]


def anthropic_stream(
    *blocks: list[bytes],
    stop_reason: str = "end_turn",
    input_tokens: int = 25,
    output_tokens: int = 9,
) -> Reply:
    """A complete streamed message: message_start, a ping, the blocks, message_delta/stop."""
    frames = [anthropic_message_start(input_tokens), sse({"type": "ping"}, "ping")]
    for block in blocks:
        frames += block
    frames += anthropic_message_end(stop_reason, output_tokens)
    return Reply(events=frames)


def anthropic_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> Reply:
    """An Anthropic-style JSON error response."""
    return Reply(
        status,
        json={"type": "error", "error": {"type": type, "message": message}},
        headers=dict(headers or {}),
    )
