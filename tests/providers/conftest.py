"""A loopback HTTP server speaking the providers' streaming wire formats, for the SDK adapters.

The server runs in threads (stdlib ``http.server``), records every request it receives and
answers each with the next scripted ``Reply``: a JSON body, or SSE frames sent one chunk at a
time with HTTP/1.1 chunked encoding. A streamed reply then either finishes properly, drops
(the socket is shut without the final chunk, as when a proxy or the server dies mid-answer)
or stalls until the client goes away (which the server notices and reports), or keeps
sending one frame at an interval until the client goes away (keep-alives, a trickle).
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

# -- the server ------------------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    json: Any = None  # a complete JSON body (when there are no events)
    events: list[bytes] = field(default_factory=list)  # SSE frames, one chunk each
    headers: dict[str, str] = field(default_factory=dict)
    end: Literal["finish", "drop", "stall", "repeat"] = "finish"  # how a streamed reply ends
    repeat: bytes = b": keep-alive\n\n"  # with end="repeat": sent again and again
    every: float = 0.05  # with end="repeat": seconds between two repeats
    stall_before_headers: bool = False  # say nothing at all until the client gives up


@dataclass
class RecordedRequest:
    """What the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # the decoded JSON body


class FakeServer:
    """The scripted server; ``url`` is its root, e.g. http://127.0.0.1:54321."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.replies: deque[Reply] = deque()
        self.release = threading.Event()  # set at teardown: stalled handlers return
        self.client_disconnected = threading.Event()  # a stalled handler saw the client leave
        self.repeats_sent = 0  # frames a reply with end="repeat" has sent so far
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join(5)

    def _next_reply(self) -> Reply:
        try:
            return self.replies.popleft()
        except IndexError:
            return Reply(
                500,
                json={"error": {"message": "the fake server has no scripted reply left"}},
                headers={"x-should-retry": "false"},
            )


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close waits for the handlers, so no socket outlives a test
    fake: FakeServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, like a real API server
    timeout = 5  # an idle keep-alive connection cannot hold teardown for longer
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fake.requests.append(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
        )
        reply = fake._next_reply()
        if reply.stall_before_headers:
            self._wait_for_client_to_leave()
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if not reply.events:
            payload = json.dumps(reply.json).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for frame in reply.events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
        if reply.end == "finish":
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        self.close_connection = True
        if reply.end == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
        elif reply.end == "repeat":
            self._repeat_until_client_leaves(reply)
        else:
            self._wait_for_client_to_leave()

    def _repeat_until_client_leaves(self, reply: Reply) -> None:
        fake = self.server.fake
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(reply.repeat), reply.repeat))
                self.wfile.flush()
            except OSError:
                fake.client_disconnected.set()
                return
            fake.repeats_sent += 1
            if self._client_left(reply.every):
                fake.client_disconnected.set()
                return
            if fake.release.is_set():
                return

    def _client_left(self, within: float) -> bool:
        readable, _, _ = select.select([self.connection], [], [], within)
        if not readable:
            return False
        try:
            return not self.connection.recv(4096)
        except OSError:
            return True

    def _wait_for_client_to_leave(self) -> None:
        fake = self.server.fake
        deadline = time.monotonic() + 10
        while not fake.release.is_set() and time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.02)
            if not readable:
                continue
            try:
                data = self.connection.recv(4096)
            except OSError:
                data = b""
            if not data:
                fake.client_disconnected.set()
                return


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDKs read these on their own; a developer's shell must not change what tests see.
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_ADMIN_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_PROFILE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


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


# -- consuming a model -----------------------------------------------------------------------


async def collect(model: Any, request: Any) -> list[Any]:
    """Every ModelEvent of one call (a safety-net timeout keeps a broken test from hanging)."""

    async def run() -> list[Any]:
        return [event async for event in model.stream(request)]

    return await asyncio.wait_for(run(), 10)


def texts(events: list[Any]) -> list[str]:
    return [event.delta for event in events if event.kind == "text"]


def completed(events: list[Any]) -> Any:
    """The single completed response, which must be the last event."""
    finals = [event for event in events if event.kind == "completed"]
    assert len(finals) == 1
    assert events[-1] is finals[0]
    return finals[0].response


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
