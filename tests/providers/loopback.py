"""A loopback HTTP server speaking the providers' streaming wire formats, for the SDK adapters.

The server runs in threads (stdlib ``http.server``), records every request it receives and
answers each with the next scripted ``Reply``: a JSON body, or SSE frames sent one chunk at a
time with HTTP/1.1 chunked encoding. A streamed reply then either finishes properly, drops
(the socket is shut without the final chunk, as when a proxy or the server dies mid-answer),
stalls until the client goes away (which the server notices and reports), or keeps sending
one frame at an interval until the client goes away (keep-alives, a trickle).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal


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
    client_port: int  # the client's end of the connection: equal ports, one reused connection


class FakeServer:
    """The scripted server; ``url`` is its root, e.g. http://127.0.0.1:54321."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.replies: deque[Reply] = deque()
        self.release = threading.Event()  # set at teardown: stalled handlers return
        self.client_disconnected = threading.Event()  # a stalled handler saw the client leave
        self.repeats_sent = 0  # frames a reply with end="repeat" has sent so far
        self.closed_by_client: list[int] = []  # client ports of connections the client closed
        self.connection_closed = threading.Event()  # set whenever the client closes one
        self._open: set[socket.socket] = set()  # connections a handler is still serving
        self._open_lock = threading.Lock()
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
        with self._open_lock:
            # Clients may pool idle connections until their event loop ends; shut them
            # here so the handler threads return now rather than at their read timeout.
            for connection in self._open:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
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

    def handle(self) -> None:
        fake = self.server.fake
        with fake._open_lock:
            fake._open.add(self.connection)
        try:
            super().handle()
        finally:
            with fake._open_lock:
                fake._open.discard(self.connection)
        # An empty request line is the client's end of file (a read timeout leaves the last).
        if getattr(self, "raw_requestline", None) == b"" and not fake.release.is_set():
            fake.closed_by_client.append(self.client_address[1])
            fake.connection_closed.set()

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fake.requests.append(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=json.loads(raw) if raw else None,
                client_port=self.client_address[1],
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


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
